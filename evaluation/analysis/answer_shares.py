"""Answers in words, from their predictions alone: how many answers named no class of the label
space (unmapped) or several (ambiguous), overall and per group, and a sample of the unmapped ones
(the first by sample key, so the same table always shows the same sample). Both count as wrong
in every metric; this section says how much of the error they are.
"""

from __future__ import annotations

import pandas as pd

from builder.core.errors import printable
from evaluation.zero_shot.answers import AMBIGUOUS, UNMAPPED

from .metrics import group_sort_key

SAMPLE_SIZE = 20
SHOWN_CHARACTERS = 200  # of one answer in the sample; the table keeps more


def _shares(cell: pd.DataFrame) -> dict:
    total = int(len(cell))
    unmapped = int((cell["answer_status"] == UNMAPPED).sum())
    ambiguous = int((cell["answer_status"] == AMBIGUOUS).sum())
    return {
        "answers": total,
        "unmapped": unmapped,
        "ambiguous": ambiguous,
        "unmapped_share": round(unmapped / total, 6) if total else None,
        "ambiguous_share": round(ambiguous / total, 6) if total else None,
    }


def shown_answer(text: object) -> str | None:
    """An answer as a report shows it: one line of printable text, cut to SHOWN_CHARACTERS."""
    if not isinstance(text, str):
        return None
    line = printable(text)
    return line if len(line) <= SHOWN_CHARACTERS else line[: SHOWN_CHARACTERS - 1] + "…"


def answer_section(frame: pd.DataFrame, metadata: dict, sample_size: int = SAMPLE_SIZE) -> dict:
    """eval.json's `answers` for a predictions table of answers in words; {} for any other."""
    record = metadata.get("answers")
    if not record:
        return {}
    ok = frame[frame["status"] == "ok"]
    groups = []
    if "group" in ok and ok["group"].notna().all() and len(ok):
        for group in sorted(ok["group"].unique(), key=group_sort_key):
            groups.append({"group": group, **_shares(ok[ok["group"] == group])})
    misses = ok[ok["answer_status"] != "mapped"].sort_values("key", kind="stable")
    sample = [
        {
            "key": str(row.key),
            "group": None if pd.isna(row.group) else str(row.group),
            "status": row.answer_status,
            "answer": shown_answer(row.pred_text),
        }
        for row in misses.head(sample_size).itertuples()
    ]
    return {
        "answers": {
            **{key: record.get(key) for key in ("prompt", "vocabulary", "source")},
            "overall": _shares(ok),
            "by_group": groups,
            "sample": sample,
            "sample_of": int(len(misses)),
        }
    }


__all__ = ["answer_section", "shown_answer"]
