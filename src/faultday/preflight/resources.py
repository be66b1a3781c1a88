"""Resources: context length, KV-cache headroom at the target concurrency, the GPU as
dcgm-exporter reports it, and each component's memory (RSS) and open descriptors."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from faultday.core.journal import JournalCheck
from faultday.core.stackinfo import ComponentInfo
from faultday.core.yamlpos import PathKey
from faultday.preflight.base import Area, Subject, check
from faultday.preflight.config import agent_max_tokens

LLM_TYPES = ("llmsim", "vllm")
KV_METRIC = "vllm:kv_cache_usage_perc"
KV_METRIC_OLD = "vllm:gpu_cache_usage_perc"  # its name before vLLM 0.10
FB_USED, FB_FREE, GPU_UTIL = "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL"
MEM_COPY_UTIL = "DCGM_FI_DEV_MEM_COPY_UTIL"  # memory bandwidth in use, %
DEFAULT_MAX_TOKENS = 256  # what the workload asks for when neither spec nor policy says
PROBE_TIMEOUT = 60.0  # the KV probe's requests, all together
POLL_S = 0.05
MIB = 1024 * 1024


def check_resources(subject: Subject) -> list[JournalCheck]:
    out: list[JournalCheck] = []
    llms = subject.components(*LLM_TYPES)
    with httpx.Client(trust_env=False) as http:
        lens = {c.name: _max_model_len(http, c) for c in llms}
    for c in llms:
        out.append(_context_check(subject, c, lens[c.name]))
    # The probes run together: a stack's LLMs fill their caches independently.
    with ThreadPoolExecutor(max_workers=max(1, len(llms)), thread_name_prefix="kv") as pool:
        out.extend(pool.map(lambda c: _kv_check(subject, c, lens[c.name]), llms))
    out.extend(_gpu_checks(subject))
    out.extend(_process_checks(subject))
    return out


def _needed_tokens(subject: Subject) -> tuple[int, int]:
    max_tokens = subject.spec.max_tokens or agent_max_tokens(subject) or DEFAULT_MAX_TOKENS
    return subject.spec.max_prompt_tokens, max_tokens


def _max_model_len(http: httpx.Client, comp: ComponentInfo) -> int | None:
    try:
        r = http.get(f"{comp.url}/v1/models", timeout=5.0)
        r.raise_for_status()
        value = r.json()["data"][0].get("max_model_len")
    except (httpx.HTTPError, ValueError, LookupError, AttributeError):
        return None
    return int(value) if isinstance(value, int) else None


def _len_field(subject: Subject, component: str) -> PathKey:
    """Where the profile sets this component's max_model_len (or the component itself)."""
    base: PathKey = ("spec", "components", component)
    spec = subject.profile.spec.components.get(component)
    if spec is None:
        return base
    for i, arg in enumerate(spec.args):
        if arg == "--max-model-len":
            return (*base, "args", min(i + 1, len(spec.args) - 1))
        if arg.startswith("--max-model-len="):
            return (*base, "args", i)
    if "max_model_len" in spec.settings:
        return (*base, "settings", "max_model_len")
    return base


def _context_check(subject: Subject, comp: ComponentInfo, mlen: int | None) -> JournalCheck:
    prompt, max_tokens = _needed_tokens(subject)
    need = prompt + max_tokens
    where = subject.where_in_profile(_len_field(subject, comp.name))
    if mlen is None:
        return check(
            Area.RESOURCES,
            "max_model_len",
            f"{comp.name}: max_model_len",
            ok=None,
            expected=f"≥ {need}",
            where=where,
            message="/v1/models does not say max_model_len",
        )
    return check(
        Area.RESOURCES,
        "max_model_len",
        f"{comp.name}: max_model_len",
        ok=mlen >= need,
        expected=f"≥ {need} (longest prompt {prompt} + max_tokens {max_tokens})",
        observed=str(mlen),
        where=where,
        message="" if mlen >= need else "requests of the workload's longest prompt are refused",
    )


@dataclass(slots=True)
class _Peak:
    value: float | None = None

    def see(self, v: float | None) -> None:
        if v is not None and (self.value is None or v > self.value):
            self.value = v


def _scrape(http: httpx.Client, url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    try:
        r = http.get(f"{url}/metrics", timeout=2.0)
    except httpx.HTTPError:
        return {}
    if r.status_code != 200:
        return {}
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for fam in text_string_to_metric_families(r.text):
            for s in fam.samples:
                out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    except ValueError:
        return {}
    return out


def _kv_now(http: httpx.Client, url: str) -> float | None:
    m = _scrape(http, url)
    values = [v for _, v in m.get(KV_METRIC) or m.get(KV_METRIC_OLD, [])]
    return max(values) if values else None


def _kv_check(subject: Subject, comp: ComponentInfo, mlen: int | None) -> JournalCheck:
    spec = subject.spec
    prompt, max_tokens = _needed_tokens(subject)
    label = f"{comp.name}: KV cache at {spec.concurrency} concurrent requests"
    limit = f"≤ {spec.max_kv_cache_usage:.0%} used ({1 - spec.max_kv_cache_usage:.0%} headroom)"
    kv_check = partial(check, Area.RESOURCES, "kv_cache", label, expected=limit)
    if mlen is not None:
        prompt = min(prompt, mlen - max_tokens - 8)
    if prompt < 1:
        return kv_check(
            ok=None,
            message=f"max_model_len {mlen} leaves no room for a prompt and {max_tokens} tokens",
        )
    peak, problem = _kv_probe(comp, n=spec.concurrency, prompt=prompt, max_tokens=max_tokens)
    if peak.value is None:
        return kv_check(ok=None, message=problem or f"no {KV_METRIC} in its /metrics")
    return kv_check(
        ok=peak.value <= spec.max_kv_cache_usage and not problem,
        observed=f"peak {peak.value:.1%} ({prompt}-token prompts, {max_tokens} tokens each)",
        message=problem,
        n=spec.concurrency,
    )


def _kv_probe(comp: ComponentInfo, *, n: int, prompt: int, max_tokens: int) -> tuple[_Peak, str]:
    """Send ``n`` long requests at once; the peak KV usage while they run; what failed."""
    peak = _Peak()
    done = threading.Event()
    failures: list[str] = []
    # Single-letter words are one token each to the simulator and close to it for real
    # tokenizers; the count is what the workload sends, not an exact fit. Each prompt
    # starts with its own word: the workload's prompts differ, and identical ones would
    # share their blocks through prefix caching and show headroom that is not there.
    filler = " a" * (prompt - 1)

    def one(http: httpx.Client, model: str, i: int) -> None:
        body = {
            "model": model,
            "prompt": f"r{i}{filler}",
            "max_tokens": max_tokens,
            "min_tokens": max_tokens,  # hold every sequence to its full length
            "ignore_eos": True,
        }
        try:
            r = http.post(f"{comp.url}/v1/completions", json=body, timeout=PROBE_TIMEOUT)
        except httpx.HTTPError as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
            return
        if r.status_code != 200:
            failures.append(f"status {r.status_code}: {r.text[:200]}")

    with httpx.Client(trust_env=False, limits=httpx.Limits(max_connections=n + 2)) as http:
        try:
            model = str(http.get(f"{comp.url}/v1/models", timeout=5.0).json()["data"][0]["id"])
        except (httpx.HTTPError, ValueError, LookupError) as exc:
            return peak, f"cannot list its models: {exc}"
        peak.see(_kv_now(http, comp.url))
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="kv-req") as pool:
            futures = [pool.submit(one, http, model, i) for i in range(n)]
            deadline = time.monotonic() + PROBE_TIMEOUT
            while not all(f.done() for f in futures) and time.monotonic() < deadline:
                peak.see(_kv_now(http, comp.url))
                done.wait(POLL_S)
    problem = f"{len(failures)} of {n} requests failed: {failures[0]}" if failures else ""
    return peak, problem


def _gpu_checks(subject: Subject) -> list[JournalCheck]:
    """Every GPU some component's /metrics reports the DCGM way (dcgm-exporter's names)."""
    out: list[JournalCheck] = []
    seen: set[str] = set()
    with httpx.Client(trust_env=False) as http:
        for comp in subject.components():
            if not comp.url.startswith("http"):
                continue
            m = _scrape(http, comp.url)
            for labels, used in m.get(FB_USED, []):
                gpu = labels.get("UUID") or labels.get("gpu", "?")
                if gpu in seen:
                    continue
                seen.add(gpu)
                free = next((v for lb, v in m.get(FB_FREE, []) if lb == labels), None)
                util = next((v for lb, v in m.get(GPU_UTIL, []) if lb == labels), None)
                bw = next((v for lb, v in m.get(MEM_COPY_UTIL, []) if lb == labels), None)
                out.extend(_gpu_one(subject, comp, used=used, free=free, util=util, bw=bw))
    if not out:
        out.append(
            check(
                Area.RESOURCES,
                "gpu",
                "GPU (dcgm-exporter)",
                ok=None,
                message="no component reports DCGM_FI_DEV_FB_USED: nothing to judge",
            )
        )
    return out


def _gpu_one(
    subject: Subject,
    comp: ComponentInfo,
    *,
    used: float,
    free: float | None,
    util: float | None,
    bw: float | None,
) -> list[JournalCheck]:
    spec = subject.spec
    # (check, what, reading, its ceiling, expected, observed): each passes at or under its ceiling
    readings: list[tuple[str, str, float, float, str, str]] = []
    if free is not None and used + free > 0:
        share, most = used / (used + free), spec.max_gpu_memory_used
        of_total = f"{share:.1%} ({used:.0f} of {used + free:.0f} MiB)"
        readings.append(
            ("gpu_memory", "memory", share, most, f"≤ {most:.0%} of framebuffer used", of_total)
        )
    if util is not None:
        most = spec.max_gpu_util
        readings.append(("gpu_util", "utilisation", util, most, f"≤ {most:g} %", f"{util:g} %"))
    if bw is not None:
        most = spec.max_gpu_bandwidth_util
        readings.append(
            ("gpu_bandwidth", "memory bandwidth", bw, most, f"≤ {most:g} % in use", f"{bw:g} %")
        )
    return [
        check(
            Area.RESOURCES,
            name,
            f"{comp.name}: GPU {what}",
            ok=value <= ceiling,
            expected=expected,
            observed=observed,
        )
        for name, what, value, ceiling, expected, observed in readings
    ]


def _process_checks(subject: Subject) -> list[JournalCheck]:
    spec = subject.spec
    out = []
    for comp in subject.components():
        label = f"{comp.name}: process"
        if comp.pid is None:
            out.append(
                check(Area.RESOURCES, "process", label, ok=None, message="no process ID (driver)")
            )
            continue
        try:
            root = psutil.Process(comp.pid)
            procs = [root, *root.children(recursive=True)]
            rss = sum(_safe(lambda p: p.memory_info().rss, p) for p in procs)
            fds = _safe(lambda p: p.num_fds(), root)
            soft = root.rlimit(psutil.RLIMIT_NOFILE)[0]
        except psutil.Error as exc:
            out.append(check(Area.RESOURCES, "process", label, ok=False, message=str(exc)))
            continue
        fd_limit = soft * spec.max_fd_share if soft > 0 else float("inf")
        out.append(
            check(
                Area.RESOURCES,
                "process",
                label,
                ok=rss <= spec.max_rss_mib * MIB and fds <= fd_limit,
                expected=f"RSS ≤ {spec.max_rss_mib} MiB, open FDs ≤ {spec.max_fd_share:.0%}"
                f" of {soft}",
                observed=f"RSS {rss / MIB:.0f} MiB ({len(procs)} processes), {fds} FDs",
            )
        )
    return out


def _safe(get: Callable[[psutil.Process], int], proc: psutil.Process) -> int:
    try:
        return int(get(proc))
    except psutil.Error:
        return 0  # a helper that just exited holds nothing any more
