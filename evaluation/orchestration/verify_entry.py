"""`hsi leaderboard verify`: re-score a leaderboard entry from its predictions against the data it
names. It proves that the entry's figures follow from its predictions and the data, not that a model
made the predictions (evaluation.ranking.verification_record names what it checks and what not;
`rerun_entry` runs the model again where its spec and weights are at hand).

What is checked, in order (each difference is one `Mismatch`, naming the field, what the entry or
the predictions claim and what was found):

1. the entry and its predictions file, found by the one reader of evaluation folders
   (`eval_reader.read_submission`: the entry read by `entries.read_entry`, every field of its schema);
2. the predictions file: its sha256 is the entry's, and the run metadata it carries (model spec,
   weights, preprocessing, label space, data revision) is the entry's;
3. the data: its manifest's config and fingerprint are the entry's (another revision stops the
   check here), and every shard read is proved by the sha256 its manifest lists, as `hsi eval`
   proves them;
4. the rows: every sample of the data has exactly one prediction row and no row names another
   sample; each row's copy of its sample (shard, cls, label class, group, size, every field of the
   sample's json) is the shard's own, or the row was tampered with; an error row (a sample the run
   could not decode) is checked by decoding that sample again;
5. the figures: the predicted classes are scored against the shards' own labels and metadata (the
   predictions' copies of them are never used, as `hsi.score` scores a table), with the entry's
   bootstrap settings, and every headline figure recomputed must be the entry's (within the
   6-decimal rounding every figure is written with). The clean-photo top-1 needs the model and the
   photos: it is reported, not re-scored.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.errors import UsageError, printable
from builder.core.hashing import sha256_file
from builder.core.untrusted import describe
from builder.formats.composites import COMPOSITE_FIELDS
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.predicting.predictions import PREDICTIONS_NAME, read_predictions, write_predictions
from evaluation.ranking.entries import (
    REPORTED_ONLY,
    headline_figures,
    label,
    one_line,
    same_number,
)
from evaluation.ranking.eval_reader import Submission, read_submission
from evaluation.ranking.provenance import recorded_preprocessing

ROW_LINES = 20  # tampered-row mismatches shown one a line; the rest are counted
ROUNDING = 1e-6  # every figure is written rounded to 6 decimals
MISSING = object()


class Said(str):
    """A description of what was found (not a value the data holds): shown as it is, unquoted."""


@dataclass(frozen=True)
class Mismatch:
    """One field whose claimed value is not what was found."""

    field: str
    claimed: object
    found: object
    claimed_by: str = "entry"
    found_by: str = "recomputed"

    def line(self) -> str:
        return f"{self.field}: {self.claimed_by} {_show(self.claimed)}, {self.found_by} {_show(self.found)}"


@dataclass
class Verification:
    """What `verify_entry` found: the entry, the figures recomputed (None when the check stopped
    before scoring), the mismatches and notes on what could not be re-scored; and what a re-run
    needs of it: the predictions file, its table and metadata, and the data as opened."""

    entry_file: Path
    entry: dict
    figures: dict | None = None
    mismatches: list[Mismatch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    predictions_file: Path | None = None
    frame: object = None  # the submitted predictions (a DataFrame, error rows too)
    metadata: dict | None = None  # their run metadata
    dataset: object = None  # the data as opened and proved (external.Dataset)

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.figures is not None


def _show(value: object) -> str:
    if value is MISSING:
        return "nothing"
    if isinstance(value, Said):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.6g}"
    if isinstance(value, str):  # whole (a sha256 is 64 characters), within reason
        text = printable(repr(value))
        return text if len(text) <= 120 else text[:117] + "..."
    if isinstance(value, list) and all(isinstance(item, (str, int, float)) for item in value) and len(value) <= 8:
        return "[" + ", ".join(_show(item) for item in value) + "]"
    return describe(value)


def _plain(value):
    """A value of a pandas row as a Python one: NaN and NA as None, numpy scalars as Python's."""
    if value is None:
        return None
    if hasattr(value, "item") and not hasattr(value, "__len__"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    try:
        import pandas as pd

        if value is pd.NA:
            return None
    except ImportError:  # pragma: no cover - pandas comes with the eval extra
        pass
    return value


def verify_entry(
    entry_file: Path,
    data=None,
    predictions: Path | None = None,
    announce: Callable[[str], None] = print,
    submitted: Submission | None = None,
) -> Verification:
    """Re-score the entry at `entry_file` (an entry.json, or its folder) from its predictions (beside
    it, or `predictions`) on `data` (a release folder, a composed dataset folder or hf://; default:
    the entry's own source when it is an hf:// address). `submitted`: the entry and predictions
    already found (by `read_submission`)."""
    from .external import Dataset

    submitted = submitted or read_submission(Path(entry_file), predictions)
    path, entry, table = submitted.entry_file, submitted.entry, submitted.predictions_file
    result = Verification(path, entry, predictions_file=table)
    digest = sha256_file(table)
    if digest != entry["predictions"]["sha256"]:
        result.mismatches.append(
            Mismatch("predictions.sha256", entry["predictions"]["sha256"], digest, found_by=table.name)
        )
    frame, metadata = read_predictions(table)
    result.frame, result.metadata = frame, metadata
    result.mismatches += metadata_mismatches(entry, metadata)
    revision = entry["data"]
    if data is None:
        if "://" not in revision["source"]:
            raise UsageError(
                f"{printable(str(path))}: its data is the local folder {revision['source']!r}: pass --data, the "
                "release folder, composed dataset folder or hf:// address holding fingerprint "
                f"{revision['fingerprint']}"
            )
        data = revision["source"]
    dataset = Dataset(data, revision["config"], revision["split"], announce, limit=revision["limit"])
    result.dataset = dataset
    for key, found in (("config", label(dataset.manifest.get("config"))), ("fingerprint", label(dataset.fingerprint))):
        if found != revision[key]:
            result.mismatches.append(Mismatch(f"data.{key}", revision[key], found, found_by="--data"))
    if any(m.field in ("data.config", "data.fingerprint") for m in result.mismatches):
        return result  # another data revision: nothing below would mean anything
    if revision["num_samples"] is not None and revision["num_samples"] != len(dataset):
        result.mismatches.append(Mismatch("data.num_samples", revision["num_samples"], len(dataset), found_by="--data"))
    samples, errors = dataset.samples, dataset.errors  # every shard read is proved by its sha256 here
    rows = frame.to_dict("records")
    coverage = row_mismatches(rows, samples, errors, dataset, result)
    if coverage:
        return result  # rows for other samples (or none for some): the figures cannot follow
    result.figures = rescored_figures(entry, rows, samples, metadata, dataset.wnids, table.name)
    compare(entry["figures"], result.figures, "figures", result.mismatches, skip=REPORTED_ONLY)
    for name in REPORTED_ONLY:
        if entry["figures"].get(name) is not None:
            result.figures[name] = entry["figures"][name]
            result.notes.append(
                f"figures.{name}: reported by the model run, not re-scored (it needs the model and the clean photos)"
            )
    return result


def metadata_mismatches(entry: dict, metadata: dict) -> list[Mismatch]:
    """The entry's description of the run against the run metadata its predictions file carries."""
    model, data = metadata["model"], metadata["data"]
    space = metadata["label_space"]
    pre = recorded_preprocessing(metadata["preprocessing"], model["spec"])
    checkpoint = model.get("checkpoint")
    pairs = [
        ("model.spec", entry["model"]["spec"], one_line(model["spec"])),
        ("model.weights.file", entry["model"]["weights"]["file"], one_line(checkpoint) if checkpoint else None),
        ("model.weights.sha256", entry["model"]["weights"]["sha256"], model.get("checkpoint_sha256")),
        ("model.identity", entry["model"]["identity"], model.get("identity")),
        ("data.source", entry["data"]["source"], one_line(data["source"])),
        *((f"data.{key}", entry["data"][key], label(data.get(key))) for key in ("config", "split", "fingerprint")),
        ("data.limit", entry["data"]["limit"], data.get("limit")),
        (
            "data.toolkit_version",
            entry["data"]["toolkit_version"],
            label((metadata.get("toolkit") or {}).get("version")),
        ),
        *(
            (f"label_space.{key}", entry["label_space"][key], space.get(key))
            for key in ("name", "classes", "description")
        ),
        # both read by the one rule, so an older entry and its older predictions still agree
        *((f"preprocessing.{key}", value, pre.get(key)) for key, value in entry["preprocessing"].items()),
    ]
    return [
        Mismatch(name, claimed, found, found_by="predictions") for name, claimed, found in pairs if claimed != found
    ]


def row_mismatches(rows: list[dict], samples: list[dict], errors: list[dict], dataset, result: Verification) -> bool:
    """Every row against its sample (mismatches into `result`); True when the rows do not cover the
    data's samples one to one (then no figure is recomputed)."""
    by_key = {sample["key"]: sample for sample in samples}
    broken = {error["key"]: error for error in errors if error.get("key") is not None}
    broken_shards = sorted({error["shard"] for error in errors if error.get("key") is None})
    seen = {row["key"] for row in rows if row["key"] is not None}
    found: list[Mismatch] = []
    unknown = sorted(seen - set(by_key) - set(broken))
    missing = sorted(set(by_key) - seen) + sorted(set(broken) - seen)
    for keys, claimed, actual in (
        (unknown, "a prediction row", "no such sample"),
        (missing, "no prediction row", "a sample"),
    ):
        if keys:
            more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
            field = f"predictions[{printable(keys[0])}]{more}"
            result.mismatches.append(Mismatch(field, Said(claimed), Said(actual), "predictions", "data"))
    row_shards = sorted({row["shard"] for row in rows if row["key"] is None and row["status"] != "ok"})
    if row_shards != broken_shards:
        result.mismatches.append(
            Mismatch("predictions.unreadable_shards", row_shards, broken_shards, "predictions", "data")
        )
    withheld = []
    for index, row in enumerate(rows):
        key = row["key"]
        if key is None:
            continue
        if row["status"] == "ok":
            if key in broken:
                found.append(
                    Mismatch(
                        f"predictions[{printable(key)}].status",
                        "ok",
                        Said("a sample whose metadata does not read"),
                        "predictions",
                        "shard",
                    )
                )
            elif key in by_key:
                found += sample_mismatches(row, by_key[key], dataset.wnids)
        elif key in by_key:
            withheld.append((index, key))
    found += undecodable_claims([(rows[i], by_key[k]) for i, k in withheld], dataset)
    result.mismatches += found[:ROW_LINES]
    if len(found) > ROW_LINES:
        result.mismatches.append(
            Mismatch(
                "predictions (more rows)",
                Said(f"{len(found) - ROW_LINES} more fields"),
                Said("the shards' samples"),
                "predictions",
                "differing from",
            )
        )
    return bool(unknown or missing)


def sample_mismatches(row: dict, sample: dict, wnids) -> list[Mismatch]:
    """The fields of one ok row that are not its sample's (a tampered row)."""
    from evaluation.predicting.predict import scored_row

    expected = scored_row(sample, wnids, [int(row["pred_class"])], None, lambda _: None)
    meta = sample["meta"]
    extra = {k: v for k, v in meta.items() if k not in COMPOSITE_FIELDS}
    wanted = {
        "shard": sample["shard"],
        "cls": sample["cls"],
        "label_class": expected["label_class"],
        "paired_class_index": expected["paired_class_index"],
        **{name: meta.get(name) for name in COMPOSITE_FIELDS},
    }
    where = f"predictions[{printable(str(row['key']))}]"
    found = [
        Mismatch(f"{where}.{name}", _plain(row.get(name)), value, "predictions", "shard")
        for name, value in wanted.items()
        if _plain(row.get(name)) != value
    ]
    try:
        stored = json.loads(row["extra_json"]) if _plain(row.get("extra_json")) is not None else {}
    except (TypeError, ValueError):
        stored = MISSING
    if stored != extra:
        found.append(Mismatch(f"{where}.extra_json", stored, extra or None, "predictions", "shard"))
    return found


def undecodable_claims(claims: list[tuple[dict, dict]], dataset) -> list[Mismatch]:
    """Error rows of samples whose metadata reads: each sample is decoded again, and one that
    decodes was not an error: its prediction was left out."""
    if not claims:
        return []
    from builder.formats.stream import iter_tar_samples
    from evaluation.model_formats.models import Preprocessing
    from evaluation.predicting.data import decode_member_sample

    wanted = {sample["key"]: row for row, sample in claims}
    shards = {sample["shard"] for _, sample in claims}
    found = []
    for local in dataset.shard_files:
        if Path(local).name not in shards:
            continue
        for key, members in iter_tar_samples(local):
            if key not in wanted:
                continue
            try:
                decode_member_sample(key, members, Preprocessing())
            except Exception:  # noqa: BLE001 - the sample does not decode, as its error row says
                continue
            found.append(
                Mismatch(
                    f"predictions[{printable(key)}].status",
                    str(wanted[key]["status"]),
                    Said("a sample that decodes (its prediction is missing)"),
                    "predictions",
                    "shard",
                )
            )
    return found


def rescored_figures(entry: dict, rows: list[dict], samples: list[dict], metadata: dict, wnids, name: str) -> dict:
    """Every headline figure from the rows' predicted classes scored against the shards' samples,
    with the entry's bootstrap settings: the path `hsi.score` takes for a table of predictions."""
    import pandas as pd

    from evaluation.analysis.metrics import compute_metrics
    from evaluation.predicting.given import checked_table, prediction_rows

    readable = {sample["key"] for sample in samples}
    ok = [row for row in rows if row["status"] == "ok" and row["key"] in readable]  # the others are mismatches
    table = pd.DataFrame(
        {
            "key": [row["key"] for row in ok],
            "pred_class": [int(row["pred_class"]) for row in ok],
            "top5_class": [[int(c) for c in row["top5_class"]] for row in ok],
            **{
                column: [_plain(row.get(column)) for row in ok]
                for column in ("prob_label", "prob_background_class", "prob_paired_class")
            },
        }
    )
    given = checked_table(table, f"predictions:{printable(name)}")
    keys = set(given.index)
    scored = prediction_rows(given, [s for s in samples if s["key"] in keys], [], wnids)
    errors = [
        {"key": row["key"], "shard": row["shard"], "reason": row["status"], "detail": _plain(row.get("detail"))}
        for row in rows
        if row["status"] != "ok"
    ]
    errors += [  # an ok row of a sample whose metadata does not read: an error row, as a model run makes it
        {
            "key": row["key"],
            "shard": row["shard"],
            "reason": "undecodable-sample",
            "detail": "its metadata does not read",
        }
        for row in rows
        if row["status"] == "ok" and row["key"] not in readable
    ]
    boot = entry["bootstrap"]
    settings = BootstrapSettings(resamples=boot["resamples"], seed=boot["seed"], level=boot["level"])
    with tempfile.TemporaryDirectory(prefix="hsi-verify-") as tmp:
        path = write_predictions(Path(tmp) / PREDICTIONS_NAME, scored, errors, metadata)
        frame, _ = read_predictions(path)
    metrics = compute_metrics(frame, label_space_size=metadata["label_space"]["classes"], settings=settings)
    return headline_figures(metrics)


def _label(item: object, index: int) -> str:
    return str(item["group"]) if isinstance(item, dict) and isinstance(item.get("group"), str) else str(index)


def compare(
    claimed,
    found,
    where: str,
    out: list[Mismatch],
    skip: tuple[str, ...] = (),
    tolerance: float = ROUNDING,
    found_by: str = "recomputed",
) -> None:
    """Append a Mismatch for every leaf of `claimed` that is not `found`'s (lists of groups matched
    by group name, numbers within `tolerance`: by default the 6-decimal rounding step)."""
    if isinstance(claimed, dict) and isinstance(found, dict):
        for key in sorted(set(claimed) | set(found), key=str):
            if key not in skip:
                compare(
                    claimed.get(key, MISSING), found.get(key, MISSING), f"{where}.{key}", out, (), tolerance, found_by
                )
    elif isinstance(claimed, list) and isinstance(found, list):
        left = {_label(item, n): item for n, item in enumerate(claimed)}
        right = {_label(item, n): item for n, item in enumerate(found)}
        for label in [*left, *(label for label in right if label not in left)]:
            item = f"{where}[{printable(label)}]"
            compare(left.get(label, MISSING), right.get(label, MISSING), item, out, (), tolerance, found_by)
    elif not same_number(claimed, found, tolerance):
        out.append(Mismatch(where, claimed, found, found_by=found_by))


__all__ = ["Mismatch", "Verification", "verify_entry", "compare"]
