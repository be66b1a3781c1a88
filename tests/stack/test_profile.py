"""Stack profiles: loading by name, validation with positions, dependency order."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.stack.conftest import REPO, write_profile

from faultday.core.profile import PACKAGED_PROFILES, load_profile
from faultday.errors import ScenarioError


def test_local_profile_loads_by_name_with_the_expected_targets() -> None:
    p = load_profile("local", base_dir=REPO)
    assert p.source == str(REPO / "stack" / "local.yaml")
    assert set(p.spec.components) == {
        "redis",
        "triton",
        "qdrant",
        "llm-primary",
        "llm-backup",
        "llm-canary",
        "tools",
        "agent",
        "proxy",
        "collector",
    }
    assert p.spec.collector == "collector"
    assert "agent->qdrant" in p.target_names()
    order = p.start_order()
    assert order.index("proxy") < order.index("agent")
    assert order.index("qdrant") < order.index("agent")


def test_packaged_copy_is_identical_and_used_outside_a_checkout(tmp_path: Path) -> None:
    # The agent's policy file ships beside the profiles ({profile_dir}/agent.yaml).
    for name in ("local.yaml", "local-real.yaml", "agent.yaml"):
        assert (PACKAGED_PROFILES / name).read_text() == (REPO / "stack" / name).read_text()
    p = load_profile("local", base_dir=tmp_path)
    assert p.source == str(PACKAGED_PROFILES / "local.yaml")


def test_unknown_profile_name_suggests_a_close_one(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="did you mean 'local'"):
        load_profile("locall", base_dir=REPO)


def test_every_problem_is_reported_with_its_position(tmp_path: Path) -> None:
    f = write_profile(
        tmp_path / "bad.yaml",
        """\
        spec:
          proxy: null
          components:
            a:
              type: comand
            b:
              command: ["x", "{port:grpc}", "{url:nope}"]
              depends_on: [zz]
              colour: red
          edges: ["b->a", "b-a"]
        """,
    )
    with pytest.raises(ScenarioError) as info:
        load_profile(str(f), base_dir=tmp_path)
    text = str(info.value)
    assert (
        f"{f}:8:13: spec.components.a.type: "
        "unknown component type 'comand'; did you mean 'command'?" in text
    )
    assert ":12:7: spec.components.b.colour: unknown key" in text


def test_semantic_problems_carry_positions(tmp_path: Path) -> None:
    f = write_profile(
        tmp_path / "bad.yaml",
        """\
        spec:
          proxy: null
          components:
            a:
              type: redis
            b:
              command: ["x", "{port:grpc}", "{url:nope}"]
              depends_on: [zz]
          edges: ["b->a", "b-a"]
        """,
    )
    with pytest.raises(ScenarioError) as info:
        load_profile(str(f), base_dir=tmp_path)
    msgs = [str(p) for p in info.value.problems]
    assert any(":10:22: spec.components.b.command[1]: no port named 'grpc'" in m for m in msgs), (
        msgs
    )
    assert any("spec.components.b.command[2]: no component 'nope'" in m for m in msgs), msgs
    assert any(":11:20: spec.components.b.depends_on[0]: no component 'zz'" in m for m in msgs), (
        msgs
    )
    assert any("spec.edges[1]: an edge is written 'from->to'" in m for m in msgs), msgs


def test_dependency_cycles_are_refused(tmp_path: Path) -> None:
    f = write_profile(
        tmp_path / "cyc.yaml",
        """\
        spec:
          proxy: null
          components:
            a: {command: ["x", "{url:b}"]}
            b: {command: ["x"], depends_on: [a]}
        """,
    )
    with pytest.raises(ScenarioError, match="dependency cycle: a -> b -> a"):
        load_profile(str(f), base_dir=tmp_path)


def test_subset_keeps_dependencies_and_drops_foreign_edges() -> None:
    p = load_profile("local", base_dir=REPO).subset(["qdrant", "redis"])
    assert set(p.spec.components) == {"qdrant", "redis"}
    assert p.spec.edges == ()
    assert p.spec.proxy is None


def test_an_unknown_key_of_a_component_named_like_a_field_gets_the_components_keys(
    tmp_path: Path,
) -> None:
    # `ready` is a component's name here, not its probe: the hint is ComponentSpec's keys.
    f = write_profile(
        tmp_path / "p.yaml",
        """\
        spec:
          proxy: null
          components:
            ready: {comand: ["{python}", "-c", "pass"]}
        """,
    )
    with pytest.raises(ScenarioError) as info:
        load_profile(str(f), base_dir=tmp_path)
    (problem,) = info.value.problems
    assert problem.path == "spec.components.ready.comand"
    assert problem.message == "unknown key; did you mean 'command'?"
