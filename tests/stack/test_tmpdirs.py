"""Triton's hard-coded /tmp folders are found from the run's processes, never by name alone."""

from __future__ import annotations

from pathlib import Path

from faultday.stack.tmpdirs import held_tmp_dirs, left_near, remove_tmp_dirs


def _proc(proc: Path, pid: int, *argv: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_the_stubs_model_folder_and_the_python_env_made_with_it_are_found(tmp_path: Path) -> None:
    proc, tmp = tmp_path / "proc", tmp_path / "tmp"
    tmp.mkdir()
    folder = tmp / "folderAb12Cd"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text("name: 'embedder'")
    ours, full = tmp / "python_env_Xy34Zw", tmp / "python_env_Full01"
    for d in (ours, full):
        d.mkdir()
    (full / "lib").mkdir()  # an extracted execution environment: not PyTriton's
    _proc(proc, 41, "/ws/tritonserver/bin/tritonserver", "--http-port", "1")
    _proc(proc, 42, "/ws/backends/python/triton_python_backend_stub", f"{folder}/1/model.py", "x")
    _proc(proc, 43, "python", "-m", "something", "/tmp/folderNotOurs/1/model.py")
    found = held_tmp_dirs([41, 42, 43], proc=proc, tmp=tmp)
    assert folder in found and ours in found
    assert full not in found  # never a non-empty one
    assert not any(p.name == "folderNotOurs" for p in found)  # another /tmp, another run
    # Nothing of the run's processes points at /tmp: nothing is claimed.
    assert held_tmp_dirs([43], proc=proc, tmp=tmp) == set()
    removed = remove_tmp_dirs(found)
    assert sorted(removed) == sorted(str(p) for p in found)
    assert not folder.exists() and not ours.exists() and full.exists()


def test_a_python_env_that_filled_up_meanwhile_is_left_alone(tmp_path: Path) -> None:
    env = tmp_path / "python_env_Abc123"
    env.mkdir()
    (env / "x").write_text("someone's")
    assert remove_tmp_dirs({env}) == []
    assert env.exists()


def test_a_model_folder_no_stub_named_yet_is_found_near_the_servers_start(tmp_path: Path) -> None:
    proc, tmp = tmp_path / "proc", tmp_path / "tmp"
    proc.mkdir()
    tmp.mkdir()
    mine, named = tmp / "folderMine01", tmp / "folderOther1"
    for f in (mine, named):
        f.mkdir()
        (f / "config.pbtxt").write_text("name: 'embedder'")
    env = tmp / "python_env_Mine01"
    env.mkdir()
    # Another server's stub names its folder: never claimed, however near in time.
    _proc(proc, 77, "/ws/backends/python/triton_python_backend_stub", f"{named}/1/model.py")
    start = mine.stat().st_ctime
    assert left_near([start], proc=proc, tmp=tmp) == {mine, env}
    # Long after the start, nothing is claimed.
    assert left_near([start - 3600], proc=proc, tmp=tmp) == set()
