"""The log scan on the formats the stack writes, and preflight files that are wrong (no stack)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import faultday
from tests.preflight.conftest import component

from faultday.core.preflight import LogRule
from faultday.core.vocab import Verdict
from faultday.preflight.logs import log_file, scan_log

LOG = """\
--- 2026-12-02T03:19:20 faultday starts: python -m x --timeout 5
INFO 12-02 10:00:00 [api_server.py:12] vLLM API server version 0.11.0
ERROR 12-02 10:00:01 [engine.py:99] EngineCore failed to start
I1202 03:19:24.284844 13930 cuda_memory_manager.cc:117] "CUDA memory pool disabled"
E1202 03:19:24.284928 13930 server.cc:241] "model load failed"
E1202 03:19:24.284928 13930 server.cc:241] "CudaDriverHelper has not been initialized."
2024-05-01T10:00:00.000Z ERROR qdrant::storage: segment is corrupt
13865:M 02 Dec 2026 03:19:20.566 # WARNING Memory overcommit must be enabled!
{"ts": 1, "level": "error", "msg": "redis unreachable"}
2026-12-02 03:19:26,111 faultday_refstack.agent.deps client SDKs imported in 0.84s
Traceback (most recent call last):
WARNING 2026-12-02 03:20:00,001 [agent] llm-primary: attempt 1 timed out after 2000 ms, retrying
WARNING 2026-12-02 03:20:02,001 [agent] llm-primary: attempt 2 timed out after 2001 ms, retrying
WARNING 2026-12-02 03:20:04,001 [agent] llm-primary: attempt 3 timed out after 1999 ms, retrying
WARNING 2026-12-02 03:20:05,001 [agent] redis: connection refused, retrying in 50 ms
"""
BENIGN = (LogRule(pattern="CudaDriverHelper has not been initialized", why="no GPU here"),)


def test_error_lines_of_every_format_are_found_with_their_line(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text(LOG)
    errors, retries = scan_log(component(log), BENIGN, 1 << 20, 3)
    assert errors.verdict == Verdict.FAILED
    # vLLM, Triton (not the benign one), Qdrant, JSON lines, a traceback; not Redis' warning.
    for line in (3, 5, 7, 9, 11):
        assert f"{log}:{line}: " in errors.message
    assert errors.observed == "5 lines"
    assert f"{log}:6:" not in errors.message and f"{log}:8:" not in errors.message
    # The same timeout three times (numbers differ) is a finding; the one-off refusal is not.
    assert retries.verdict == Verdict.FAILED
    assert f"3x from {log}:12: " in retries.message
    assert "connection refused" not in retries.message
    assert "timed out" in retries.message


def test_a_long_log_is_read_from_its_tail_with_true_line_numbers(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    filler = "INFO all is well and this line is long enough to matter\n" * 5000
    log.write_text(filler + "ERROR the one error, late in the file\n")
    errors, _ = scan_log(component(log), (), 4096, 3)
    assert f"{log}:5001: ERROR the one error" in errors.message
    assert errors.n < 200  # only the tail was read


def test_a_clean_log_passes(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("INFO started\nINFO ready\n")
    errors, retries = scan_log(component(log), (), 1 << 20, 3)
    assert errors.verdict == retries.verdict == Verdict.PASSED
    assert errors.n == 2


def test_a_bad_preflight_file_exits_2_naming_file_line_and_field(tmp_path: Path) -> None:
    f = tmp_path / "bad.preflight.yaml"
    f.write_text(
        "apiVersion: faultday/v1\n"
        "kind: Preflight\n"
        "spec:\n"
        "  concurrency: lots\n"
        "  golden:\n"
        "    - {name: x, component: agent, methd: GET}\n"
        "  log_ignore:\n"
        "    - {pattern: 'unclosed (', why: a typo}\n"
    )
    r = faultday("preflight", "--config", str(f), "--report-dir", str(tmp_path / "r"))
    assert r.returncode == 2, r.stderr
    err = " ".join(r.stderr.split())
    assert f"{f}:4:" in err and "spec.concurrency" in err
    assert f"{f}:6:" in err and "spec.golden[0].methd" in err and "did you mean 'method'" in err
    assert f"{f}:8:" in err and "spec.log_ignore[0].pattern" in err
    assert "not a regular expression" in err
    assert not (tmp_path / "r").exists(), "nothing started, no folder written"


def test_an_unknown_profile_exits_2(tmp_path: Path) -> None:
    r = faultday("preflight", "--profile", "nosuch", "--report-dir", str(tmp_path / "r"))
    assert r.returncode == 2
    assert "no stack profile named 'nosuch'" in r.stderr


def test_a_log_command_that_is_not_docker_or_kubectl_is_not_run(tmp_path: Path) -> None:
    comp = component("rm -rf /")
    path, why = log_file(comp, folder=tmp_path, max_bytes=1024)
    assert path is None and "no log file to read (rm -rf /)" in why


def test_a_state_dir_without_a_stack_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    r = faultday(
        "preflight", "--state-dir", str(tmp_path / "none"), "--report-dir", str(tmp_path / "r")
    )
    assert r.returncode == 2, r.stderr
    assert "no state.json" in r.stderr
    assert not (tmp_path / "r").exists()


def test_a_stack_that_does_not_start_exits_4_with_its_journal(tmp_path: Path) -> None:
    profile = tmp_path / "dead.yaml"
    profile.write_text(
        "apiVersion: faultday/v1\nkind: StackProfile\nmetadata: {name: dead}\n"
        "spec:\n  proxy: null\n  components:\n    dead:\n      type: command\n"
        '      command: ["{python}", "-c", "import sys; sys.exit(3)"]\n'
        "      ready: {kind: tcp, timeout: 10s}\n"
    )
    r = faultday("preflight", "--profile", str(profile), "--report-dir", str(tmp_path / "r"))
    assert r.returncode == 4, r.stderr
    assert "PREFLIGHT ERROR" in r.stderr
    (run,) = (tmp_path / "r").glob("preflight-*")
    assert '"verdict": "error"' in (run / "journal.json").read_text()
    assert (run / "report.html").is_file()
