"""The system under test is its own package: faultday_refstack imports nothing of faultday,
and faultday_wire (what both sides share) imports neither (issue 17.5).

Read from the source by an AST walk, so an import inside a function, behind
``TYPE_CHECKING`` or through ``importlib.import_module("...")`` counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[2] / "src"

FORBIDDEN = {
    "faultday_refstack": {"faultday"},
    "faultday_wire": {"faultday", "faultday_refstack"},
}


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import in ``tree``, dynamic imports by constant name included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id)
            in ("import_module", "__import__", "find_spec")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def violations(package: Path, forbidden: set[str]) -> list[str]:
    """``file:line: module`` for each import of a forbidden top-level package."""
    out = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, module in _imported(tree):
            if module.split(".")[0] in forbidden:
                out.append(f"{path.relative_to(package.parent)}:{line}: {module}")
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_no_forbidden_layer(package: str) -> None:
    root = SRC / package
    assert (root / "__init__.py").is_file()
    assert len(list(root.rglob("*.py"))) > 1  # the walk sees the package's modules
    assert violations(root, FORBIDDEN[package]) == []


def test_the_walk_finds_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text(
        "import faultday.errors\n"
        "from faultday_wire.admin import FaultSpec\n"  # allowed for the refstack
        "def f():\n"
        "    from faultday.core import yamlpos\n"
        "    import importlib\n"
        "    return importlib.import_module('faultday.cli')\n"
    )
    (pkg / "b.py").write_text("import faultday_refstack.agent\nimport faultdayx\n")
    assert violations(pkg, {"faultday"}) == [
        "pkg/a.py:1: faultday.errors",
        "pkg/a.py:4: faultday.core",
        "pkg/a.py:6: faultday.cli",
    ]


def test_the_services_start_as_programs() -> None:
    # Started only as processes: each service has a __main__ (python -m faultday_refstack.x).
    for service in ("agent", "embedder", "llmsim", "tools", "vectordb"):
        assert (SRC / "faultday_refstack" / service / "__main__.py").is_file(), service
