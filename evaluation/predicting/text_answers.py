"""Answers in words as prediction rows: a vision-language model (any callable from a uint8 NHWC
batch to one string per image, asked `VLM_PROMPT`) or a predictions file's `pred_text` column.

Each answer is mapped to a class of the data's label space by `AnswerVocabulary` (exact match on
the class names and WordNet synonyms, case- and article-insensitive). The row's pred_class is that
class, or -1 when the answer names none or several (answer_status unmapped / ambiguous): such a
row counts as wrong. The answer is kept in `pred_text` (its first MAX_ANSWER_CHARACTERS; text that
cannot be written as UTF-8 escaped), so every analysis reads it back from the table.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from builder import __version__
from builder.core.classes import class_of
from builder.core.errors import UsageError
from builder.core.untrusted import describe
from evaluation.model_formats.labels import LabelSpace
from evaluation.model_formats.models import Preprocessing
from evaluation.zero_shot.answers import VLM_PROMPT, AnswerVocabulary

from .data import EvalBatches, SourceSplit, make_loader, read_dataset_manifest
from .predict import PredictionRun, RunPlan, is_partial, scored_row, source_display_name
from .predictions import MAX_ANSWER_CHARACTERS

CANVAS = Preprocessing(
    mean=(0.0, 0.0, 0.0),
    std=(1 / 255,) * 3,
    source="the canvas as it is, uint8 RGB, to a callable that answers in words (it prepares images itself)",
)


def answer_space(wnids: Sequence[str]) -> LabelSpace:
    """The label space answers are mapped into: the data's classes."""
    index = np.array([class_of(wnid).index for wnid in wnids])
    return LabelSpace(
        "answers",
        np.arange(len(index)),
        index,
        f"answers in words, mapped by name to the config's {len(index)} classes (AnswerVocabulary)",
    )


def stored_answer(text: str | None) -> str | None:
    """An answer as the table keeps it: its first MAX_ANSWER_CHARACTERS, lone surrogates escaped;
    an empty answer is no answer (None), as an empty cell of a file is."""
    if not text:
        return None
    kept = text[:MAX_ANSWER_CHARACTERS]
    return kept.encode("utf-8", "backslashreplace").decode("utf-8")


def answer_rows(answers: Sequence[str | None], samples: list[dict], wnids, vocabulary: AnswerVocabulary) -> list[dict]:
    """The prediction row of each sample from its answer (same order)."""
    labels, statuses = vocabulary.map_many(answers)
    rows = []
    for sample, answer, label, status in zip(samples, answers, labels.tolist(), statuses.tolist()):
        row = scored_row(sample, wnids, [int(label)], None, lambda class_index: None)
        row["pred_text"] = stored_answer(answer)
        row["answer_status"] = status
        rows.append(row)
    return rows


def answers_record(vocabulary: AnswerVocabulary, prompt: str | None, source: str) -> dict:
    """The metadata `answers` of a run: the prompt asked (None when not known), the vocabulary's
    digest, where the answers came from."""
    return {"prompt": prompt, "vocabulary": vocabulary.describe(), "source": source}


def checked_answers(answers, count: int, name: str) -> list[str | None]:
    """A callable's answers for a batch of `count` images: one string (or None, no answer) each."""
    if isinstance(answers, (str, bytes)) or not isinstance(answers, Sequence):
        raise UsageError(
            f"{name} returned {describe(answers)} for a batch of {count} images: it must return a list of "
            "strings, one answer per image"
        )
    if len(answers) != count:
        raise UsageError(f"{name} returned {len(answers)} answers for a batch of {count} images: one per image")
    for answer in answers:
        if answer is not None and not isinstance(answer, str):
            raise UsageError(f"{name} returned {describe(answer)} as an answer: each answer is a string")
    return list(answers)


def plan_answers(source, config: str | None, split: str, batch_size: int, limit: int | None) -> RunPlan:
    """The data of an answers run: the canvas as it is, the config's classes as the label space."""
    from evaluation.model_formats.labels import config_wnids

    where = SourceSplit(source, config, split)
    manifest = read_dataset_manifest(where)
    wnids = config_wnids(manifest)
    return RunPlan(EvalBatches(where, CANVAS, batch_size, limit), manifest, wnids, answer_space(wnids))


def run_answers(
    answer: Callable,
    name: str,
    plan: RunPlan,
    source,
    split: str,
    *,
    workers: int = 2,
    limit: int | None = None,
    progress: bool = True,
) -> PredictionRun:
    """Ask `answer` about every image of `plan` (verified) and map its answers: the run's rows."""
    from tqdm import tqdm

    vocabulary = AnswerVocabulary(plan.wnids)
    dataset = plan.dataset
    loader = make_loader(dataset, workers, pin_memory=False)
    rows, errors = [], []
    expected = dataset.num_samples if limit is None else min(limit, dataset.num_samples or limit)
    started = time.perf_counter()
    with tqdm(total=expected, unit="img", desc=f"answers {name}", disable=not progress, file=sys.stderr) as bar:
        for batch in loader:
            errors.extend(batch.errors)
            if batch.images is not None:
                pixels = batch.images.permute(0, 2, 3, 1).contiguous().numpy()
                given = checked_answers(answer(pixels), len(batch.rows), name)
                rows.extend(answer_rows(given, batch.rows, plan.wnids, vocabulary))
            bar.update(len(batch.rows) + sum(1 for e in batch.errors if e["key"] is not None))
    seconds = time.perf_counter() - started
    rows.sort(key=lambda r: r["key"])
    errors.sort(key=lambda e: (e["shard"], e["key"] or ""))
    metadata = {
        "model": {"spec": name, "checkpoint": None, "checkpoint_sha256": None, "declared_classes": None},
        "preprocessing": CANVAS.to_json(),
        "label_space": plan.space.to_json(),
        "data": {
            "source": source_display_name(source),
            "config": plan.manifest.get("config"),
            "split": split,
            "fingerprint": plan.manifest.get("fingerprint"),
            "num_samples": dataset.num_samples,
            "limit": limit,
            "partial": is_partial(limit, dataset.num_samples),
            "verified": plan.verified,
        },
        "run": {
            "device": "the callable's own",
            "batch_size": dataset.batch_size,
            "workers": workers,
            "seconds": round(seconds, 3),
            "images_per_second": round(len(rows) / seconds, 2) if seconds else None,
        },
        "toolkit": {"name": "hard-spurious-imagenet", "version": __version__},
        "notes": [ANSWERS_NOTE],
        "answers": answers_record(vocabulary, VLM_PROMPT, "a callable answering in words"),
    }
    return PredictionRun(rows, metadata, errors, seconds)


ANSWERS_NOTE = (
    "answers in words: each mapped to a class by exact match on the class names and WordNet synonyms (case "
    "and a leading article aside); an answer naming no class, or several, counts as wrong"
)
