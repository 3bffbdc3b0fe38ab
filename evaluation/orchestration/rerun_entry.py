"""`hsi leaderboard verify --rerun`: run an entry's model again and compare, sample by sample.

Re-scoring shows that an entry's figures follow from its predictions; it cannot show that a model
made them. Where the entry's model spec and weights are at hand, this does: the spec is loaded
through model_formats with the weights file the entry names (beside it, or `--weights`), whose
sha256 must be the entry's, and with the preprocessing the entry records; it is run on the same
data (config, split, `--limit`) with the batch size, mixed precision and memory format its
predictions' metadata records; its predictions are compared with the submitted ones key by key
(top-1: the same class; top-5: the same set of classes), and its headline figures, scored with
the entry's bootstrap settings, with the entry's.

Tolerance: by default none. On the same device and toolkit version an evaluation is deterministic
(the same decoded pixels, the same forward pass, the same bootstrap seed), so any difference is a
real one, and a looser default would hide it: one changed prediction in a group of 48 moves its
top-1 by 0.02. So every sample must agree and every figure must equal the entry's to the 6-decimal
rounding it is written with. Another device (CUDA against CPU, mixed precision) may flip a near
tie: `tolerance` T accepts a re-run in which at most a share T of the samples differ (in top-1 or
top-5) and every figure is within T of the entry's.

Refused in one line before anything runs, saying why: predictions made outside the toolkit (no
model), an in-memory model (no spec to load), a spec no loader takes, a preprocessing that was not
applied, a spec or weights file naming a path (a re-run reads weights only beside the entry or from
`--weights`, never where an entry points), a weights file that is missing, a link, or not the
entry's (sha256), an entry with a weights file but no sha256 to prove it by.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from builder.backends.code_trust import CodeTrust
from builder.core.classes import is_known_wnid
from builder.core.errors import HsiError, UsageError, printable
from builder.core.names import check_path_component
from builder.core.untrusted import regular_file
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.analysis.metrics import compute_metrics
from evaluation.model_formats.models import (
    APPLIED,
    MODEL_FILE_KINDS,
    LoadedModel,
    ModelOptions,
    load_model,
    recorded_spec_parts,
    sha256_of,
)
from evaluation.predicting.given import GIVEN_SPEC_PREFIX
from evaluation.predicting.predictions import PREDICTIONS_NAME, read_predictions, write_predictions
from evaluation.ranking.entries import REPORTED_ONLY, headline_figures
from evaluation.ranking.eval_reader import Submission

from .pipeline import RunSettings, predictions_for
from .verify_entry import ROUNDING, Mismatch, Verification, compare

SHOWN_KEYS = 5  # disagreeing samples named; the rest are counted
MAX_BATCH = 4096  # a recorded batch size above this is not taken from a stranger's metadata
PREPROCESSING_OPTIONS = ("mean", "std", "input_size", "interpolation", "crop_pct")


class RerunRefused(UsageError):
    """An entry --rerun cannot run again; the message says why and what would let it."""


@dataclass
class RerunPlan:
    """The entry's model, loaded, and how it is run again."""

    loaded: LoadedModel
    settings: RunSettings
    weights: str  # which weights, in words
    weights_sha256: str | None  # the file's, proved equal to the entry's; None for published weights by name
    published: bool  # weights loaded by name, with no sha256 to compare


@dataclass
class Agreement:
    """The submitted predictions against the re-run's, sample by sample."""

    samples: int  # samples with a prediction on either side
    top1_same: int
    top5_same: int
    differing: list[str] = field(default_factory=list)  # keys whose top-1 or top-5 differ, sorted

    @property
    def top1(self) -> float:
        return self.top1_same / self.samples if self.samples else 1.0

    @property
    def top5(self) -> float:
        return self.top5_same / self.samples if self.samples else 1.0


@dataclass
class Rerun:
    """What a re-run found: the agreement, its figures and the figures beyond the tolerance."""

    plan: RerunPlan
    agreement: Agreement
    figures: dict
    mismatches: list[Mismatch]
    tolerance: float
    device: str
    submitted_device: str | None

    @property
    def ok(self) -> bool:
        allowed = self.tolerance * self.agreement.samples
        return not self.mismatches and len(self.agreement.differing) <= allowed + 1e-9

    def summary(self) -> dict:
        """The re-run as verification.json records it."""
        return {
            "spec": self.plan.loaded.spec,
            "device": self.device,
            "weights_sha256": self.plan.weights_sha256,
            "samples": self.agreement.samples,
            "top1_agreement": round(self.agreement.top1, 6),
            "top5_agreement": round(self.agreement.top5, 6),
            "differing": len(self.agreement.differing),
            "tolerance": self.tolerance,
        }


def _refuse(entry_file: Path, why: str) -> RerunRefused:
    return RerunRefused(f"{printable(str(entry_file))}: --rerun refused: {why}")


def _weights_file(submitted: Submission, name: str, given: Path | None, sha256: str | None) -> tuple[Path, str]:
    """The weights file the entry names (beside it, or `given`), proved by the entry's sha256."""
    entry_file = submitted.entry_file
    try:
        check_path_component(name, "weights file")
    except HsiError:  # builder.core.names' refusal
        raise _refuse(
            entry_file,
            f"its spec names the path {printable(repr(name))}; a re-run reads weights only from a file beside the "
            "entry or from --weights",
        ) from None
    if sha256 is None:
        raise _refuse(entry_file, f"the entry records no sha256 of {name}, so no file can be shown to be its weights")
    path = Path(given) if given is not None else entry_file.parent / name
    if given is None and not (path.exists() or path.is_symlink()):
        raise _refuse(entry_file, f"its weights file {name} is not beside the entry: pass --weights FILE")
    regular_file(path, "weights file")  # a link or a folder: one line
    digest = sha256_of(path)
    if digest != sha256:
        raise _refuse(
            entry_file, f"{printable(path.name)} has sha256 {digest}, the entry's weights {sha256}: not its weights"
        )
    return path, digest


def _declared_classes(submitted: Submission, metadata: dict) -> tuple[str, ...] | None:
    classes = (metadata.get("model") or {}).get("declared_classes")
    if classes is None:
        return None
    if (
        not isinstance(classes, list)
        or not classes
        or not all(isinstance(w, str) and is_known_wnid(w) for w in classes)
    ):
        raise _refuse(submitted.entry_file, "its predictions' declared_classes is not a list of ImageNet wnids")
    return tuple(classes)


def _run_settings(entry: dict, metadata: dict, device: str, progress: bool) -> RunSettings:
    """The data the entry names and how its run ran (batch size, mixed precision, memory format, as
    its predictions record them; the defaults where they record nothing usable)."""
    run = metadata.get("run") if isinstance(metadata.get("run"), dict) else {}
    batch = run.get("batch_size")
    data = entry["data"]
    return RunSettings(
        config=data["config"],
        split=data["split"],
        limit=data["limit"],
        label_space="subset" if entry["label_space"]["name"] == "subset" else "imagenet",
        device=device,
        batch_size=batch if isinstance(batch, int) and not isinstance(batch, bool) and 1 <= batch <= MAX_BATCH else 64,
        amp=run.get("amp") if run.get("amp") in (True, "bf16") else False,
        channels_last=run.get("channels_last") is True,
        progress=progress,
    )


def plan_rerun(
    submitted: Submission,
    metadata: dict,
    weights: Path | None = None,
    trust: CodeTrust | None = None,
    device: str = "auto",
    progress: bool = True,
) -> RerunPlan:
    """The entry's model loaded as it was run, or RerunRefused in one line saying why it cannot be
    (`metadata`: its predictions' run metadata; `weights`: its weights file, when not beside it)."""
    entry, where = submitted.entry, submitted.entry_file
    spec = entry["model"]["spec"]
    if spec.startswith(GIVEN_SPEC_PREFIX):
        raise _refuse(where, f"its predictions were made outside the toolkit ({printable(spec)}): there is no model")
    if entry["model"]["identity"] is not None:
        raise _refuse(
            where, f"{printable(spec)} was an in-memory model, with no spec to load: export it as an ep: or onnx: file"
        )
    parts = recorded_spec_parts(spec)
    if parts is None:
        raise _refuse(
            where, f"its spec {printable(spec)} is not one a loader takes (timm:, tv:, ts:, ep:, onnx:, FILE)"
        )
    kind, target, arch = parts
    pre = entry["preprocessing"]
    if pre["status"] != APPLIED:
        raise _refuse(where, f"its preprocessing is {pre['status']}, and a re-run applies the one its run applied")
    recorded = entry["model"]["weights"]
    published = kind in ("timm", "tv") and recorded["sha256"] is None
    path = digest = None
    if weights is not None and published:
        raise _refuse(where, f"{printable(spec)} names published weights and no file: drop --weights")
    if not published:
        name = target if kind in (*MODEL_FILE_KINDS, "state-dict") else recorded["file"] or ""
        path, digest = _weights_file(submitted, name, weights, recorded["sha256"])
    options = ModelOptions(
        checkpoint=path if kind in ("timm", "tv") else None,
        arch=arch,
        classes=_declared_classes(submitted, metadata),
        mean=tuple(pre["mean"]),
        std=tuple(pre["std"]),
        input_size=tuple(pre["input_size"]),
        interpolation=pre["interpolation"],
        crop_pct=pre["crop_pct"],
        trust=trust or CodeTrust(),
    )
    if kind in ("timm", "tv", "state-dict"):  # a checkpoint that is not 1000-way: its outputs' count
        if options.classes:
            options = replace(options, num_classes=len(options.classes))
        elif entry["label_space"]["name"] == "config":
            options = replace(options, num_classes=entry["label_space"]["classes"])
    load = f"{kind}:{path}" if kind in MODEL_FILE_KINDS else str(path) if kind == "state-dict" else f"{kind}:{target}"
    loaded = load_model(load, options)  # the loader's own one line: an untrusted ts:, weights not offline
    applied = loaded.preprocessing.to_json()
    differs = [key for key in PREPROCESSING_OPTIONS if applied[key] != pre[key]]
    if differs:
        raise _refuse(
            where, f"{printable(spec)} loads with another {differs[0]} ({applied[differs[0]]}) than the entry records"
        )
    words = f"{printable(spec)}'s published weights, loaded by name" if published else f"{path.name} (sha256 {digest})"
    return RerunPlan(loaded, _run_settings(entry, metadata, device, progress), words, digest, published)


def compare_predictions(submitted, rerun) -> Agreement:
    """Two predictions tables key by key: top-1 agrees when both predict the same class, top-5 when
    both list the same classes; a sample predicted on one side only (an error row on the other)
    agrees in neither. Rows of samples that neither side could read are not compared."""

    def by_key(frame) -> dict:
        return {
            row["key"]: (row["status"], row["pred_class"], row["top5_class"])
            for row in frame.to_dict("records")
            if row["key"] is not None
        }

    left, right = by_key(submitted), by_key(rerun)
    keys = sorted(k for k in set(left) | set(right) if "ok" in ((left.get(k) or ("",))[0], (right.get(k) or ("",))[0]))
    top1 = top5 = 0
    differing = []
    for key in keys:
        one, other = left.get(key), right.get(key)
        both = one is not None and other is not None and one[0] == other[0] == "ok"
        same1 = both and int(one[1]) == int(other[1])  # type: ignore[index]
        same5 = both and {int(c) for c in one[2]} == {int(c) for c in other[2]}  # type: ignore[index]
        top1 += same1
        top5 += same5
        if not (same1 and same5):
            differing.append(key)
    return Agreement(len(keys), top1, top5, differing)


def rerun_entry(
    plan: RerunPlan, verification: Verification, tolerance: float = 0.0, announce: Callable[[str], None] = print
) -> Rerun:
    """Run the plan's model on the data `verification` proved, and compare its predictions and
    figures with the entry's (within `tolerance`, see the module's docstring)."""
    entry, dataset = verification.entry, verification.dataset
    run = predictions_for(plan.loaded, dataset.source, plan.settings, announce=announce)
    with tempfile.TemporaryDirectory(prefix="hsi-rerun-") as tmp:  # read back as every analysis reads them
        path = write_predictions(Path(tmp) / PREDICTIONS_NAME, run.rows, run.errors, run.metadata)
        frame, metadata = read_predictions(path)
    boot = entry["bootstrap"]
    settings = BootstrapSettings(resamples=boot["resamples"], seed=boot["seed"], level=boot["level"])
    figures = headline_figures(
        compute_metrics(frame, label_space_size=metadata["label_space"]["classes"], settings=settings)
    )
    mismatches: list[Mismatch] = []
    compare(
        entry["figures"], figures, "figures", mismatches, REPORTED_ONLY, max(tolerance, ROUNDING), found_by="re-run"
    )
    submitted_run = (verification.metadata or {}).get("run")
    submitted_device = submitted_run.get("device") if isinstance(submitted_run, dict) else None
    return Rerun(
        plan,
        compare_predictions(verification.frame, frame),
        figures,
        mismatches,
        tolerance,
        run.metadata["run"]["device"],
        submitted_device if isinstance(submitted_device, str) else None,
    )


__all__ = ["Agreement", "Rerun", "RerunPlan", "RerunRefused", "compare_predictions", "plan_rerun", "rerun_entry"]
