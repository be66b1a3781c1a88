"""The live display of a run (rich): phase, active faults, elapsed/remaining, key figures."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.progress_bar import ProgressBar
from rich.table import Table

from faultday.core.events import Status
from faultday.core.scenario import Scenario


class StatusView:
    """A rich renderable: ``events.status.add_listener(view.update)`` keeps it current."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.status: Status | None = None

    def update(self, status: Status) -> None:
        self.status = status

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.status
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column()
        table.add_row("scenario", self.scenario.name)
        if s is None:
            table.add_row("phase", "starting")
            yield table
            return
        table.add_row("phase", str(s.phase))
        elapsed = max(0.0, min(s.t, s.duration))
        table.add_row(
            "time", f"{elapsed:5.1f}s of {s.duration:g}s  ({s.duration - elapsed:.1f}s left)"
        )
        table.add_row("", ProgressBar(total=s.duration or 1, completed=elapsed, width=40))
        table.add_row("faults", ", ".join(s.active_faults) or "none active")
        rate = f"{s.errors / s.requests:.1%}" if s.requests else "–"
        table.add_row("requests", f"{s.requests}  errors {s.errors} ({rate})")
        yield table
