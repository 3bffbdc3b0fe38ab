"""A vision-language model evaluated in the caller's process (`hsi.evaluate(fn, data,
outputs="text")`): `fn` gets uint8 NHWC batches of the canvas as it is (asked, by whoever wraps the
model, `VLM_PROMPT`) and returns one answer per image; the answers are mapped to the data's classes
(`predicting.text_answers`) and analysed like any predictions, with the share of unmapped answers.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from builder.core.errors import UsageError
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.predicting.predict import verify_plan
from evaluation.predicting.predictions import PREDICTIONS_NAME, write_predictions
from evaluation.predicting.text_answers import plan_answers, run_answers

from .result import Evaluation


def evaluate_answers(
    answer: Callable,
    data,
    config: str | None,
    split: str,
    name: str | None,
    batch_size: int,
    workers: int,
    limit: int | None,
    progress: bool,
    bootstrap: BootstrapSettings,
    announce: Callable[[str], None] = print,
) -> Evaluation:
    """Ask `answer` about every image of one split and score its answers (see the module)."""
    from .pipeline import analyse

    if isinstance(answer, (str, Path)) or not callable(answer):
        raise UsageError(
            "outputs='text' takes a callable from a uint8 NHWC numpy batch to one answer (a string) per image, "
            f"not a {type(answer).__name__}"
        )
    label = name or f"answers:{getattr(answer, '__name__', type(answer).__name__)}"
    plan = plan_answers(data, config, split, batch_size, limit)
    verify_plan(plan, split, limit, announce)
    run = run_answers(answer, label, plan, data, split, workers=workers, limit=limit, progress=progress)
    with tempfile.TemporaryDirectory(prefix="hsi-answers-") as tmp:
        path = write_predictions(Path(tmp) / PREDICTIONS_NAME, run.rows, run.errors, run.metadata)
        report = analyse(path, Path(tmp), bootstrap)
    return Evaluation(report, run.rows, run.errors, run.metadata, bootstrap)


__all__ = ["evaluate_answers"]
