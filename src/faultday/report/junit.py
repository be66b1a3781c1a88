"""JUnit XML: one testcase per check, failures carrying expected vs observed."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from faultday.core.journal import Journal, RunVerdict
from faultday.report.view import not_evaluated, scenario_name

JUNIT_NAME = "junit.xml"
# XML 1.0 cannot carry most control characters; a log line quoted in a message may.
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    return _BAD_XML.sub("\N{REPLACEMENT CHARACTER}", text)


def _counts(suite: ET.Element) -> dict[str, int]:
    cases = suite.findall("testcase")
    return {
        "tests": len(cases),
        "failures": sum(1 for c in cases if c.find("failure") is not None),
        "errors": sum(1 for c in cases if c.find("error") is not None),
        "skipped": sum(1 for c in cases if c.find("skipped") is not None),
    }


def suite_for(journal: Journal) -> ET.Element:
    """One ``<testsuite>`` for a run."""
    name = scenario_name(journal)
    wall = (journal.ended or journal.started) - journal.started if journal.started else 0.0
    suite = ET.Element("testsuite", name=name)
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("run_id", journal.run_id),
        ("verdict", str(journal.verdict)),
        ("reason", journal.reason),
        ("severity", journal.severity),
        ("runbook", journal.runbook or ""),
        ("stack", journal.stack_profile),
    ):
        ET.SubElement(props, "property", name=key, value=_clean(value))
    classname = f"faultday.{name}"
    for c in journal.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=classname,
            name=_clean(f"[{c.section}] {c.window}: {c.label}"),
            time="0",
        )
        msg = f"expected {c.expected or '?'}, observed {c.observed or '?'} (n={c.n})"
        body = _clean("\n".join(x for x in (msg, c.message) if x))
        if c.verdict == "failed":
            ET.SubElement(case, "failure", message=_clean(msg), type=f"check.{c.check}").text = body
        elif c.verdict == "error":
            ET.SubElement(
                case, "error", message=_clean(c.message or "check error"), type=f"check.{c.check}"
            ).text = body
        elif c.verdict not in ("passed",):
            ET.SubElement(case, "skipped", message=_clean(f"{c.verdict}: {c.message}"))
    for label in not_evaluated(journal):
        case = ET.SubElement(suite, "testcase", classname=classname, name=_clean(label), time="0")
        ET.SubElement(case, "skipped", message=f"not evaluated: run {journal.verdict}")
    if journal.verdict in (RunVerdict.ABORTED, RunVerdict.ERROR, RunVerdict.RUNNING):
        case = ET.SubElement(suite, "testcase", classname=classname, name="run", time=f"{wall:.3f}")
        ET.SubElement(
            case,
            "error",
            message=_clean(f"run {journal.verdict}: {journal.reason}"),
            type=f"run.{journal.verdict}",
        ).text = _clean("\n".join(journal.errors))
    counts = _counts(suite)
    suite.attrib.update({k: str(v) for k, v in counts.items()})
    suite.set("time", f"{wall:.3f}")
    suite.set(
        "timestamp", datetime.fromtimestamp(journal.started or 0, UTC).isoformat(timespec="seconds")
    )
    return suite


def junit_xml(journals: Sequence[Journal], *, name: str = "faultday") -> str:
    """``<testsuites>`` with one suite per run."""
    root = ET.Element("testsuites", name=name)
    total = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for j in journals:
        suite = suite_for(j)
        root.append(suite)
        for k in total:
            total[k] += int(suite.get(k, "0"))
    root.attrib.update({k: str(v) for k, v in total.items()})
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(journals: Sequence[Journal], path: Path, *, name: str = "faultday") -> Path:
    path.write_text(junit_xml(journals, name=name), encoding="utf-8")
    return path
