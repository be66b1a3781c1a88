"""dcgm-exporter metrics of the simulated GPU: names, types and labels as the real
exporter's default counters, and values that follow the engine's load and its faults."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.llmsim.conftest import Sim
from tests.llmsim.test_faults import RawStream, stream

from faultday_refstack.llmsim.config import SimConfig, StepModel
from faultday_refstack.llmsim.gpu import SimGpu, identity

# NVIDIA/dcgm-exporter etc/default-counters.csv (source and commit in the file's header).
COUNTERS_CSV = Path(__file__).parent / "data" / "dcgm-default-counters.csv"
# Commented out in that file, served anyway (issue 19): ECC and clock-violation counters.
WANTED_COMMENTED = re.compile(r"^DCGM_FI_DEV_(ECC_[SD]BE_(VOL|AGG)_TOTAL|[A-Z_]+_VIOLATION)$")
# Blank on a GPU that is not a vGPU, and dcgm-exporter skips blank values.
NOT_ON_BARE_METAL = {"DCGM_FI_DEV_VGPU_LICENSE_STATUS"}
IDENTITY_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}
GPU = ("--gpu-sample-s", "0.1", "--gpu-thermal-tau-s", "0.3")
LONG = ("--output-len-mean", "5000")


def expected_counters() -> tuple[dict[str, tuple[str, str]], set[str]]:
    """(field → (type, help)) for the counters to serve, and the fields that are labels."""
    counters: dict[str, tuple[str, str]] = {}
    labels: set[str] = set()
    for raw in COUNTERS_CSV.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        commented = line.startswith("#")
        parts = [p.strip() for p in line.lstrip("# ").split(",", 2)]
        if len(parts) != 3 or not parts[0].startswith("DCGM_"):
            continue
        name, kind, doc = parts
        if commented and not WANTED_COMMENTED.match(name):
            continue
        if kind == "label":
            labels.add(name)
        elif name not in NOT_ON_BARE_METAL:
            counters[name] = (kind, doc)
    return counters, labels


def scrape(sim: Sim) -> str:
    return httpx.get(f"{sim.url}/metrics", timeout=5).text


def gpu_values(sim: Sim) -> dict[str, float]:
    """DCGM field → value (the parser's ``_total`` on counters taken off again)."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(scrape(sim)):
        if fam.name.startswith("DCGM_"):
            (sample,) = fam.samples
            out[fam.name] = sample.value
    return out


def test_the_csv_names_the_counters_the_issue_lists() -> None:
    counters, labels = expected_counters()
    for name in (
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_THERMAL_VIOLATION",
    ):
        assert name in counters
    assert "DCGM_FI_DEV_RETIRED_SBE" not in counters  # commented out and not asked for
    assert labels == {"DCGM_FI_DRIVER_VERSION"}


def test_fidelity_names_types_help_and_labels_match_dcgm_exporter(
    start_sim: Callable[..., Sim],
) -> None:
    sim = start_sim()
    text = scrape(sim)
    counters, label_fields = expected_counters()
    families = {
        f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("DCGM_")
    }
    assert set(families) == set(counters)
    for name, (kind, doc) in counters.items():
        fam = families[name]
        assert (fam.type, fam.documentation) == (kind, doc), name
        # dcgm-exporter writes counters under their field name, no _total suffix.
        assert re.search(rf"^{name}\{{", text, re.MULTILINE), name
        assert re.search(rf"^# TYPE {name} {kind}$", text, re.MULTILINE), name
        (sample,) = fam.samples
        want = IDENTITY_LABELS | label_fields
        if name == "DCGM_FI_DEV_XID_ERRORS":
            want |= {"err_code", "err_msg"}
        assert set(sample.labels) == want, name
        assert sample.labels["device"] == f"nvidia{sample.labels['gpu']}"
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", sample.labels["UUID"])
        assert re.fullmatch(r"[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0", sample.labels["pci_bus_id"])
    # Label order as the exporter renders it: identity, label fields, then attributes.
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_XID_ERRORS{"))
    keys = re.findall(r'([A-Za-z_]+)="', line)
    assert keys == [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
        "err_code",
        "err_msg",
    ]
    power = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_POWER_USAGE{"))
    assert re.search(r"\} \d+\.\d{6}$", power)  # a double, printed with %f
    clock = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_SM_CLOCK{"))
    assert re.search(r"\} \d+$", clock)  # an int64


def test_each_replica_is_its_own_gpu() -> None:
    cfg = SimConfig()
    a, b = identity(cfg, port=8001), identity(cfg, port=8002)
    assert a.uuid != b.uuid
    assert a.uuid == identity(cfg, port=8001).uuid  # stable across restarts on one port
    pinned = SimConfig.model_validate({"gpu": {"uuid": "GPU-x", "index": 3}})
    assert (identity(pinned, port=1).uuid, identity(pinned, port=1).index) == ("GPU-x", 3)


def test_power_and_utilisation_rise_with_batch_size_and_energy_integrates_power() -> None:
    cfg = SimConfig()
    step = cfg.step
    gpu = SimGpu(cfg, identity(cfg, port=1), now=0.0)
    idle_w = gpu.power_of(gpu.step_activity(duration=0.0, tokens=0, context_tokens=0))
    previous = (0.0, idle_w)
    for batch in (1, 8, 64, 256):
        duration = step.step_seconds(prefill_tokens=0, decode_seqs=batch, context_tokens=512)
        act = gpu.step_activity(duration=duration, tokens=batch, context_tokens=512 * batch)
        power = gpu.power_of(act)
        assert (act.gr, power) > previous, batch
        assert power <= cfg.gpu.tdp_w
        previous = (act.gr, power)
    gpu.set_activity(10.0, act)
    before = gpu.energy_mj
    gpu.advance(12.0)
    assert gpu.energy_mj - before == pytest.approx(power * 2 * 1000)
    throttled = SimGpu(cfg, identity(cfg, port=1), now=0.0)
    throttled.slowdown = 4.0
    assert throttled.power_of(act) < power  # dynamic power follows the SM clock
    assert StepModel().base_ms > 0


def _start_load(sim: Sim, n: int, **extra: object) -> list[RawStream]:
    streams = [stream(sim, **extra) for _ in range(n)]
    for s in streams:
        s.wait_tokens(3)
    return streams


def _energy_at(sim: Sim) -> tuple[float, float]:
    """(energy in mJ, the time it was read): the middle of the scrape's round trip."""
    start = time.monotonic()
    energy = gpu_values(sim)["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    return energy, (start + time.monotonic()) / 2


def _energy_rate_w(sim: Sim, seconds: float) -> float:
    e0, t0 = _energy_at(sim)
    time.sleep(seconds)
    e1, t1 = _energy_at(sim)
    return (e1 - e0) / 1000 / (t1 - t0)


def test_load_raises_utilisation_power_memory_and_temperature_then_idle_lowers_them(
    start_sim: Callable[..., Sim],
) -> None:
    sim = start_sim(*GPU, "--output-len-mean", "1000")
    idle = gpu_values(sim)
    assert idle["DCGM_FI_DEV_GPU_UTIL"] == 0
    assert idle["DCGM_FI_DEV_POWER_USAGE"] == pytest.approx(72.0, abs=1)
    assert idle["DCGM_FI_DEV_SM_CLOCK"] == 345
    assert idle["DCGM_FI_DEV_FB_FREE"] + idle["DCGM_FI_DEV_FB_USED"] == 81559 - 469
    streams = _start_load(sim, 12)
    time.sleep(0.4)
    busy = gpu_values(sim)
    assert _energy_rate_w(sim, 0.3) > 150  # energy grows at the power drawn
    assert busy["DCGM_FI_DEV_GPU_UTIL"] > 40
    assert busy["DCGM_FI_DEV_POWER_USAGE"] > 200
    assert busy["DCGM_FI_DEV_SM_CLOCK"] == 1980
    assert busy["DCGM_FI_DEV_FB_USED"] > idle["DCGM_FI_DEV_FB_USED"]  # KV blocks in use
    assert busy["DCGM_FI_DEV_FB_FREE"] < idle["DCGM_FI_DEV_FB_FREE"]
    assert busy["DCGM_FI_DEV_GPU_TEMP"] > idle["DCGM_FI_DEV_GPU_TEMP"]
    assert busy["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] > 0
    for s in streams:
        s.join(timeout=30)
    time.sleep(0.6)
    after = gpu_values(sim)
    assert after["DCGM_FI_DEV_GPU_UTIL"] < 10
    assert after["DCGM_FI_DEV_SM_CLOCK"] == 345
    assert after["DCGM_FI_DEV_FB_USED"] == idle["DCGM_FI_DEV_FB_USED"]  # blocks released
    assert _energy_rate_w(sim, 1.0) == pytest.approx(72.0, rel=0.15)  # idle power


def test_throttle_drops_clock_and_power_raises_temperature_and_violation(
    start_sim: Callable[..., Sim],
) -> None:
    sim = start_sim(*GPU, *LONG)
    _start_load(sim, 8)
    time.sleep(0.4)
    before = gpu_values(sim)
    assert before["DCGM_FI_DEV_THERMAL_VIOLATION"] == 0
    sim.fault(kind="throttle", factor=4)
    time.sleep(0.6)
    during = gpu_values(sim)
    assert during["DCGM_FI_DEV_SM_CLOCK"] == round(1980 / 4)
    assert during["DCGM_FI_DEV_POWER_USAGE"] < before["DCGM_FI_DEV_POWER_USAGE"] - 50
    assert during["DCGM_FI_DEV_GPU_TEMP"] >= 87
    assert during["DCGM_FI_DEV_MEMORY_TEMP"] >= 95
    assert during["DCGM_FI_DEV_THERMAL_VIOLATION"] > 0.4e9  # ns throttled so far
    sim.clear()
    cleared = gpu_values(sim)
    time.sleep(0.2)
    after = gpu_values(sim)
    assert after["DCGM_FI_DEV_SM_CLOCK"] == 1980
    assert after["DCGM_FI_DEV_THERMAL_VIOLATION"] == cleared["DCGM_FI_DEV_THERMAL_VIOLATION"]


def test_hang_shows_full_utilisation_and_no_tokens(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(*GPU, *LONG)
    _start_load(sim, 4)
    sim.fault(kind="hang")
    time.sleep(0.6)
    first = gpu_values(sim)
    tokens = sim.metrics()["vllm:generation_tokens_total"]
    time.sleep(0.3)
    assert gpu_values(sim)["DCGM_FI_DEV_GPU_UTIL"] == 100
    assert first["DCGM_FI_DEV_GPU_UTIL"] >= 99
    assert first["DCGM_FI_DEV_XID_ERRORS"] == 119
    assert sim.metrics()["vllm:generation_tokens_total"] == tokens
    sim.clear()
    time.sleep(0.3)
    assert sim.metrics()["vllm:generation_tokens_total"] > tokens


def test_ecc_and_kv_shrink_leave_their_counters_and_take_framebuffer(
    start_sim: Callable[..., Sim],
) -> None:
    sim = start_sim(*GPU)
    base = gpu_values(sim)
    sim.fault(kind="ecc_sbe")
    sim.fault(kind="ecc_sbe")
    ecc = gpu_values(sim)
    assert ecc["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"] == ecc["DCGM_FI_DEV_ECC_SBE_AGG_TOTAL"] == 2
    assert ecc["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 0
    assert ecc["DCGM_FI_DEV_XID_ERRORS"] == 92
    sim.fault(kind="kv_shrink", factor=0.5)
    shrunk = gpu_values(sim)
    half_pool_mib = 8192 // 2 * 16 * 131072 / 2**20
    drop = base["DCGM_FI_DEV_FB_FREE"] - shrunk["DCGM_FI_DEV_FB_FREE"]
    assert drop == pytest.approx(half_pool_mib, abs=1)
    assert shrunk["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 1
    assert shrunk["DCGM_FI_DEV_XID_ERRORS"] == 63
    sim.clear()
    after = gpu_values(sim)
    assert after["DCGM_FI_DEV_FB_FREE"] == base["DCGM_FI_DEV_FB_FREE"]
    assert after["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"] == 1  # counters never go back


@pytest.mark.parametrize(
    ("body", "xid"), [({"kind": "xid", "xid": 79}, 79), ({"kind": "xid", "xid": 48}, 48)]
)
def test_xid_sets_the_last_xid_with_the_exporters_text(
    start_sim: Callable[..., Sim], body: dict[str, object], xid: int
) -> None:
    sim = start_sim(*GPU, "--keep-alive-on-engine-death")
    sim.fault(**body)
    text = scrape(sim)
    (line,) = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_XID_ERRORS{")]
    assert line.endswith(f"}} {xid}")
    assert f'err_code="{xid}"' in line
    values = gpu_values(sim)
    if xid == 79:
        assert 'err_msg="GPU has fallen off the bus"' in line
        assert values["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 0
    else:  # Xid 48 is a double-bit ECC error
        assert values["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] == 1
        assert values["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"] == 1


def test_oom_fills_the_framebuffer(start_sim: Callable[..., Sim]) -> None:
    sim = start_sim(*GPU, "--keep-alive-on-engine-death")
    sim.fault(kind="oom")
    values = gpu_values(sim)
    assert values["DCGM_FI_DEV_FB_FREE"] == 0
    assert values["DCGM_FI_DEV_FB_USED"] == 81559 - 469
