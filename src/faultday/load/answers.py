"""``answers.jsonl``: the run's sampled answers, written as the load stops; the report reads it."""

from __future__ import annotations

import json
import logging
import os

from faultday.core.protocols import RunView
from faultday.core.records import ANSWERS_NAME

log = logging.getLogger(__name__)


def write_answers(run: RunView) -> int:
    """Write every sampled answer the run kept, oldest first; how many. Nothing when none."""
    samples = run.observations.answer_samples()
    if not samples:
        return 0
    path = run.run_dir / ANSWERS_NAME
    tmp = path.with_suffix(".jsonl.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for s in samples:
                fh.write(json.dumps(s.to_json(), ensure_ascii=True) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        run.error(f"could not write {path}: {exc}")
        return 0
    log.info("%d sampled answers in %s", len(samples), path)
    return len(samples)
