"""GPU faults the simulator can be told to suffer, and the kernel lines they leave behind.

What each kind does, as a real vLLM on a real GPU would show it:

* ``xid`` / ``oom`` — the EngineCore dies: streams get an error frame then
  ``[DONE]``, new requests 500, ``/health`` 503, the server exits.
* ``hang`` — the engine stops stepping; HTTP stays up, ``/health`` 200, the
  engine's gauges freeze at their last values (a hung engine reports nothing).
* ``throttle`` — every step takes ``factor`` times longer (thermal/power capping).
* ``kv_shrink`` — usable KV blocks x ``factor`` (e.g. row remapping, another
  tenant's memory): preemptions and latency spikes.
* ``ecc_sbe`` — a corrected single-bit ECC error: logged and counted, no effect.

Not a GPU fault but a process one, on its own route (``PUT /admin/leak``): a slow
memory leak (:class:`Leak`) that allocates and keeps host memory at a steady rate
until ``DELETE /admin/leak`` gives it back (what a soak's drift check must catch).
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict

# The body of POST /admin/faults is shared with the harness's injectors.
from faultday_wire.admin import LEAK_MAX_MIB, FaultKind, FaultSpec, LeakSpec, LeakState

__all__ = [
    "FATAL_KINDS",
    "ActiveFault",
    "FaultKind",
    "FaultSpec",
    "Leak",
    "LeakCeiling",
    "activate",
    "kernel_line",
    "leak_ceiling",
    "xid_of",
]


log = logging.getLogger(__name__)

FATAL_KINDS = frozenset({FaultKind.XID, FaultKind.OOM})

XID_TEXT: dict[int, str] = {
    13: "Graphics Exception: ESR 0x404600=0x80000002",
    31: "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3c_a0000000",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when one kills "
    "the process that hit the error",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at partition 6, subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row.",
    74: "NVLink: fatal error detected on link 3",
    79: "GPU has fallen off the bus.",
    92: "High single-bit ECC error rate detected.",
    94: "Contained ECC error.",
    95: "Uncontained ECC error.",
    109: "Ch 00000010, engmask 00000101, intr 10000000. Context Switch Timeout Error",
    119: "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 "
    "(GSP_RM_CONTROL) (0x20800a4c 0x4).",
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
}


class ActiveFault(BaseModel):
    """A fault as ``GET /admin/faults`` lists it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: FaultKind
    xid: int | None = None
    factor: float | None = None
    since: float  # unix time


def activate(spec: FaultSpec) -> ActiveFault:
    fid = spec.id or uuid.uuid4().hex[:12]
    xid = spec.xid if spec.kind == FaultKind.XID else None
    factor = spec.factor if spec.kind in (FaultKind.THROTTLE, FaultKind.KV_SHRINK) else None
    return ActiveFault(id=fid, kind=spec.kind, xid=xid, factor=factor, since=time.time())


# The Xid the driver reports for each kind that has one (xid: the one asked for).
_KIND_XID = {FaultKind.HANG: 119, FaultKind.KV_SHRINK: 63, FaultKind.ECC_SBE: 92}


def xid_of(spec: FaultSpec) -> int | None:
    """The Xid this fault makes the driver report (kernel log and DCGM_FI_DEV_XID_ERRORS)."""
    if spec.kind == FaultKind.XID:
        return spec.xid
    return _KIND_XID.get(spec.kind)


def kernel_line(spec: FaultSpec, *, pci: str, boot: float) -> str:
    """A dmesg-style line, as the NVIDIA kernel driver would write for this fault."""
    stamp = f"[{time.monotonic() - boot + 1000.0:12.6f}]"
    pid = os.getpid()
    head = f"{stamp} NVRM: Xid (PCI:{pci}):"
    xid = xid_of(spec)
    if xid is not None:
        text = XID_TEXT.get(xid, "Unknown error")
        return f"{head} {xid}, pid={pid}, name=VLLM::EngineCore, {text}"
    if spec.kind == FaultKind.THROTTLE:
        return (
            f"{stamp} NVRM: GPU at PCI:{pci}: GPU-0: clocks event reason HW Slowdown "
            f"(thermal/power brake) active, effective throughput x1/{spec.factor:g}"
        )
    # oom: no kernel line exists for a CUDA OOM; the process itself says it.
    return (
        f"{stamp} torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        f"GPU 0 has a total capacity of 79.19 GiB of which 1.06 GiB is free. "
        f"Process {pid} has 78.12 GiB memory in use."
    )


MIB = 1 << 20
LEAK_TICK_S = 0.25
# What a leak leaves the machine: the larger of this and a tenth of its memory.
LEAK_MARGIN_MIB = 1024
MEMINFO = Path("/proc/meminfo")
CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class LeakCeiling:
    """The most a leak may hold here: what the machine can spare, and why."""

    mib: int
    why: str


def _meminfo() -> dict[str, int]:
    """``/proc/meminfo``'s fields in MiB; empty when it cannot be read."""
    fields: dict[str, int] = {}
    try:
        lines = MEMINFO.read_text(encoding="ascii").splitlines()
    except OSError:
        return fields
    for line in lines:
        name, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            fields[name] = int(parts[0]) // 1024  # kB
    return fields


def _cgroup_mib(name: str) -> int | None:
    """A cgroup v2 memory file of this process's group (``memory.max`` …) in MiB, if set."""
    try:
        text = (CGROUP / name).read_text(encoding="ascii").strip()
    except OSError:
        return None
    return int(text) // MIB if text.isdigit() else None


def host_memory_mib() -> tuple[int, int]:
    """(total, available) memory in MiB: /proc/meminfo, else sysconf; within a cgroup's limit."""
    info = _meminfo()
    total, available = info.get("MemTotal"), info.get("MemAvailable")
    if total is None or available is None:
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page // MIB
        available = os.sysconf("SC_AVPHYS_PAGES") * page // MIB
    limit, used = _cgroup_mib("memory.max"), _cgroup_mib("memory.current")
    if limit is not None:  # a container sees the host's meminfo, but its limit kills it
        total = min(total, limit)
        available = min(available, max(0, limit - (used or 0)))
    return total, available


def leak_ceiling(held_mib: int) -> LeakCeiling:
    """The largest ``max_mib`` a leak may have now, keeping a margin of the machine's memory.

    What is held already counts as available: a new maximum may reuse it.
    """
    total, available = host_memory_mib()
    margin = max(LEAK_MARGIN_MIB, total // 10)
    spare = available + held_mib - margin
    mib = max(0, min(LEAK_MAX_MIB, spare))
    why = (
        f"{available} MiB available + {held_mib} MiB held by the leak - a margin of "
        f"{margin} MiB (of {total} MiB); at most {LEAK_MAX_MIB} MiB on any machine"
    )
    return LeakCeiling(mib, why)


class Leak:
    """Host memory allocated and kept at ``rate_mib_per_min``, one MiB at a time.

    Each MiB is its own anonymous mapping, written through so the pages are
    resident (RSS grows, not just the address space), and unmapped on release, so
    the memory really goes back to the kernel: a ``bytearray`` freed into glibc's
    heap might stay in the process and the revert would not show. The amount owed
    is computed from the time since the start, so a late timer does not slow it.
    """

    def __init__(self) -> None:
        self.spec: LeakSpec | None = None
        self._chunks: list[mmap.mmap] = []
        self._started = 0.0
        self._base = 0  # MiB held when the current rate began
        self._task: asyncio.Task[None] | None = None

    @property
    def held_mib(self) -> int:
        return len(self._chunks)

    def state(self, *, released: int = 0) -> LeakState:
        spec = self.spec
        return LeakState(
            active=spec is not None,
            held_mib=self.held_mib,
            rate_mib_per_min=spec.rate_mib_per_min if spec else 0.0,
            max_mib=spec.max_mib if spec else 0,
            released_mib=released,
        )

    def start(self, spec: LeakSpec) -> int:
        """Begin (or change the rate and maximum of) the leak; must run on the event loop.

        Never holds more than the new maximum: what is above it is given back at once.
        Returns the MiB given back.
        """
        self.spec = spec
        released = self._release_above(spec.max_mib)
        self._started = time.monotonic()
        self._base = self.held_mib
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._grow(), name="llmsim-leak")
        log.warning("leak: %.3g MiB/min up to %d MiB", spec.rate_mib_per_min, spec.max_mib)
        return released

    def _release_above(self, keep_mib: int) -> int:
        released = 0
        while self.held_mib > keep_mib:
            self._chunks.pop().close()  # unmapped: back to the kernel
            released += 1
        if released:
            log.warning("leak: released %d MiB above the new maximum", released)
        return released

    def grow_once(self, now: float) -> None:
        spec = self.spec
        if spec is None:
            return
        owed = self._base + int(spec.rate_mib_per_min * (now - self._started) / 60.0)
        while self.held_mib < min(owed, spec.max_mib):
            chunk = mmap.mmap(-1, MIB)
            chunk.write(b"\xa5" * MIB)  # touch every page: resident, not just reserved
            self._chunks.append(chunk)

    async def _grow(self) -> None:
        while self.spec is not None:
            self.grow_once(time.monotonic())
            await asyncio.sleep(LEAK_TICK_S)

    def release(self) -> int:
        """Stop growing and unmap everything held; the MiB released. Idempotent."""
        self.spec = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
        released = self.held_mib
        for chunk in self._chunks:
            chunk.close()
        self._chunks.clear()
        if released:
            log.warning("leak: released %d MiB", released)
        return released
