"""The classifiers `hsi scgs` uses, fitting `builder.augment.classifier.ScgsClassifier` (logits over the
config's labels, pooled features, the Grad-CAM++ layer, provenance): from an `hsi train` checkpoint or
any model spec `load_model` takes; and a train-split predictions table of `hsi eval` in the config's labels."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import ConfigDict, Field

from builder.augment.generation import GenerationModels
from builder.augment.misclassified import PredictedRow, PredictionsMismatch
from builder.backends.code_trust import NO_TRUST, CodeTrust
from builder.backends.registry import make_backend
from builder.core.classes import class_of
from builder.core.untrusted import StrictModel, load_torch, parse_model
from evaluation.model_formats.labels import resolve_label_space
from evaluation.model_formats.models import LoadedModel, ModelError, ModelOptions, count_outputs, load_model, sha256_of
from evaluation.predicting.predict import resolve_device


class TimmScgsClassifier:
    """A loaded model on its device, its outputs mapped to the config's labels."""

    def __init__(
        self,
        loaded: LoadedModel,
        wnids: tuple[str, ...],
        device: str = "auto",
        cam_layer: str | None = None,
        check_only: bool = False,
    ):
        """`check_only`: a --check-model, which only classifies (any model spec; no features, no CAM)."""
        import torch

        from builder.backends.gradcam_pp import resolve_cam_layer

        module: Any = loaded.module
        if not check_only and not (hasattr(module, "forward_features") and hasattr(module, "forward_head")):
            raise ModelError(
                f"{loaded.spec} is not a timm model (no forward_features/forward_head): SCGS clusters pooled "
                "features; pass an `hsi train` checkpoint or a timm model spec"
            )
        self.loaded = loaded
        self.device = resolve_device(device)
        self.module = module.to(self.device).eval()
        pre = loaded.preprocessing
        self.input_size = pre.input_size
        self.mean = torch.tensor(pre.mean, device=self.device).view(1, 3, 1, 1) * 255
        self.std = torch.tensor(pre.std, device=self.device).view(1, 3, 1, 1) * 255
        space = resolve_label_space(count_outputs(module.cpu(), pre, loaded.spec), loaded.classes, wnids, "subset")
        self.module.to(self.device)
        column = {int(index): int(out) for out, index in zip(space.outputs, space.class_index)}
        missing = [w for w in wnids if class_of(w).index not in column]
        if missing:
            raise ModelError(f"{loaded.spec} has no output for the config's classes {missing}")
        self.columns = [column[class_of(w).index] for w in wnids]
        self.columns_tensor = torch.as_tensor(self.columns, device=self.device)
        self.cam_layer = "" if check_only else resolve_cam_layer(self.module, cam_layer)[0]

    def preprocess(self, images: np.ndarray):
        import torch
        import torch.nn.functional as F

        x = torch.from_numpy(np.ascontiguousarray(images)).to(self.device).permute(0, 3, 1, 2).float()
        if tuple(x.shape[2:]) != tuple(self.input_size):
            x = F.interpolate(x, size=tuple(self.input_size), mode="bilinear", antialias=True, align_corners=False)
        return (x - self.mean) / self.std

    def logits(self, batch):
        out = self.module(batch)
        return (out[0] if isinstance(out, (tuple, list)) else out).index_select(1, self.columns_tensor)

    def features(self, batch):
        return self.module.forward_head(self.module.forward_features(batch), pre_logits=True)

    def output_index(self, label: int) -> int:
        return self.columns[label]

    def provenance(self) -> dict:
        return {
            **self.loaded.describe(),
            "preprocessing": self.loaded.preprocessing.to_json(),
            "cam_layer": self.cam_layer,
        }


class TrainedArchitecture(StrictModel):
    """What `hsi scgs` reads of an `hsi train` checkpoint's settings (the rest is TrainSettings')."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    input_size: int | None = Field(default=None, ge=1, le=4096)


class TrainCheckpoint(StrictModel):
    """What `hsi scgs` reads of an `hsi train` checkpoint (`best.pt`, `last.pt`): its architecture and labels."""

    model_config = ConfigDict(extra="ignore")
    settings: TrainedArchitecture
    wnids: list[Annotated[str, Field(pattern=r"^n\d{8}$")]] | None = None


def _train_checkpoint(path: Path) -> TrainCheckpoint | None:
    """The checked settings and wnids of an `hsi train` checkpoint (never unpickled); None for plain weights."""
    payload = load_torch(path, "checkpoint", hint="pass an hsi train run's best.pt")
    if not isinstance(payload, dict) or "settings" not in payload:
        return None
    return parse_model(TrainCheckpoint, payload, path)


def load_scgs_classifier(
    model: str | None,
    checkpoint: Path | None,
    wnids: tuple[str, ...],
    canvas: int,
    device: str = "auto",
    cam_layer: str | None = None,
    flag: str = "--model",
    check_only: bool = False,
    trust: CodeTrust = NO_TRUST,
) -> TimmScgsClassifier:
    """An `hsi train` checkpoint (the architecture from its settings unless `model` names one; the
    input size the run trained at) or a model spec through `load_model`."""
    if checkpoint is not None:
        path = Path(checkpoint)
        if not path.is_file():
            raise ModelError(f"--checkpoint {path}: no such file (pass an `hsi train` run's best.pt)")
        payload = _train_checkpoint(path)
        settings = payload.settings if payload else TrainedArchitecture()
        arch = model or settings.model
        if not arch:
            raise ModelError(f"--checkpoint {path.name} does not say its architecture: pass it with {flag} NAME")
        declared = tuple(payload.wnids) if payload and payload.wnids is not None else None
        options = ModelOptions(arch=arch, num_classes=len(declared) if declared else None, classes=declared)
        loaded = load_model(str(path.resolve()), options)
        side = settings.input_size or canvas  # hsi train trains on the canvas, uncropped
        loaded.preprocessing = replace(
            loaded.preprocessing, input_size=(side, side), source=f"{loaded.preprocessing.source}, input {side} px"
        )
    elif model:
        loaded = load_model(model, ModelOptions(trust=trust))
    else:
        raise ModelError(f"pass the ERM model: --checkpoint RUN/best.pt (from hsi train) or {flag} SPEC")
    return TimmScgsClassifier(loaded, wnids, device, cam_layer, check_only)


@dataclass(frozen=True)
class ScgsModelLoader:
    """The models of an `hsi scgs` run, from the flags that name them: loaded by the command to plan
    the run, and once more by each worker process or Ray actor that builds shards on a device of its
    own (it pickles: names and paths only). Local files are held by absolute path, so a worker with
    another working directory finds them; the recorded provenance keeps their names only."""

    model: str | None
    checkpoint: str | None
    wnids: tuple[str, ...]
    canvas: int
    cam_layer: str | None
    check_model: str | None
    generator: Any  # builder.backends.sd_inpaint.SdInpaintConfig
    trust: CodeTrust = NO_TRUST  # the TorchScript files (--trust-file, --trust-code) trusted to run code

    @classmethod
    def of(
        cls, model, checkpoint, wnids, canvas, cam_layer, check_model, generator, trust: CodeTrust = NO_TRUST
    ) -> ScgsModelLoader:
        local = Path(generator.model_id).expanduser()
        if local.is_dir():
            generator = replace(generator, model_id=str(local.resolve()))
        if checkpoint is not None and Path(checkpoint).is_file():
            checkpoint = Path(checkpoint).resolve()
        path = None if checkpoint is None else str(checkpoint)
        return cls(model, path, tuple(wnids), canvas, cam_layer, check_model, generator, trust)

    def __call__(self, device: str) -> GenerationModels:
        checkpoint = Path(self.checkpoint) if self.checkpoint is not None else None
        classifier = load_scgs_classifier(
            self.model, checkpoint, self.wnids, self.canvas, device, self.cam_layer, trust=self.trust
        )
        check = None
        if self.check_model:
            check = load_scgs_classifier(
                self.check_model, None, self.wnids, self.canvas, device, None, "--check-model", True, self.trust
            )
        inpainter = make_backend("generator", "sd-inpaint", replace(self.generator, device=device))
        return GenerationModels(classifier, inpainter, check)


PREDICTION_COLUMNS = ("key", "status", "label_class", "pred_class")


def read_train_predictions(
    path: Path,
    wnids: tuple[str, ...],
    classifier: TimmScgsClassifier | None = None,
    source_fingerprint: str | None = None,
):
    """(rows in the config's labels, provenance) of an `hsi eval` predictions.parquet; refused when
    it was made with another model than `classifier`, on another split or on another build of the
    config (`source_fingerprint`, the source manifest's), or lacks the columns M is read from."""
    from builder.core.untrusted import UntrustedInput
    from evaluation.predicting.predictions import read_prediction_rows

    path = Path(path)
    if not path.is_file():
        raise PredictionsMismatch(f"--predictions {path}: no such file (pass the predictions.parquet of hsi eval)")
    try:  # the columns M is read from, each of its type, class indices 0-999, no key twice
        table, metadata = read_prediction_rows(path, PREDICTION_COLUMNS)
    except UntrustedInput as exc:
        raise PredictionsMismatch(f"--predictions {exc}") from None
    data = metadata.get("data") if isinstance(metadata.get("data"), dict) else {}
    if data.get("split") not in (None, "train"):
        raise PredictionsMismatch(
            f"--predictions {path.name} are of the {data['split']} split: SCGS needs the train split's "
            "(`hsi eval CONFIG --split train`)"
        )
    if source_fingerprint and data.get("fingerprint") and data["fingerprint"] != source_fingerprint:
        raise PredictionsMismatch(
            f"--predictions {path.name} were made on another build of {data.get('config') or 'the config'} "
            f"(fingerprint {str(data['fingerprint'])[:12]}..., the source's is {source_fingerprint[:12]}...): "
            "run `hsi eval` on this source folder and pass its predictions.parquet"
        )
    model = metadata.get("model") if isinstance(metadata.get("model"), dict) else {}
    theirs = model.get("checkpoint_sha256")
    ours = classifier.loaded.checkpoint_sha256 if classifier is not None else None
    if theirs and ours and theirs != ours:
        raise PredictionsMismatch(
            f"--predictions {path.name} were made with weights {theirs[:12]}..., the classifier's are {ours[:12]}...: "
            "pass the predictions of the same model (or leave --predictions out to predict here)"
        )
    label_of = {class_of(w).index: label for label, w in enumerate(wnids)}
    rows = []
    for record in table[table["status"] == "ok"].to_dict("records"):
        values = [record["key"], record["label_class"], record["pred_class"]]
        if any(value is None or (isinstance(value, float) and value != value) for value in values):
            raise PredictionsMismatch(
                f"--predictions {path.name}: an ok row ({record['key']}) has no key, label_class or pred_class; "
                "pass the predictions.parquet that `hsi eval --split train` wrote, unedited"
            )
        predicted = label_of.get(int(record["pred_class"]))
        true = label_of.get(int(record["label_class"]))
        if true is None or predicted is None:
            raise PredictionsMismatch(
                f"--predictions {path.name}: sample {record['key']} has a label or prediction outside the config's "
                "classes; make the predictions with `hsi eval ... --label-space subset`"
            )
        rows.append(PredictedRow(str(record["key"]), true, predicted))
    return rows, {"file": path.name, "sha256": sha256_of(path), "model": metadata.get("model")}
