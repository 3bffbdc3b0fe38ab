"""What `hsi leaderboard verify` proved of an entry, in words and as `verification.json`.

Verification re-scores: it proves that an entry's figures follow from its predictions and the
data, not that a model made those predictions. `CHECKS` names each thing it checks and `UNCHECKED`
each thing it leaves unchecked, so the command, the record and the site say the same. With
`--rerun`, the entry's model spec is run again with its weights (their sha256 the entry's) and the
preprocessing the entry records, and its predictions compared with the submitted ones: then a
model is shown to make them.

`hsi leaderboard verify ENTRY --record` writes `verification.json` beside the entry, only when
asked and only when everything checked held. It is tied to the bytes it verified (the entry's and
the predictions' sha256): after the entry is rewritten it describes another entry and is not shown
(`Verified.stale`). It is someone else's file like the rest of a folder, so `read_verification`
checks every field, and refuses a record whose claims contradict themselves (a "re-run" without
a re-run, an agreement below what its own tolerance allowed). Nothing in the file proves that the
command ran: anyone can run it again, and the site names the toolkit version that wrote it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import printable
from builder.core.hashing import sha256_file
from builder.core.untrusted import Fields, UntrustedInput, check_string, read_json
from evaluation.model_formats.models import APPLIED, UNKNOWN

VERIFICATION_JSON = "verification.json"
VERIFICATION_SCHEMA, VERIFICATION_SCHEMA_VERSION = "hsi-leaderboard-verification", 1
RESCORED, RERUN = "re-scored", "re-run"
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_TOLERANCE = 0.5  # a re-run that may disagree on more than half its samples shows nothing

# What verification checks, in its order; "rerun" only with --rerun.
CHECKS = {
    "entry": "the entry reads: every field of its schema",
    "predictions_sha256": "the predictions file is the one the entry names (its sha256)",
    "run_metadata": "the run metadata inside the predictions is the entry's (spec, weights, preprocessing, label "
    "space, data revision)",
    "data_revision": "the data is the revision the entry names (config, fingerprint), every shard read matching its "
    "manifest's sha256",
    "rows": "every sample has exactly one prediction row, each row's copy of its sample is the shard's own, and each "
    "error row's sample really does not decode",
    "figures": "every headline figure follows from the predicted classes and the shards' own labels (re-scored with "
    "the entry's bootstrap settings)",
    "rerun": "the entry's model spec, with its weights and the preprocessing it records, run again on the same data, "
    "makes the same predictions and figures",
}
RESCORE_CHECKS = tuple(name for name in CHECKS if name != "rerun")
# What it leaves unchecked, each said only where it applies (`unchecked`).
UNCHECKED = {
    "model_ran": "that a model made these predictions: predictions are taken as submitted (the true labels would "
    "pass); --rerun runs the model where its spec and weights are at hand",
    "model_identity": "the model's identity: its spec, weights file and sha256 are as submitted",
    "published_weights": "which weights: the spec names a library's published weights, loaded by name for the "
    "re-run; the entry records no sha256 to compare them with",
    "in_memory_identity": "the in-memory model's identity: its class and state_dict fingerprint are as submitted",
    "preprocessing_declared": "the preprocessing: declared by whoever made the predictions, not checked",
    "preprocessing_unknown": "the preprocessing: unknown (nothing was declared)",
    "clean_top1": "the clean-photo top-1: reported by the model run (it needs the model and the photos)",
}


def unchecked(entry: dict, rerun: bool, published: bool = False) -> list[str]:
    """The names (UNCHECKED's) of what a verification of `entry` leaves unchecked: with `rerun`,
    a re-run that agreed, of `published` weights (loaded by name, no sha256 to compare)."""
    names = []
    if not rerun:
        names.append("model_ran")
        names.append("in_memory_identity" if entry["model"]["identity"] is not None else "model_identity")
    elif published:
        names.append("published_weights")
    status = entry["preprocessing"]["status"]
    if status != APPLIED:
        names.append("preprocessing_unknown" if status == UNKNOWN else "preprocessing_declared")
    if entry["figures"].get("clean_top1") is not None:
        names.append("clean_top1")
    return names


def build_record(
    entry_file: Path, entry: dict, predictions: Path, toolkit: str, rerun: dict | None, not_checked: list[str]
) -> dict:
    """The verification.json of a verification of `entry` that held (`rerun`: the re-run's summary)."""
    data = entry["data"]
    return {
        "schema": VERIFICATION_SCHEMA,
        "schema_version": VERIFICATION_SCHEMA_VERSION,
        "kind": RERUN if rerun is not None else RESCORED,
        "entry": {"file": Path(entry_file).name, "sha256": sha256_file(Path(entry_file))},
        "predictions": {"file": entry["predictions"]["file"], "sha256": entry["predictions"]["sha256"]},
        "data": {key: data[key] for key in ("config", "split", "fingerprint")},
        "toolkit_version": toolkit,
        "checked": [*RESCORE_CHECKS, *(["rerun"] if rerun is not None else [])],
        "not_checked": list(not_checked),
        "rerun": rerun,
    }


def record_text(record: dict) -> str:
    return json.dumps(record, indent=2, sort_keys=True, allow_nan=False) + "\n"


def _names(fields: Fields, key: str, known: Iterable[str]) -> list[str]:
    names = [
        check_string(value, lambda problem, n=n: fields.error(problem, f"{key}[{n}]"), choices=tuple(known))
        for n, value in enumerate(fields.list(key))
    ]
    if len(set(names)) != len(names):
        raise fields.error("names a check twice", key)
    return names


def check_record(record: object, source: Path | str) -> dict:
    """A verification record's parsed JSON, every field checked and its claims consistent (an
    UntrustedInput naming `source` and the field otherwise)."""
    top = Fields(record, source)
    top.only(
        ("schema", "schema_version", "kind", "entry", "predictions", "data", "toolkit_version", "checked")
        + ("not_checked", "rerun")
    )
    top.string("schema", choices=(VERIFICATION_SCHEMA,))
    top.integer("schema_version", low=1, high=VERIFICATION_SCHEMA_VERSION)
    kind = top.string("kind", choices=(RESCORED, RERUN))
    for key in ("entry", "predictions"):
        part = top.object(key).only(("file", "sha256"))
        part.string("file")
        part.string("sha256", pattern=_SHA256)
    data = top.object("data").only(("config", "split", "fingerprint"))
    data.string("config", None)
    data.string("split")
    data.string("fingerprint", None)
    if len(top.string("toolkit_version")) > 40:
        raise top.error("is not a toolkit version", "toolkit_version")
    checked = _names(top, "checked", CHECKS)
    _names(top, "not_checked", UNCHECKED)
    missing = [name for name in RESCORE_CHECKS if name not in checked]
    if missing:
        raise top.error(f"leaves out {missing[0]}: a record is written only when every check held", "checked")
    if (kind == RERUN) != ("rerun" in checked) or (kind == RERUN) != top.has("rerun"):
        raise top.error(f"a {kind} record lists a re-run only when it is one (kind, checked and rerun disagree)")
    if kind == RERUN:
        _check_rerun(top.object("rerun"))
    return dict(top.data)


def _check_rerun(rerun: Fields) -> None:
    rerun.only(
        ("spec", "device", "weights_sha256", "samples", "top1_agreement", "top5_agreement", "differing", "tolerance")
    )
    rerun.string("spec")
    rerun.string("device", choices=("cpu", "cuda", "mps"))
    rerun.string("weights_sha256", None, pattern=_SHA256)
    samples = rerun.integer("samples", low=1)
    differing = rerun.integer("differing", low=0, high=samples)
    tolerance = rerun.number("tolerance", low=0, high=MAX_TOLERANCE)
    for key in ("top1_agreement", "top5_agreement"):
        agreement = rerun.number(key, low=0, high=1)
        if agreement < 1 - tolerance - 1e-9:
            raise rerun.error(f"{agreement:g} is below what a re-run that held allows (tolerance {tolerance:g})", key)
    if differing > tolerance * samples + 1e-9:
        raise rerun.error(f"{differing} of {samples} samples differ, beyond its tolerance {tolerance:g}", "differing")


@dataclass(frozen=True)
class Verified:
    """A verification record beside an entry, checked; `stale` when it verified other bytes than the
    entry and predictions now there (the entry was rewritten since): then it says nothing of them."""

    record: dict
    stale: bool

    @property
    def kind(self) -> str | None:
        """ "re-run" or "re-scored" when the record applies to the entry as it is, else None."""
        return None if self.stale else self.record["kind"]


def read_verification(entry_file: Path, entry: dict) -> Verified | None:
    """The verification.json beside `entry_file` (whose checked entry is `entry`), or None when there
    is none; refused in one line when it is not a record `hsi leaderboard verify --record` writes."""
    path = Path(entry_file).parent / VERIFICATION_JSON
    if not path.exists() and not path.is_symlink():
        return None
    record = check_record(read_json(path, "verification record"), path)
    if record["entry"]["file"] != Path(entry_file).name:
        raise UntrustedInput(
            f"{printable(str(path))}: entry.file: it verified {printable(record['entry']['file'])}, not the "
            f"{printable(Path(entry_file).name)} beside it; verify the entry again with --record"
        )
    same = (
        record["entry"]["sha256"] == sha256_file(Path(entry_file))
        and record["predictions"] == {key: entry["predictions"][key] for key in ("file", "sha256")}
        and all(record["data"][key] == entry["data"][key] for key in ("config", "split", "fingerprint"))
    )
    return Verified(record, stale=not same)


def verification_words(verified: Verified | None) -> tuple[str, str]:
    """(a short mark, a sentence) of what a record says: "re-run", "re-scored" or "not verified"."""
    if verified is None:
        return "not verified", "no verification recorded (hsi leaderboard verify ENTRY --record writes one)"
    record = verified.record
    if verified.stale:
        return "not verified", (
            f"{VERIFICATION_JSON} verified an earlier version of this entry; verify it again with --record"
        )
    version = record["toolkit_version"]
    if record["kind"] == RERUN:
        rerun = record["rerun"]
        return RERUN, (
            f"re-run by hsi leaderboard verify --rerun (toolkit {version}, {rerun['device']}): the model spec with "
            f"its weights made the same predictions (top-1 agreement {rerun['top1_agreement']:.2%} of "
            f"{rerun['samples']} samples) and figures"
        )
    return RESCORED, (
        f"re-scored by hsi leaderboard verify (toolkit {version}): the figures follow from the predictions and "
        "the data; no model was run, so not that a model made them"
    )


__all__ = [
    "CHECKS",
    "RERUN",
    "RESCORED",
    "UNCHECKED",
    "VERIFICATION_JSON",
    "Verified",
    "build_record",
    "check_record",
    "read_verification",
    "record_text",
    "unchecked",
    "verification_words",
]
