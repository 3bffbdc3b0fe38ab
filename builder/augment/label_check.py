"""The label check of generated images: does the ERM model (and, with --check-model, a second
model) call the image by its true class?

--keep all    every generated image is kept (the check is still recorded);
--keep agree  only images that every checking model assigns to the true class are kept;
--keep flag   every image is kept, and the ones that fail the check are flagged in augment.json.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

from builder.core.errors import UsageError

KEEP_RULES = ("all", "agree", "flag")


def check_keep_rule(rule: str) -> str:
    if rule not in KEEP_RULES:
        raise UsageError(f"--keep must be one of {', '.join(KEEP_RULES)}, got {rule!r}")
    return rule


@dataclass(frozen=True)
class LabelCheck:
    erm_label: int
    check_label: int | None
    agrees: bool
    kept: bool
    flagged: bool

    def to_json(self) -> dict:
        return asdict(self)


def label_check(true_label: int, erm_label: int, check_label: int | None, rule: str) -> LabelCheck:
    agrees = erm_label == true_label and (check_label is None or check_label == true_label)
    kept = agrees or rule != "agree"
    return LabelCheck(erm_label, check_label, agrees, kept, flagged=rule == "flag" and not agrees)


def tally(checks: Sequence[tuple[int, LabelCheck]]) -> dict[str, dict[str, int]]:
    """{label: {generated, erm_agrees, check_agrees, agrees, kept}} of (true label, check) pairs."""
    counts: dict[str, dict[str, int]] = {}
    for label, check in checks:
        row = counts.setdefault(
            str(label), {"generated": 0, "erm_agrees": 0, "check_agrees": 0, "agrees": 0, "kept": 0}
        )
        row["generated"] += 1
        row["erm_agrees"] += int(check.erm_label == label)
        row["check_agrees"] += int(check.check_label == label)
        row["agrees"] += int(check.agrees)
        row["kept"] += int(check.kept)
    return counts


def merge_tallies(parts: Sequence[Mapping[str, Mapping[str, int]]]) -> dict[str, dict[str, int]]:
    merged: dict[str, dict[str, int]] = {}
    for part in parts:
        for label, row in part.items():
            into = merged.setdefault(label, dict.fromkeys(row, 0))
            for name, value in row.items():
                into[name] = into.get(name, 0) + value
    return dict(sorted(merged.items(), key=lambda item: int(item[0])))


def kept_shares(counts: Mapping[str, Mapping[str, int]], class_names: Sequence[str]) -> dict:
    """Per class and overall: generated, agreeing and kept images and the kept and agreeing shares."""

    def shares(row: Mapping[str, int]) -> dict:
        generated = row.get("generated", 0)
        return {
            **dict(row),
            "kept_share": round(row.get("kept", 0) / generated, 6) if generated else None,
            "agree_share": round(row.get("agrees", 0) / generated, 6) if generated else None,
        }

    total = {name: sum(row.get(name, 0) for row in counts.values()) for name in next(iter(counts.values()), {})}
    return {
        "per_class": {class_names[int(label)]: shares(row) for label, row in counts.items()},
        "overall": shares(total) if counts else shares({"generated": 0}),
    }
