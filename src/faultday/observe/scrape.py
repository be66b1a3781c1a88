"""Scrape every component's Prometheus ``/metrics`` into the run's samples."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from faultday.core.events import FaultApplied
from faultday.core.protocols import RunView
from faultday.core.records import Sample
from faultday.core.timebase import TimeBase
from faultday.core.vocab import EventKind

log = logging.getLogger(__name__)

MIN_REAL_INTERVAL = 0.05  # real seconds; a time-scaled run may ask for less
UP = "faultday_scrape_up"  # 1 when a component answered its scrape, 0 when not


@dataclass(slots=True)
class ScrapeStats:
    rounds: int = 0
    failures: int = 0
    max_late: float = 0.0  # real seconds a round started after its schedule
    max_round: float = 0.0  # real seconds one round of every component took


def parse_metrics(text: str, *, t: float, component: str) -> list[Sample]:
    """Prometheus text format → samples labelled with their component."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = tuple(sorted({**s.labels, "component": component}.items()))
            out.append(Sample(t=t, name=s.name, value=float(s.value), labels=labels))
    return out


def scrape_urls(run: RunView) -> dict[str, str]:
    """component → its /metrics URL: every HTTP component, plus a separate metrics port."""
    urls = {
        c: base.rstrip("/") + "/metrics"
        for c, base in run.endpoints().items()
        if base.startswith(("http://", "https://"))
    }
    if run.stack is None:
        return urls
    try:
        for comp in run.stack.describe().components:
            port = comp.ports.get("metrics")
            if port:
                # Triton serves metrics on their own port, not under its HTTP API.
                urls[comp.name] = f"http://127.0.0.1:{port}/metrics"
    except Exception as exc:  # noqa: BLE001 - the description only adds ports; scraping goes on
        log.warning("could not read the stack's metric ports: %s", exc)
    return urls


class MetricsScraper:
    """Every ``interval`` scenario seconds, GET each component's /metrics (bounded timeouts)."""

    name = "scrape"

    def __init__(self, *, interval: float) -> None:
        self.interval = interval
        self.stats = ScrapeStats()
        self._stop = threading.Event()
        # Set by stop() and by a fault taking effect: the loop scrapes again at once.
        self._wake = threading.Event()
        self._first = ""  # the component the last fault hit: scraped first in the next round
        self._thread: threading.Thread | None = None
        self._urls: dict[str, str] = {}
        self._run: RunView | None = None

    def start(self, run: RunView) -> None:
        self._run = run
        self._urls = scrape_urls(run)
        self._timebase = TimeBase(run.clock, warmup=run.scenario.spec.warmup)
        self._real = max(MIN_REAL_INTERVAL, run.clock.wall(self.interval))
        self._thread = threading.Thread(target=self._loop, name="scrape", daemon=True)
        self._thread.start()
        # A replica that dies of its fault (Xid 79) may be gone before the next round.
        run.events.fault_applied.add_listener(self.fault_applied)
        run.event(
            EventKind.SCRAPE_STARTED,
            f"{len(self._urls)} components every {self.interval:g}s",
            components=sorted(self._urls),
        )

    def _loop(self) -> None:
        timeout = min(2.0, max(0.2, self._real))
        skip: set[str] = set()
        with httpx.Client(timeout=timeout) as client:
            nxt = time.monotonic()
            while not self._stop.is_set():
                self.stats.max_late = max(self.stats.max_late, time.monotonic() - nxt)
                began = time.monotonic()
                self.scrape_once(client, skip)
                self.stats.max_round = max(self.stats.max_round, time.monotonic() - began)
                nxt += self._real
                # Never queue up missed rounds: a slow round skips ahead instead.
                nxt = max(nxt, time.monotonic())
                self._wake.wait(max(0.0, nxt - time.monotonic()))
                if self._wake.is_set() and not self._stop.is_set():
                    self._wake.clear()
                    nxt = time.monotonic()  # a fault acted: look now (fault_applied)

    def scrape_once(self, client: httpx.Client, skip: set[str]) -> None:
        assert self._run is not None
        samples: list[Sample] = []
        first, self._first = self._first, ""
        order = sorted(self._urls.items(), key=lambda item: item[0] != first)
        for comp, url in order:
            if comp in skip:
                continue
            wall = time.time()
            t = round(self._timebase.at(wall), 4)
            up = 0.0
            try:
                r = client.get(url)
                if r.status_code == 404:
                    skip.add(comp)  # no metrics there; don't ask again
                    self._run.event(EventKind.SCRAPE_NONE, f"{comp} has no /metrics", target=comp)
                    continue
                if r.status_code == 200:
                    samples += parse_metrics(r.text, t=t, component=comp)
                    up = 1.0
            except (httpx.HTTPError, ValueError) as exc:
                # A component under a fault may not answer; the gap is data too (UP=0).
                log.debug("scrape %s failed: %s", comp, exc)
            if not up:
                self.stats.failures += 1
            samples.append(Sample(t=t, name=UP, value=up, labels=(("component", comp),)))
        self.stats.rounds += 1
        self._run.observations.add_samples(samples)

    def fault_applied(self, applied: FaultApplied) -> None:
        """A fault took effect: scrape now, its target first, before a replica it kills exits.

        The run's ``fault_applied`` listener, on the engine's thread: it only wakes the loop."""
        self._first = applied.target
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._run is not None:
            self._run.events.fault_applied.remove_listener(self.fault_applied)
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
        if self._run is not None:
            s = self.stats
            self._run.event(
                EventKind.SCRAPE_STOPPED,
                f"{s.rounds} rounds",
                rounds=s.rounds,
                failures=s.failures,
                max_late=round(s.max_late, 4),
                max_round=round(s.max_round, 4),
            )
            self._run = None
