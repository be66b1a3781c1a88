"""Logs: error-level lines and repeated retries or timeouts, each with ``file:line``.

The formats are the ones the stack's components write: Python's logging (our
services, vLLM's ``ERROR 12-02 10:00:00 [file.py:12]``, uvicorn's ``ERROR:``),
Triton's glog (``E1202 10:00:00.123 1 file.cc:12]``), Qdrant's tracing
(``2024-…Z ERROR qdrant::…``), JSON lines (``"level": "error"``) and Redis
(which has no error level: its ``#`` lines are warnings and are not findings).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from faultday.core.journal import JournalCheck
from faultday.core.preflight import LogRule
from faultday.core.stackinfo import ComponentInfo
from faultday.preflight.base import Area, Subject, check

ERROR_LINE = re.compile(
    r"^(?:ERROR|CRITICAL|FATAL)\b"  # vLLM, our services (levelname first), uvicorn
    r"|^[EF]\d{4} \d\d:\d\d:\d\d"  # Triton / glog
    r"|^\S+ (?:ERROR|CRITICAL|FATAL)\b"  # Qdrant's tracing: timestamp, then the level
    r"|^\S+ \S+ (?:ERROR|CRITICAL|FATAL)\b"  # Python's asctime first: date time LEVEL
    r"|\"level\": ?\"(?:error|critical|fatal)\""  # JSON lines
    r"|^Traceback \(most recent call last\):"
)
RETRY_LINE = re.compile(
    r"retry|retrying|retries|timed? ?out|timeout|deadline exceeded"
    r"|connection (?:refused|reset)|reconnect",
    re.IGNORECASE,
)
# What varies between repeats of one message: numbers, hex ids, addresses, quoted values.
_VARIES = re.compile(r"0x[0-9a-f]+|[0-9a-f]{8,}|\d+(?:\.\d+)?|'[^']*'|\"[^\"]*\"", re.IGNORECASE)
_HEADER = re.compile(r"^--- \S+ faultday (?:starts|restarts)")  # the supervisor's own lines
MAX_FINDINGS = 5  # per component and kind, in the report; the count says how many in all


@dataclass(frozen=True, slots=True)
class Hit:
    file: str
    line: int
    text: str


# Drivers whose stack runs elsewhere name a component's log by the command that prints it
# (docker: `docker logs NAME`, kubernetes: `kubectl logs -n NS deploy/X`).
LOG_COMMANDS = frozenset({"docker", "kubectl"})
LOG_COMMAND_TIMEOUT = 30.0


def scan_logs(subject: Subject, rules: tuple[LogRule, ...]) -> list[JournalCheck]:
    out: list[JournalCheck] = []
    for comp in subject.components():
        path, why = log_file(comp, folder=subject.folder, max_bytes=subject.spec.log_max_bytes)
        if path is None:
            out.append(check(Area.LOGS, "log_errors", f"{comp.name}: log", ok=None, message=why))
            continue
        spec = subject.spec
        out.extend(scan_log(comp, rules, spec.log_max_bytes, spec.log_repeats, path=path))
    return out


def log_file(comp: ComponentInfo, *, folder: Path, max_bytes: int) -> tuple[Path | None, str]:
    """The file to read for ``comp``: its own, or its log command's output saved in the
    preflight's folder (so a finding's ``file:line`` can be opened); else why there is none."""
    if comp.log and Path(comp.log).is_file():
        return Path(comp.log), ""
    argv = shlex.split(comp.log) if comp.log else []
    if not argv or argv[0] not in LOG_COMMANDS:
        return None, f"no log file to read ({comp.log or 'none given'})"
    try:
        done = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,  # a container's stderr is its log too
            timeout=LOG_COMMAND_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{comp.log}: {exc}"
    if done.returncode != 0:
        return None, f"{comp.log} exited {done.returncode}: {done.stdout[-300:]!r}"
    saved = folder / "logs" / f"{comp.name}.log"
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_bytes(done.stdout[-max_bytes:])
    return saved, ""


def _read_tail(path: Path, max_bytes: int) -> tuple[int, list[str]]:
    """(number of the first line returned, the lines) of the file's last ``max_bytes``."""
    with path.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        start = max(0, size - max_bytes)
        skipped = 0
        f.seek(0)
        if start:
            # Line numbers stay true: count the lines that are skipped, a block at a time.
            left = start
            while left:
                block = f.read(min(left, 1 << 20))
                skipped += block.count(b"\n")
                left -= len(block)
        data = f.read()
    lines = data.decode("utf-8", "replace").splitlines()
    if start and lines:
        lines, skipped = lines[1:], skipped + 1  # the first one is cut
    return skipped + 1, lines


def scan_log(
    comp: ComponentInfo,
    rules: tuple[LogRule, ...],
    max_bytes: int,
    repeats: int,
    *,
    path: Path | None = None,
) -> list[JournalCheck]:
    """Error lines and repeated retries/timeouts in ``path`` (default: ``comp.log``)."""
    path = path or Path(comp.log)
    first, lines = _read_tail(path, max_bytes)
    ignore = [re.compile(r.pattern) for r in rules if r.component in (None, comp.name)]
    errors: list[Hit] = []
    retries: dict[str, list[Hit]] = {}
    for i, line in enumerate(lines, start=first):
        if _HEADER.match(line) or any(p.search(line) for p in ignore):
            continue
        if ERROR_LINE.search(line):
            errors.append(Hit(str(path), i, line.strip()))
        if RETRY_LINE.search(line):
            retries.setdefault(_VARIES.sub("#", line.strip()), []).append(
                Hit(str(path), i, line.strip())
            )
    out = [_errors_check(comp, errors, len(lines))]
    repeated = {k: v for k, v in retries.items() if len(v) >= repeats}
    out.append(_retries_check(comp, repeated, repeats, len(lines)))
    return out


def _errors_check(comp: ComponentInfo, errors: list[Hit], n: int) -> JournalCheck:
    where = "; ".join(f"{h.file}:{h.line}: {h.text[:160]}" for h in errors[:MAX_FINDINGS])
    more = f" (and {len(errors) - MAX_FINDINGS} more)" if len(errors) > MAX_FINDINGS else ""
    return check(
        Area.LOGS,
        "log_errors",
        f"{comp.name}: error-level lines",
        ok=not errors,
        expected="none",
        observed=f"{len(errors)} line" + ("" if len(errors) == 1 else "s"),
        where=where + more,
        n=n,
    )


def _retries_check(
    comp: ComponentInfo, repeated: dict[str, list[Hit]], repeats: int, n: int
) -> JournalCheck:
    parts = []
    for hits in sorted(repeated.values(), key=len, reverse=True)[:MAX_FINDINGS]:
        h = hits[0]
        parts.append(f"{len(hits)}x from {h.file}:{h.line}: {h.text[:160]}")
    counts = Counter({k: len(v) for k, v in repeated.items()})
    return check(
        Area.LOGS,
        "log_retries",
        f"{comp.name}: repeated retries or timeouts",
        ok=not repeated,
        expected=f"no retry/timeout message {repeats}x or more",
        observed=f"{len(repeated)} messages, {sum(counts.values())} lines",
        where="; ".join(parts),
        n=n,
    )
