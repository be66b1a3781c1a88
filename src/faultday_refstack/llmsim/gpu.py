"""The simulated GPU under the engine, exported as dcgm-exporter exports a real one.

Pure: every method takes the time it acts at, so tests drive it step by step.
The server feeds it the engine's steps and the active faults; ``render`` writes
the default dcgm-exporter counters (``etc/default-counters.csv`` of
NVIDIA/dcgm-exporter 4.5.3-4.8.2, plus the ECC and violation counters that file
lists commented out) in that exporter's text format: one sample per counter with
the labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``,
``Hostname`` and ``DCGM_FI_DRIVER_VERSION``, counters without a ``_total``
suffix, integer fields as integers and double fields with six decimals.

The model, per step of ``duration`` seconds: the GPU is busy for all of it but
a host gap (``host_gap_frac`` of the base step time), reads the weights and the
context's KV once and does 2 FLOPs per parameter per token. Utilisation, memory
and tensor activity are those shares of the step; power is idle plus the
dynamic range scaled by that activity and the SM clock; energy integrates power
exactly; the gauges average over ``sample_s`` as NVML's power reading does; the
die temperature approaches ``ambient + c_per_w * power`` with ``thermal_tau_s``.
"""

from __future__ import annotations

import math
import socket
import uuid as uuidlib
from dataclasses import dataclass
from typing import Final

from faultday_refstack.llmsim.config import GpuConfig, SimConfig

MIB: Final = 1024 * 1024
# dcgm-exporter's err_msg for the Xids the simulator can raise (its xid_errors.go table).
XID_ERR_MSG: Final[dict[int, str]] = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running "
    "multiple cuda",
    48: "Double Bit ECC Error",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    154: "GPU Recovery Action Changed",
}
UNKNOWN_XID: Final = "Unknown Error"
DBE_XIDS: Final = frozenset({48, 94, 95})  # double-bit (uncorrectable) ECC errors
# Bytes over PCIe per step: token ids in, sampled ids out, launch parameters both ways.
_PCIE_RX_PER_STEP = 16384
_PCIE_TX_PER_STEP = 4096
# Weights of dynamic power on the activity shares (SM busy, DRAM, tensor pipes).
_W_GR, _W_DRAM, _W_TENSOR = 0.55, 0.25, 0.20


@dataclass(frozen=True, slots=True)
class Activity:
    """What the GPU does over a stretch of time, as shares of that time (0-1)."""

    gr: float = 0.0  # graphics/compute engine active (what GPU_UTIL samples)
    dram: float = 0.0
    tensor: float = 0.0
    pcie_rx_bps: float = 0.0
    pcie_tx_bps: float = 0.0


IDLE: Final = Activity()
# A hung kernel spins: the engine reads busy, nothing is computed or moved.
HUNG: Final = Activity(gr=1.0, dram=0.05)


@dataclass(frozen=True, slots=True)
class Counter:
    """One exported field: its DCGM name, Prometheus type, help and value kind."""

    name: str
    kind: str  # gauge | counter
    help: str
    double: bool = False


# The families in the exporter's order of default-counters.csv; help texts are that file's.
COUNTERS: Final = (
    Counter("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    Counter("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    Counter("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    Counter("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    Counter("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", double=True),
    Counter(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
    ),
    Counter("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    Counter("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    Counter("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    Counter("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    Counter("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    Counter("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    Counter(
        "DCGM_FI_DEV_POWER_VIOLATION",
        "counter",
        "Throttling duration due to power constraints (in ns).",
    ),
    Counter(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "counter",
        "Throttling duration due to thermal constraints (in ns).",
    ),
    Counter(
        "DCGM_FI_DEV_SYNC_BOOST_VIOLATION",
        "counter",
        "Throttling duration due to sync-boost constraints (in ns).",
    ),
    Counter(
        "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION",
        "counter",
        "Throttling duration due to board limit constraints (in ns).",
    ),
    Counter(
        "DCGM_FI_DEV_LOW_UTIL_VIOLATION",
        "counter",
        "Throttling duration due to low utilization (in ns).",
    ),
    Counter(
        "DCGM_FI_DEV_RELIABILITY_VIOLATION",
        "counter",
        "Throttling duration due to reliability constraints (in ns).",
    ),
    Counter("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    Counter("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    Counter("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    Counter(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
    ),
    Counter(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
    ),
    Counter(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
    ),
    Counter(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
    ),
    Counter(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
    ),
    Counter(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
    ),
    Counter(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
    ),
    Counter("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    Counter(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        double=True,
    ),
    Counter(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        double=True,
    ),
    Counter(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        double=True,
    ),
    Counter(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers "
        "and data payloads - in bytes per second.",
        double=True,
    ),
    Counter(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers "
        "and data payloads - in bytes per second.",
        double=True,
    ),
)


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """The labels that name one GPU in every sample."""

    index: int
    uuid: str
    pci_bus_id: str
    model_name: str
    hostname: str
    driver_version: str

    def labels(self) -> str:
        pairs = (
            ("gpu", str(self.index)),
            ("UUID", self.uuid),
            ("pci_bus_id", self.pci_bus_id),
            ("device", f"nvidia{self.index}"),
            ("modelName", self.model_name),
            ("Hostname", self.hostname),
            ("DCGM_FI_DRIVER_VERSION", self.driver_version),
        )
        return ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)


def identity(config: SimConfig, *, port: int) -> GpuIdentity:
    """The GPU's labels; a UUID stable for one host, port and index, distinct across replicas."""
    gpu = config.gpu
    host = gpu.hostname or socket.gethostname()
    uid = gpu.uuid or "GPU-" + str(
        uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"llmsim.{host}.{port}.{gpu.index}")
    )
    return GpuIdentity(
        index=gpu.index,
        uuid=uid,
        pci_bus_id=pci_bus_id(config.gpu_pci),
        model_name=gpu.model_name,
        hostname=host,
        driver_version=gpu.driver_version,
    )


def pci_bus_id(nvrm_pci: str) -> str:
    """NVML's bus id (``00000000:01:00.0``) from the NVRM log's form (``0000:01:00``)."""
    domain, _, rest = nvrm_pci.partition(":")
    return f"{int(domain or '0', 16):08X}:{rest.upper()}.0" if rest else nvrm_pci


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class SimGpu:
    """One GPU's state: activity over time, memory, clocks, temperatures and error counters."""

    def __init__(self, config: SimConfig, ident: GpuIdentity, *, now: float) -> None:
        self.cfg: GpuConfig = config.gpu
        self.ident = ident
        self._block_mib = config.block_size * config.kv_bytes_per_token / MIB
        self._base_mib = self.cfg.context_mib + 2 * config.num_parameters / MIB
        self._weight_bytes = 2.0 * config.num_parameters
        self._kv_bytes = float(config.kv_bytes_per_token)
        self._flops_per_token = 2.0 * config.num_parameters
        self._base_gap_s = self.cfg.host_gap_frac * config.step.base_ms / config.step.speed / 1e3
        self._t = now
        self._activity = IDLE
        self.energy_mj = 0.0
        self._power = self._ema_gr = self._ema_dram = self._ema_tensor = 0.0
        self._ema_rx = self._ema_tx = 0.0
        self._power = self.cfg.idle_w
        self._temp = self.cfg.ambient_c + self.cfg.c_per_w * self.cfg.idle_w
        self.thermal_violation_ns = 0.0
        # Fault state, set by the server from the active faults.
        self.slowdown = 1.0
        self.hung = False
        self.lost_blocks = 0
        self.oom = False
        self.last_xid = 0
        self.ecc_sbe = 0
        self.ecc_dbe = 0
        self.remapped_correctable = 0
        self.remapped_uncorrectable = 0

    # --- what the engine does -------------------------------------------------------------------
    def step_activity(self, *, duration: float, tokens: int, context_tokens: int) -> Activity:
        """The activity of one forward pass of ``duration`` seconds over ``tokens`` tokens."""
        if duration <= 0 or tokens <= 0:
            return IDLE
        gap = min(self._base_gap_s, duration)  # host time: a throttled GPU is not its cause
        busy = 1.0 - gap / duration
        moved = self._weight_bytes + self._kv_bytes * context_tokens
        dram = moved / (duration * self.cfg.mem_bandwidth_gbs * 1e9)
        tensor = self._flops_per_token * tokens / (duration * self.cfg.peak_tflops * 1e12)
        return Activity(
            gr=busy,
            dram=min(dram, busy),
            tensor=min(tensor, busy),
            pcie_rx_bps=(_PCIE_RX_PER_STEP + 4 * tokens) / duration,
            pcie_tx_bps=_PCIE_TX_PER_STEP / duration,
        )

    def set_activity(self, now: float, activity: Activity) -> None:
        """From ``now`` on the GPU does ``activity`` (the time before is integrated first)."""
        self.advance(now)
        self._activity = activity

    def advance(self, now: float) -> None:
        """Integrate energy, averages, temperature and violations up to ``now``."""
        dt = now - self._t
        if dt <= 0:
            return
        self._t = now
        act = HUNG if self.hung else self._activity
        power = self.power_of(act)
        self.energy_mj += power * dt * 1e3
        a = 1.0 - math.exp(-dt / self.cfg.sample_s)
        self._power += a * (power - self._power)
        self._ema_gr += a * (act.gr - self._ema_gr)
        self._ema_dram += a * (act.dram - self._ema_dram)
        self._ema_tensor += a * (act.tensor - self._ema_tensor)
        self._ema_rx += a * (act.pcie_rx_bps - self._ema_rx)
        self._ema_tx += a * (act.pcie_tx_bps - self._ema_tx)
        target = self.cfg.ambient_c + self.cfg.c_per_w * power
        self._temp += (1.0 - math.exp(-dt / self.cfg.thermal_tau_s)) * (target - self._temp)
        if self.slowdown > 1.0:
            self.thermal_violation_ns += dt * 1e9

    def power_of(self, act: Activity) -> float:
        """Watts drawn while doing ``act``: dynamic power scales with activity and SM clock."""
        cfg = self.cfg
        mix = _W_GR * act.gr + _W_DRAM * act.dram + _W_TENSOR * act.tensor
        return cfg.idle_w + (cfg.tdp_w - cfg.idle_w) * mix / self.slowdown

    # --- faults -------------------------------------------------------------------------------
    def record_xid(self, xid: int) -> None:
        self.last_xid = xid
        if xid in DBE_XIDS:
            self.ecc_dbe += 1
            self.remapped_uncorrectable += 1

    # --- what dcgm-exporter reads ---------------------------------------------------------------
    def sm_clock(self) -> int:
        cfg = self.cfg
        if not self.hung and self._ema_gr < 0.01:
            return cfg.idle_sm_clock_mhz  # the driver lowers clocks when nothing runs
        return max(1, round(cfg.max_sm_clock_mhz / self.slowdown))

    def temperatures(self) -> tuple[int, int]:
        """(die, memory) in C; a throttled GPU sits at its slowdown temperatures."""
        cfg = self.cfg
        die = self._temp
        mem = die + cfg.mem_offset_c
        if self.slowdown > 1.0:
            die = max(die, cfg.slowdown_temp_c)
            mem = max(mem, cfg.mem_slowdown_temp_c)
        return round(die), round(mem)

    def fb_used_mib(self, *, kv_blocks_used: int) -> int:
        """Context and weights, the KV blocks in use, and what a fault took."""
        cfg = self.cfg
        usable = cfg.fb_total_mib - cfg.fb_reserved_mib
        if self.oom:
            return usable
        used = self._base_mib + (kv_blocks_used + self.lost_blocks) * self._block_mib
        return min(usable, round(used))

    def values(self, now: float, *, kv_blocks_used: int) -> dict[str, float]:
        """Every exported field's value at ``now``."""
        self.advance(now)
        cfg = self.cfg
        die, mem = self.temperatures()
        used = self.fb_used_mib(kv_blocks_used=kv_blocks_used)
        return {
            "DCGM_FI_DEV_SM_CLOCK": self.sm_clock(),
            "DCGM_FI_DEV_MEM_CLOCK": cfg.mem_clock_mhz,
            "DCGM_FI_DEV_MEMORY_TEMP": mem,
            "DCGM_FI_DEV_GPU_TEMP": die,
            "DCGM_FI_DEV_POWER_USAGE": self._power,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": int(self.energy_mj),
            "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
            "DCGM_FI_DEV_GPU_UTIL": round(100 * self._ema_gr),
            "DCGM_FI_DEV_MEM_COPY_UTIL": round(100 * self._ema_dram),
            "DCGM_FI_DEV_ENC_UTIL": 0,
            "DCGM_FI_DEV_DEC_UTIL": 0,
            "DCGM_FI_DEV_XID_ERRORS": self.last_xid,
            "DCGM_FI_DEV_POWER_VIOLATION": 0,
            "DCGM_FI_DEV_THERMAL_VIOLATION": int(self.thermal_violation_ns),
            "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": 0,
            "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": 0,
            "DCGM_FI_DEV_LOW_UTIL_VIOLATION": 0,
            "DCGM_FI_DEV_RELIABILITY_VIOLATION": 0,
            "DCGM_FI_DEV_FB_FREE": cfg.fb_total_mib - cfg.fb_reserved_mib - used,
            "DCGM_FI_DEV_FB_USED": used,
            "DCGM_FI_DEV_FB_RESERVED": cfg.fb_reserved_mib,
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": self.ecc_sbe,
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": self.ecc_dbe,
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": self.ecc_sbe,
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": self.ecc_dbe,
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,  # one GPU: no NVLink traffic
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": self.remapped_uncorrectable,
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": self.remapped_correctable,
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE": self._ema_gr,
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": self._ema_tensor,
            "DCGM_FI_PROF_DRAM_ACTIVE": self._ema_dram,
            "DCGM_FI_PROF_PCIE_TX_BYTES": self._ema_tx,
            "DCGM_FI_PROF_PCIE_RX_BYTES": self._ema_rx,
        }

    def render(self, now: float, *, kv_blocks_used: int) -> str:
        """The exporter's text: HELP, TYPE and one sample per field."""
        values = self.values(now, kv_blocks_used=kv_blocks_used)
        labels = self.ident.labels()
        msg = XID_ERR_MSG.get(self.last_xid, UNKNOWN_XID)
        xid_attrs = f',err_code="{self.last_xid}",err_msg="{_escape(msg)}"'
        lines: list[str] = []
        for c in COUNTERS:
            value = values[c.name]
            shown = f"{value:f}" if c.double else str(int(value))
            extra = xid_attrs if c.name == "DCGM_FI_DEV_XID_ERRORS" else ""
            lines.append(f"# HELP {c.name} {c.help}")
            lines.append(f"# TYPE {c.name} {c.kind}")
            lines.append(f"{c.name}{{{labels}{extra}}} {shown}")
        return "\n".join(lines) + "\n"
