"""A model in the caller's process, evaluated as `hsi eval` evaluates a spec (`hsi.evaluate`).

The model is a `torch.nn.Module`, a callable from a uint8 NHWC numpy batch to logits or
probabilities (any framework), or a spec string as on the command line. Each becomes a
`LoadedModel`, so the shards are proved, decoded, resized and classified by the one prediction
path (`predict.run_predictions`) and analysed by the one `analyse`: the same rows, metrics,
intervals and reports as `hsi eval`.

A callable is wrapped in a parameter-free module: the `Classifier` normalises with mean 0 and
std 1/255, which leaves the canvas's own pixel values, and the wrapper hands them back as uint8.

A zero-shot classifier (`hsi.zero_shot_classifier`) is a module that knows its classes and prompt
sets, and, built on an open_clip model, its preprocessing. A callable that answers in words
(`outputs="text"`, a vision-language model asked `VLM_PROMPT`) has its answers mapped to classes
(`predicting.text_answers`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from builder.backends.code_trust import CodeTrust
from builder.core.errors import UsageError
from evaluation.analysis.bootstrap import BootstrapSettings
from evaluation.model_formats.identity import SHA256, callable_identity, module_identity
from evaluation.model_formats.models import (
    LoadedModel,
    ModelOptions,
    Preprocessing,
    apply_overrides,
    is_zero_shot_spec,
    load_model,
    parse_floats,
    timm_preprocessing,
)
from evaluation.predicting.predict import plan_run, verify_plan
from evaluation.predicting.predictions import PREDICTIONS_NAME, write_predictions
from evaluation.zero_shot.classifier import is_zero_shot_module
from evaluation.zero_shot.templates import template_sets_from

from .answering import evaluate_answers
from .eval_folder import PlainFolder
from .model_setup import options_for_run
from .pipeline import RunSettings, analyse, composites_of_rows, model_only_passes, predictions_for, requested_passes
from .result import Evaluation

OUTPUTS = ("logits", "probabilities", "text")
RAW_PIXELS = {"mean": (0.0, 0.0, 0.0), "std": (1 / 255,) * 3}  # the Classifier then leaves pixels as they are


class NumpyModel(torch.nn.Module):
    """`fn` (uint8 B x H x W x 3 numpy -> B x K numpy) as the module a `Classifier` runs; probabilities
    become log-probabilities, so the Classifier's softmax gives them back unchanged."""

    def __init__(self, fn: Callable, outputs: str = "logits"):
        super().__init__()
        self.fn, self.outputs = fn, outputs

    def forward(self, x):
        pixels = x.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        out = np.asarray(self.fn(pixels), dtype=np.float32)
        if out.ndim != 2 or out.shape[0] != len(pixels):
            raise UsageError(
                f"the callable returned shape {out.shape} for a batch of {len(pixels)}: it must return (batch, classes)"
            )
        if self.outputs == "probabilities":
            with np.errstate(divide="ignore"):
                out = np.log(out)
        return torch.from_numpy(out).to(x.device)


def _triple(value, name: str, positive: bool = False) -> tuple[float, float, float] | None:
    if value is None:
        return None
    values = [value] if isinstance(value, (int, float)) else list(value)
    return parse_floats(",".join(str(float(v)) for v in values), 3, name, positive)


def _size(value) -> tuple[int, int] | None:
    if value is None:
        return None
    size = (value, value) if isinstance(value, int) else tuple(value)
    if len(size) != 2 or not all(isinstance(v, int) and v > 0 for v in size):
        raise UsageError(f"input_size is a side or (height, width) in pixels, got {value!r}")
    return size


def _declared_sha256(value: str | None) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not SHA256.fullmatch(value.lower()):
        raise UsageError(f"weights_sha256 is the 64 hex digits of a sha256, got {str(value)[:80]!r}")
    return value.lower()


def as_loaded(
    model, options: ModelOptions, outputs: str = "logits", name: str | None = None, weights_sha256: str | None = None
) -> LoadedModel:
    """A module, a numpy callable or a spec string as the `LoadedModel` the prediction path runs; an
    in-memory one with its identity (a module's fingerprint, a callable's declared weights sha256)."""
    if outputs not in OUTPUTS:
        raise UsageError(f"outputs must be one of {', '.join(OUTPUTS)}, got {outputs!r}")
    declared = _declared_sha256(weights_sha256)
    if declared is not None and (isinstance(model, (str, Path, torch.nn.Module)) or not callable(model)):
        raise UsageError(
            "weights_sha256 declares a numpy callable's weights; a module's are fingerprinted and a spec's file is "
            "hashed: drop it"
        )
    if isinstance(model, (str, Path)):
        return load_model(str(model), options)
    if isinstance(model, torch.nn.Module) and is_zero_shot_module(model):
        loaded = zero_shot_loaded(model, options, name)
        loaded.identity = module_identity(model)  # its image and text towers' weights, as any module's
        return loaded
    if isinstance(model, torch.nn.Module):
        try:
            model.eval()
        except NotImplementedError:  # torch.export's .module(): its mode was fixed when it was exported
            from evaluation.model_formats.pt2_files import training_operators

            if training_operators(model.graph):
                raise UsageError(
                    f"the exported module runs {', '.join(training_operators(model.graph))} in training mode: "
                    "call model.eval() before torch.export.export"
                ) from None
        if getattr(model, "pretrained_cfg", None):
            pre = apply_overrides(timm_preprocessing(model), options)
        elif options.mean is None or options.std is None:
            raise UsageError(
                f"{type(model).__name__} has no timm pretrained_cfg: pass its normalisation, "
                "mean=(r, g, b) and std=(r, g, b) in [0, 1] units (input_size 224 and bicubic unless given)"
            )
        else:
            pre = replace(apply_overrides(Preprocessing(), options), source="given to hsi.evaluate")
        loaded = LoadedModel(name or f"module:{type(model).__name__}", model, pre, options.classes)
        loaded.identity = module_identity(model)
        return loaded
    if callable(model):
        given = [key for key in ("mean", "std") if getattr(options, key) is not None]
        if given:
            raise UsageError(f"a numpy callable gets uint8 pixels and normalises them itself: drop {', '.join(given)}")
        pre = apply_overrides(Preprocessing(**RAW_PIXELS), options)
        pre = replace(pre, source="uint8 NHWC canvas to a numpy callable, which normalises it itself")
        label = name or f"callable:{getattr(model, '__name__', type(model).__name__)}"
        loaded = LoadedModel(label, NumpyModel(model, outputs), pre, options.classes)
        loaded.identity = callable_identity(model, declared)
        return loaded
    raise UsageError(
        f"hsi.evaluate takes a torch.nn.Module, a numpy callable or a model spec, not a {type(model).__name__}"
    )


def zero_shot_loaded(module, options: ModelOptions, name: str | None = None) -> LoadedModel:
    """A zero-shot classifier module as a LoadedModel: its classes (unless `classes` names others)
    and prompt sets, and its preprocessing: `mean`/`std` when given, else the open_clip model's own."""
    from evaluation.zero_shot.clip_models import module_preprocessing
    from evaluation.zero_shot.record import prompt_record
    from evaluation.zero_shot.specs import ALL_CLASSES, clip_notes

    module.eval()
    own = module_preprocessing(module.encoders.model)
    if options.mean is not None and options.std is not None:
        pre = replace(apply_overrides(Preprocessing(), options), source="given to hsi.evaluate")
    elif own is not None:
        pre = apply_overrides(Preprocessing(**own.preprocessing_fields()), options)
    else:
        raise UsageError(
            f"the zero-shot classifier's {type(module.encoders.model).__name__} carries no preprocessing (a "
            "transformers CLIPModel keeps it in its image processor): pass mean=processor.image_mean, "
            "std=processor.image_std and input_size=processor.crop_size['height']"
        )
    classes = len(module.label_space)
    record = prompt_record(module, ALL_CLASSES if classes == 1000 else f"the {classes} classes given to the classifier")
    declared = None if record["label_space"]["all_imagenet"] else module.wnids
    label = name or f"zero-shot:{type(module.encoders.model).__name__}"
    notes = clip_notes(record, own if pre.crop_pct is not None else None)
    return LoadedModel(label, module, pre, options.classes or declared, notes=notes, zero_shot=record)


def evaluate(
    model,
    data,
    *,
    config: str | None = None,
    split: str | None = None,
    mean: Sequence[float] | float | None = None,
    std: Sequence[float] | float | None = None,
    input_size: int | Sequence[int] | None = None,
    interpolation: str | None = None,
    crop_pct: float | None = None,
    classes: Sequence[str] | None = None,
    trust_files: Sequence[str] = (),
    trust_code: bool = False,
    outputs: str = "logits",
    name: str | None = None,
    weights_sha256: str | None = None,
    batch_size: int = 64,
    workers: int = 2,
    device: str | None = None,
    amp: bool = False,
    limit: int | None = None,
    label_space: str = "imagenet",
    clean: str | Path | None = None,
    clean_split: str = "val",
    parts: str | Path | None = None,
    progress: bool = True,
    bootstrap: BootstrapSettings | None = None,
    templates: str | Sequence[str] | None = None,
    announce: Callable[[str], None] = print,
) -> Evaluation:
    """Evaluate `model` on `data` (a release folder, a composed folder or hf://) as `hsi eval` does.

    `model`: a `torch.nn.Module` (preprocessing from its timm `pretrained_cfg`, else `mean` and
    `std` are required: no normalisation is guessed; it is put in eval mode), a callable from a
    uint8 NHWC numpy batch to `outputs` ("logits" or "probabilities"; run on the CPU unless
    `device` says otherwise), or a spec string (`timm:NAME`, `ep:FILE`, ...). The canvas is resized
    to `input_size` (224 unless the model says otherwise) with `interpolation`, as `hsi eval` does.

    `clean` (an ImageNet root, its `clean_split`) adds the clean-photo pass and `parts` (an
    extract's parts folder) the bare-background pass, as `hsi eval --clean` and `--parts` do.

    Zero-shot CLIP: a module from `hsi.zero_shot_classifier` (its prompt sets and classes are its
    own), or a spec `openclip:ARCH[:TAG|FILE]` / `hf-clip:ID|DIR` with `templates` (as `hsi eval
    --templates`: "openai,simple,no-scale", the default, or a YAML file's sets). A callable with
    `outputs="text"` answers in words (a vision-language model asked `VLM_PROMPT`): it gets uint8
    NHWC batches of the canvas as it is and returns one string per image.

    A `ts:FILE` spec is code: it loads only when its sha256 is in `trust_files` or with `trust_code`
    (its code then runs with your permissions), as `hsi eval --trust-file` / `--trust-code`.

    Who the model is goes into the report: a spec's weights file and its sha256; a module's class and
    the fingerprint of its state_dict (evaluation.model_formats.identity); a callable's name and, when
    you give it, `weights_sha256` (the sha256 of its weights file, recorded as declared, not checked;
    without it its weights are recorded as not known). An in-memory model is never said to carry
    published weights.
    """
    from evaluation.predicting.data import default_split

    if outputs == "text":
        model_flags = {
            "mean": mean,
            "std": std,
            "input_size": input_size,
            "interpolation": interpolation,
            "crop_pct": crop_pct,
            "classes": classes,
            "clean": clean,
            "parts": parts,
            "templates": templates,
            "device": device,
            "amp": amp or None,
            "trust_code": trust_code or None,
            "trust_files": trust_files or None,
            "label_space": None if label_space == "imagenet" else label_space,
        }
        refused = [key for key, value in model_flags.items() if value is not None]
        if refused:
            raise UsageError(
                "outputs='text' sends the canvas as it is to a callable that answers in words: drop "
                + ", ".join(refused)
            )
        return evaluate_answers(
            model,
            data,
            config,
            split or default_split(data, config),
            name,
            batch_size,
            workers,
            limit,
            progress,
            bootstrap or BootstrapSettings(),
            announce,
        )
    sets = None
    if templates is not None:
        if not isinstance(model, (str, Path)):
            raise UsageError(
                "templates= sets the prompt sets of a zero-shot spec (openclip:, hf-clip:); a module's prompt sets are "
                "its own (hsi.zero_shot_classifier(model, tokenizer, templates=...))"
            )
        sets = tuple(template_sets_from(templates).items())
    options = ModelOptions(
        classes=tuple(classes) if classes else None,
        mean=_triple(mean, "mean"),
        std=_triple(std, "std", positive=True),
        input_size=_size(input_size),
        interpolation=interpolation,
        crop_pct=crop_pct,
        trust=CodeTrust.of([trust_files] if isinstance(trust_files, str) else trust_files, trust_code, "trust_files"),
        template_sets=sets,
    )
    if isinstance(model, (str, Path)):
        if sets is not None and not is_zero_shot_spec(str(model)):
            raise UsageError(f"templates= is for zero-shot specs (openclip:, hf-clip:), not {model}")
        if is_zero_shot_spec(str(model)):  # its text classifiers cover the data's classes
            split = split or default_split(data, config)
            options = options_for_run(str(model), options, data, config, split, device or "auto")
    loaded = as_loaded(model, options, outputs, name, weights_sha256)
    if device is None:
        device = "cpu" if isinstance(loaded.module, NumpyModel) else "auto"
    settings = RunSettings(
        config=config,
        split=split or default_split(data, config),
        batch_size=batch_size,
        workers=workers,
        device=device,
        amp=amp,
        limit=limit,
        label_space=label_space,
        progress=progress,
        bootstrap=bootstrap or BootstrapSettings(),
        clean_root=Path(clean) if clean is not None else None,
        clean_split=clean_split,
        parts_dir=Path(parts) if parts is not None else None,
    )
    plan = plan_run(loaded, data, config, settings.split, batch_size=batch_size, limit=limit, label_space=label_space)
    verify_plan(plan, settings.split, limit, announce)
    run = predictions_for(loaded, data, settings, plan=plan, announce=announce)
    with tempfile.TemporaryDirectory(prefix="hsi-evaluate-") as tmp:
        passes = requested_passes(settings)
        extras = model_only_passes(
            composites_of_rows(run.rows), run.classifier, loaded, settings, PlainFolder(Path(tmp)), announce, passes
        )
        files = {section["file"]: (Path(tmp) / section["file"]).read_bytes() for section in extras.values()}
        path = write_predictions(Path(tmp) / PREDICTIONS_NAME, run.rows, run.errors, run.metadata)
        report = analyse(path, Path(tmp), settings.bootstrap, extras)
    return Evaluation(report, run.rows, run.errors, run.metadata, settings.bootstrap, extras, files)


__all__ = ["NumpyModel", "as_loaded", "evaluate"]
