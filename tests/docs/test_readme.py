"""README.md is the front door: short, the two commands on its first screen, a link
to the doc of each subject it only introduces."""

from __future__ import annotations

from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()
FIRST_SCREEN = 24  # lines of a terminal or of GitHub's page above the fold


def test_the_readme_is_short() -> None:
    assert len(README) < 6000, f"README.md has {len(README)} characters; move detail to docs/"


def test_make_demo_and_make_test_are_on_the_first_screen() -> None:
    top = "\n".join(README.splitlines()[:FIRST_SCREEN])
    assert "make demo" in top and "make test" in top


def test_each_subject_links_its_doc() -> None:
    for doc in ("safety", "proxy", "docker", "kubernetes", "architecture"):
        assert f"](docs/{doc}.md)" in README, f"README.md does not link docs/{doc}.md"
