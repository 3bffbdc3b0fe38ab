"""Classifiers: a model spec -> a `torch.nn.Module` in eval mode, its preprocessing and the
ImageNet classes its outputs stand for.

Specs:
    timm:NAME or NAME   timm.create_model(NAME, pretrained=True); with --checkpoint FILE the weights
                        come from the file through timm's own pretrained_cfg_overlay=dict(file=...)
    tv:NAME             a torchvision model with its published DEFAULT weights enum (or --checkpoint)
    ts:FILE             a TorchScript classifier (preprocessing from --mean/--std/--input-size/...). A
                        TorchScript file is code: it is loaded only when its sha256 is trusted
                        (--trust-file SHA256) or with --trust-code (builder.backends.code_trust)
    ep:FILE             a torch.export program saved with torch.export.save (.pt2), checked to hold no
                        pickle and no code before it is loaded (evaluation.model_formats.pt2_files); same preprocessing
    onnx:FILE           an ONNX model run by onnxruntime, CPU or CUDA provider, external data refused
                        (evaluation.model_formats.onnx_files); same preprocessing
    FILE                a state_dict (or a checkpoint dict holding one) for the architecture --arch
    openclip:ARCH[:TAG|FILE], hf-clip:ID|DIR
                        zero-shot CLIP (evaluation.zero_shot.specs): logits over the data's label
                        space (or --classes) for each prompt set of --templates, with the model's
                        own preprocessing

Each spec kind is a `classifier` entry of the one backend registry (`builder.backends.registry`),
registered below. Weights are never substituted: a requested pretrained model that cannot be loaded is an error that
names the flag to pass, the variable that points at the cache and where the weights are published.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from builder.backends import loader_gate as gate
from builder.backends.code_trust import CodeTrust, check_trusted, load_torchscript
from builder.backends.registry import make_backend, register_backend
from builder.core.errors import HsiError, UsageError, first_few

from .forward_checks import forward_failed

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")
MAX_INPUT_SIDE = gate.MAX_INPUT_SIDE  # far above any ImageNet model's input, far below what overflows a tensor's size
# What a result may say of its preprocessing: the toolkit ran the model and applied it, whoever made
# the predictions declared it (not checked), or nothing is known (nothing was declared).
APPLIED, DECLARED, UNKNOWN = "applied", "declared", "unknown"
PREPROCESSING_STATUSES = (APPLIED, DECLARED, UNKNOWN)


class ModelError(UsageError, ValueError):
    """A model spec that cannot be turned into a module: the message says what to pass."""


@dataclass(frozen=True)
class Preprocessing:
    """How a canvas becomes the model's input. `crop_pct` None: the canvas as it is (resized only
    when the model's input size differs); a value reproduces timm's resize-then-centre-crop."""

    input_size: tuple[int, int] = (224, 224)  # height, width
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    interpolation: str = "bicubic"
    crop_pct: float | None = None
    source: str = "default"  # where mean/std/size came from: timm data config, torchvision weights, flags

    def describe(self) -> str:
        h, w = self.input_size
        if self.crop_pct is None:
            geometry = f"canvas as is, resized to {w}x{h} only if it differs (no centre crop)"
        else:
            geometry = f"resize to {int(h / self.crop_pct)} then centre crop {w}x{h} (crop_pct {self.crop_pct})"
        return f"{geometry}, {self.interpolation}, mean {list(self.mean)}, std {list(self.std)} ({self.source})"

    def to_json(self) -> dict:
        """The preprocessing section of a run's metadata: the toolkit applied it (status "applied")."""
        data = asdict(self)
        data["input_size"] = list(self.input_size)
        data["mean"], data["std"] = list(self.mean), list(self.std)
        data["cropped"] = self.crop_pct is not None
        data["resize"] = int(self.input_size[0] / self.crop_pct) if self.crop_pct is not None else None
        data["description"] = self.describe()
        data["status"] = APPLIED
        return data


@dataclass(frozen=True)
class ModelOptions:
    """Everything besides the spec that decides which weights and preprocessing are used."""

    checkpoint: Path | None = None
    arch: str | None = None
    num_classes: int | None = None  # the checkpoint's class count when it is not 1000
    classes: tuple[str, ...] | None = None  # wnids of the outputs, in output order (a subset model)
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    input_size: tuple[int, int] | None = None
    interpolation: str | None = None
    crop_pct: float | None = None
    trust: CodeTrust = CodeTrust()  # the TorchScript files the user trusts to run their code
    # a zero-shot spec's prompt sets, resolved (None: openai, simple, no-scale); other models have none
    template_sets: tuple[tuple[str, tuple[str, ...]], ...] | None = None
    data_classes: tuple[str, ...] | None = None  # the data's label wnids: a zero-shot model's default label space
    device: str | None = None  # where a model computes at load time (a zero-shot text pass); None: the CPU


@dataclass
class LoadedModel:
    spec: str
    module: object  # torch.nn.Module (or a ScriptModule)
    preprocessing: Preprocessing
    classes: tuple[str, ...] | None = None  # wnids per output; None: outputs are the output space's own
    checkpoint_name: str | None = None
    checkpoint_sha256: str | None = None
    notes: list[str] = field(default_factory=list)
    default_preprocessing: Preprocessing | None = None  # before any flag: the model's own data config
    identity: dict | None = None  # an in-memory model's (evaluation.model_formats.identity); None for a spec
    zero_shot: dict | None = None  # a zero-shot model's record (evaluation.zero_shot.record.prompt_record)

    def describe(self) -> dict:
        return {
            "spec": self.spec,
            "checkpoint": self.checkpoint_name,
            "checkpoint_sha256": self.checkpoint_sha256,
            "declared_classes": list(self.classes) if self.classes else None,
            "identity": self.identity,
        }


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_classes_file(path: Path) -> tuple[str, ...]:
    """wnids in output order, one a line (blank lines and '#' comments ignored)."""
    from builder.core.untrusted import UntrustedInput, regular_file

    try:
        text = regular_file(Path(path), "--classes file").read_text("utf-8")
    except (UntrustedInput, UnicodeDecodeError, OSError) as exc:
        raise ModelError(f"--classes {first_few([path])}: {exc}") from None
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    wnids = tuple(line for line in lines if line)
    if not wnids:
        raise ModelError(f"--classes {Path(path).name} lists no wnids")
    return wnids


def parse_floats(text: str, count: int, flag: str, positive: bool = False) -> tuple[float, ...]:
    """`count` comma-separated finite numbers (one is repeated), all above 0 when `positive`."""
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        raise ModelError(f"{flag} takes {count} comma-separated numbers, got {text!r}") from None
    if len(values) == 1:
        values = values * count
    if len(values) != count:
        raise ModelError(f"{flag} takes {count} comma-separated numbers, got {text!r}")
    if not all(math.isfinite(v) for v in values):
        raise ModelError(f"{flag} takes finite numbers, got {text!r}")
    if positive and min(values) <= 0:
        raise ModelError(f"{flag} divides the pixels, so every value must be above 0, got {text!r}")
    return values


def _published_at(name: str) -> str:
    """Where timm's default weights for `name` are published (its pretrained config says)."""
    import timm

    try:
        cfg = timm.models.get_pretrained_cfg(name)
    except (RuntimeError, ValueError, KeyError):
        cfg = None
    places = []
    if cfg is not None and cfg.hf_hub_id:
        places.append(f"https://huggingface.co/{cfg.hf_hub_id}")
    if cfg is not None and cfg.url:
        places.append(cfg.url)
    return " and ".join(places) or "the Hugging Face Hub (https://huggingface.co/timm)"


def _hub_hint(name: str) -> str:
    return (
        f"The weights are published at {_published_at(name)}: download them on a machine with network access "
        "and pass the file with --checkpoint FILE, or point HF_HOME (or HF_HUB_CACHE) at a cache that holds "
        "them; HF_HUB_OFFLINE=1 forbids downloads"
    )


def _checkpoint_file(path: Path) -> Path:
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"--checkpoint {path.name}: no such file")
    return path


def apply_overrides(pre: Preprocessing, options: ModelOptions) -> Preprocessing:
    """`pre` with the preprocessing the options set (flags, or `hsi.evaluate`'s keywords), checked."""
    changes = {}
    for name in ("mean", "std", "input_size", "interpolation"):
        value = getattr(options, name)
        if value is not None:
            changes[name] = tuple(value) if isinstance(value, (list, tuple)) else value
    if changes:
        changes["source"] = f"{pre.source}, overridden by flags ({', '.join(sorted(changes))})"
    if options.crop_pct is not None:
        if not 0 < options.crop_pct <= 1:
            raise ModelError(f"--crop-pct must be in (0, 1], got {options.crop_pct}")
        changes["crop_pct"] = options.crop_pct
    if changes.get("interpolation") and changes["interpolation"] not in INTERPOLATIONS:
        raise ModelError(f"--interpolation must be one of {', '.join(INTERPOLATIONS)}")
    return replace(pre, **changes)


def timm_preprocessing(model) -> Preprocessing:
    from timm.data import resolve_data_config

    config = resolve_data_config(model=model)
    _, h, w = config["input_size"]
    # The data config's crop_pct is deliberately not used: the canvas is evaluated as it is.
    return Preprocessing(
        (h, w), tuple(config["mean"]), tuple(config["std"]), config["interpolation"], None, "timm data config"
    )


def _known_timm_name(name: str) -> None:
    import timm

    if not timm.is_model(name.split(".", 1)[0]):
        raise ModelError(f"timm has no model {name!r} (see timm.list_models())")


def _load_timm(name: str, options: ModelOptions) -> LoadedModel:
    _known_timm_name(name)
    kwargs: dict = {}
    checkpoint = sha = None
    if options.checkpoint is not None:
        checkpoint = _checkpoint_file(options.checkpoint)
        overlay: dict = {"file": str(checkpoint)}
        if options.num_classes is not None:
            # Without num_classes in the overlay, timm drops a classifier of another size silently.
            overlay["num_classes"] = options.num_classes
            kwargs["num_classes"] = options.num_classes
        kwargs["pretrained_cfg_overlay"] = overlay
        sha = sha256_of(checkpoint)
        _read_state_dict(checkpoint)  # tensors only, read by the one reader before timm reads the file
    try:
        model = gate.timm_model(name, pretrained=True, **kwargs)
    except (OSError, RuntimeError) as exc:  # LocalEntryNotFoundError and FileNotFoundError are OSErrors
        if options.checkpoint is not None:
            raise ModelError(
                f"cannot load --checkpoint {checkpoint.name} into timm:{name}: {gate.first_line(exc)} "
                "(pass --num-classes when its classifier is not 1000-way)"
            ) from None
        raise ModelError(
            f"the pretrained weights of timm:{name} are not available offline ({type(exc).__name__}). {_hub_hint(name)}"
        ) from None
    model.eval()
    return LoadedModel(
        f"timm:{name}", model, timm_preprocessing(model), options.classes, checkpoint.name if checkpoint else None, sha
    )


def _tv_weights(name: str):
    import torchvision

    try:
        return torchvision.models.get_model_weights(name).DEFAULT
    except (ValueError, KeyError):
        raise ModelError(f"torchvision has no model {name!r} (see torchvision.models.list_models())") from None


def _tv_preprocessing(weights) -> Preprocessing:
    transforms = weights.transforms()
    size = transforms.crop_size[0]
    return Preprocessing(
        (size, size),
        tuple(transforms.mean),
        tuple(transforms.std),
        transforms.interpolation.value,
        None,
        f"torchvision {weights}",
    )


def _read_state_dict(path: Path) -> dict:
    from builder.core.untrusted import UntrustedInput, load_torch

    try:  # weights_only, one line: never torch's advice to turn weights_only off, nor its colours
        state = load_torch(path, "state_dict file", "save the model's state_dict (tensors only) with torch.save")
    except UntrustedInput as exc:
        raise ModelError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - pickle, zip and tensor errors all mean "not a state_dict file"
        raise ModelError(f"{path.name} is not a readable state_dict file: {gate.first_line(exc)}") from None
    for key in ("state_dict", "model", "state_dict_ema"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    if not isinstance(state, dict):
        raise ModelError(f"{path.name} holds a {type(state).__name__}, not a state_dict")
    return {k.removeprefix("module."): v for k, v in state.items()}


def _load_tv(name: str, options: ModelOptions) -> LoadedModel:
    weights = _tv_weights(name)
    if options.checkpoint is not None:
        checkpoint = _checkpoint_file(options.checkpoint)
        model = gate.torchvision_model(name, weights=None, num_classes=options.num_classes or 1000)
        _strict_load(model, _read_state_dict(checkpoint), checkpoint.name)
        loaded = LoadedModel(
            f"tv:{name}", model, _tv_preprocessing(weights), options.classes, checkpoint.name, sha256_of(checkpoint)
        )
    else:
        try:
            model = gate.torchvision_model(name, weights=weights)
        except OSError as exc:  # URLError when offline
            raise ModelError(
                f"the weights {weights} of tv:{name} are not available offline ({exc}). They are published at "
                f"{weights.url}; download the file on a machine with network access and pass it with "
                f"--checkpoint FILE, or put it under $TORCH_HOME/hub/checkpoints/"
            ) from None
        loaded = LoadedModel(
            f"tv:{name}", model, _tv_preprocessing(weights), options.classes, weights.url.rsplit("/", 1)[-1], None
        )
    model.eval()
    return loaded


def _strict_load(model, state: dict, name: str) -> None:
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ModelError(
            f"{name} does not fit the architecture: {gate.first_line(exc)} "
            "(pass --num-classes when the checkpoint's classifier is not 1000-way)"
        ) from None


def _refuse_weight_flags(options: ModelOptions, spec: str, what: str) -> None:
    if options.checkpoint is not None or options.arch is not None:  # never silently ignored
        raise ModelError(
            f"{spec}: {what} carries its own weights and architecture; drop --checkpoint/--arch "
            "(or `checkpoint:`/`arch:` in --models) for it"
        )


TORCHSCRIPT_HINT = (
    "or export the model as an ep: file (torch.export.save) or an onnx: file, which are checked to hold no code "
    "and need no trust"
)


def _torchscript_file(path: Path, spec: str) -> None:
    if not Path(path).is_file():
        raise ModelError(f"{spec}: no such TorchScript file")


def _torchscript_refusal(spec: str):
    return lambda reason: ModelError(f"{spec}: {reason}")


def _load_torchscript(path: Path, options: ModelOptions, spec: str) -> LoadedModel:
    path = Path(path)
    _refuse_weight_flags(options, spec, MODEL_FILE_KINDS["ts"])
    _torchscript_file(path, spec)
    # refused before torch.jit.load unless trusted: loading runs the file's code
    module, sha256 = load_torchscript(path, options.trust, TORCHSCRIPT_HINT, _torchscript_refusal(spec))
    module.eval()
    pre = Preprocessing(source="defaults for TorchScript (ImageNet mean/std, 224, bicubic)")
    return LoadedModel(f"ts:{path.name}", module, pre, options.classes, path.name, sha256)


def _load_model_file(kind: str, path: Path, options: ModelOptions) -> LoadedModel:
    """`ep:FILE` or `onnx:FILE`: the format module checks and wraps the file; the preprocessing is
    the TorchScript defaults, with the input size the file fixes, if it does."""
    spec = f"{kind}:{path}"
    if kind == "ep":
        from .pt2_files import load_exported_program as load

        _refuse_weight_flags(options, spec, MODEL_FILE_KINDS["ep"])
        what = "torch.export programs"
    else:
        from .onnx_files import load_onnx_model as load

        _refuse_weight_flags(options, spec, MODEL_FILE_KINDS["onnx"])
        what = "ONNX models"
    module, file = load(path, spec)
    pre = Preprocessing(source=f"defaults for {what} (ImageNet mean/std, 224, bicubic)")
    if module.shape.size is not None:
        pre = replace(pre, input_size=module.shape.size, source=f"{pre.source}, input size fixed by the file")
    loaded = LoadedModel(f"{kind}:{file.name}", module, pre, options.classes, file.name, file.sha256)
    if module.shape.max_batch is not None or module.shape.min_batch > 1:
        loaded.notes.append(f"{loaded.spec} takes {module.shape.describe_batch()}: run in chunks of that size")
    return loaded


def _require_arch(path: Path, options: ModelOptions) -> None:
    if not options.arch:
        raise ModelError(
            f"{path.name} is a weights file: pass its architecture with --arch NAME (a timm name or tv:NAME)"
        )


def _state_dict_file(path: Path) -> None:
    if not path.is_file():
        raise ModelError(f"model file {path.name} does not exist")


def _load_state_dict_file(path: Path, options: ModelOptions) -> LoadedModel:
    _require_arch(path, options)
    if options.arch.startswith("tv:"):
        return _load_tv(options.arch[3:], replace(options, checkpoint=path))
    arch = options.arch.removeprefix("timm:")
    state = _read_state_dict(path)  # before the model is built: a file that is no state_dict costs nothing
    try:
        model = gate.timm_model(arch, pretrained=False, num_classes=options.num_classes or 1000)
    except RuntimeError as exc:
        raise ModelError(f"--arch {arch}: {gate.first_line(exc)}") from None
    _strict_load(model, state, path.name)
    model.eval()
    return LoadedModel(
        f"{path.name} (timm:{arch})", model, timm_preprocessing(model), options.classes, path.name, sha256_of(path)
    )


def _load_zero_shot(spec: str, options: ModelOptions) -> LoadedModel:
    """An `openclip:` or `hf-clip:` spec with its text classifiers built for the options' prompt sets,
    over `--classes` or else the data's classes."""
    from evaluation.zero_shot.specs import load_zero_shot_spec, spec_label_space

    _refuse_weight_flags(options, spec, "a CLIP spec")
    space, source = spec_label_space(options.classes, options.data_classes or ())
    sets = dict(options.template_sets) if options.template_sets else None
    built = load_zero_shot_spec(spec, sets, space, source, options.device)
    pre = Preprocessing(**built.preprocessing)
    return LoadedModel(
        built.spec,
        built.module,
        pre,
        built.classes,
        built.checkpoint,
        built.checkpoint_sha256,
        built.notes,
        zero_shot=built.record,
    )


@dataclass(frozen=True)
class ClassifierSpec:
    """A classifier entry's config in the backend registry: what follows the spec's prefix (a timm
    or torchvision name, a file) and the options that pick its weights and preprocessing."""

    target: str = ""
    options: ModelOptions = ModelOptions()


# The classifier kinds of the one backend registry (builder.backends.registry), registered here
# because they build evaluation's LoadedModel; `load_model` resolves every spec through it.
@register_backend("classifier", "timm", config_class=ClassifierSpec, requires=("torch", "timm"))
def _timm_classifier(spec: ClassifierSpec) -> LoadedModel:
    return _load_timm(spec.target, spec.options)


@register_backend("classifier", "tv", config_class=ClassifierSpec, requires=("torch", "torchvision"))
def _torchvision_classifier(spec: ClassifierSpec) -> LoadedModel:
    return _load_tv(spec.target, spec.options)


@register_backend("classifier", "ts", config_class=ClassifierSpec, requires=("torch",))
def _torchscript_classifier(spec: ClassifierSpec) -> LoadedModel:
    return _load_torchscript(Path(spec.target), spec.options, f"ts:{spec.target}")


@register_backend("classifier", "ep", config_class=ClassifierSpec, requires=("torch",))
def _exported_program_classifier(spec: ClassifierSpec) -> LoadedModel:
    return _load_model_file("ep", Path(spec.target), spec.options)


@register_backend(
    "classifier", "onnx", config_class=ClassifierSpec, requires=("torch", "onnx", "onnxruntime"), extra="onnx"
)
def _onnx_classifier(spec: ClassifierSpec) -> LoadedModel:
    return _load_model_file("onnx", Path(spec.target), spec.options)


@register_backend("classifier", "state-dict", config_class=ClassifierSpec, requires=("torch", "timm"))
def _state_dict_classifier(spec: ClassifierSpec) -> LoadedModel:
    path = Path(spec.target)
    _state_dict_file(path)
    return _load_state_dict_file(path, spec.options)


@register_backend("classifier", "openclip", config_class=ClassifierSpec, requires=("torch", "open_clip"), extra="clip")
def _openclip_classifier(spec: ClassifierSpec) -> LoadedModel:
    return _load_zero_shot(f"openclip:{spec.target}", spec.options)


# open_clip too: CLIP's published templates and class names come from its package
@register_backend(
    "classifier", "hf-clip", config_class=ClassifierSpec, requires=("torch", "transformers", "open_clip"), extra="clip"
)
def _hf_clip_classifier(spec: ClassifierSpec) -> LoadedModel:
    return _load_zero_shot(f"hf-clip:{spec.target}", spec.options)


SPEC_PREFIXES = {
    "ts:": "ts",
    "ep:": "ep",
    "onnx:": "onnx",
    "tv:": "tv",
    "timm:": "timm",
    "openclip:": "openclip",
    "hf-clip:": "hf-clip",
}
ZERO_SHOT_KINDS = ("openclip", "hf-clip")
MODEL_FILE_PREFIXES = ("ts:", "ep:", "onnx:")  # files with no data config: the flags are their preprocessing
MODEL_FILE_KINDS = {"ts": "a TorchScript file", "ep": "a torch.export program", "onnx": "an ONNX model"}


def is_zero_shot_spec(spec: str) -> bool:
    """Whether `spec` names a zero-shot CLIP model (`openclip:`, `hf-clip:`), which takes prompt sets."""
    return classifier_entry(spec)[0] in ZERO_SHOT_KINDS


def classifier_entry(spec: str) -> tuple[str, str]:
    """(registry name, target) of a model spec: `ts:FILE`, `ep:FILE`, `onnx:FILE`, `tv:NAME`,
    `timm:NAME`, `openclip:...`, `hf-clip:...`, a state_dict FILE, or a bare timm name."""
    for prefix, name in SPEC_PREFIXES.items():
        if spec.startswith(prefix):
            return name, spec[len(prefix) :]
    if os.path.sep in spec or Path(spec).suffix in (".pt", ".pth", ".bin", ".ckpt"):
        return "state-dict", spec
    return "timm", spec


def load_model(spec: str, options: ModelOptions = ModelOptions()) -> LoadedModel:
    """Turn `spec` into a LoadedModel through the backend registry; raises ModelError (or
    BackendUnavailable, for a missing extra) with what to pass when it cannot."""
    name, target = classifier_entry(spec)
    loaded = make_backend("classifier", name, ClassifierSpec(target, options))
    loaded.default_preprocessing = loaded.preprocessing
    loaded.preprocessing = apply_overrides(loaded.preprocessing, options)
    return loaded


def check_spec(spec: str, options: ModelOptions = ModelOptions()) -> None:
    """Refuse now, with the loader's own message, what loading `spec` would refuse before reading any
    weights: an unknown timm or torchvision name, a model file or checkpoint that does not exist, a
    weights file without --arch, a TorchScript file whose sha256 is not trusted. A sweep checks every
    model so before the first one runs; what only loading finds (weights that are not offline, a
    damaged file) is that model's failure."""
    name, target = classifier_entry(spec)
    if name in ZERO_SHOT_KINDS:
        from evaluation.zero_shot.clip_models import check_clip_spec

        _refuse_weight_flags(options, spec, "a CLIP spec")
        check_clip_spec(spec)
    elif name == "timm":
        _known_timm_name(target)
    elif name == "tv":
        _tv_weights(target)
    elif name in MODEL_FILE_KINDS:
        _refuse_weight_flags(options, spec, MODEL_FILE_KINDS[name])
        if name == "ts":
            _torchscript_file(Path(target), spec)
            check_trust(spec, options)
        elif not Path(target).is_file():
            raise ModelError(f"{spec}: no such file")
    else:
        _state_dict_file(Path(target))
        _require_arch(Path(target), options)
        arch = options.arch or ""
        if arch.startswith("tv:"):
            _tv_weights(arch[3:])
        else:
            _known_timm_name(arch.removeprefix("timm:"))
    if options.checkpoint is not None and name in ("timm", "tv"):
        _checkpoint_file(options.checkpoint)


def check_trust(spec: str, options: ModelOptions = ModelOptions()) -> None:
    """Refuse a `ts:FILE` whose sha256 the options do not trust (nothing is loaded), so a run that
    loads its models in worker processes refuses it before any starts; the loader checks again."""
    name, target = classifier_entry(spec)
    if name == "ts" and Path(target).is_file():
        check_trusted(Path(target), options.trust, TORCHSCRIPT_HINT, _torchscript_refusal(spec), "TorchScript file")


def loaded_spec(spec: str, options: ModelOptions = ModelOptions()) -> str:
    """The spec a LoadedModel of `spec` records, from the spec alone (a model that never loaded is
    named as it would have been): a file by its name, a bare timm name as timm:NAME."""
    name, target = classifier_entry(spec)
    if name in ("timm", "tv"):
        return f"{name}:{target}"
    if name in ZERO_SHOT_KINDS:
        from evaluation.zero_shot.specs import recorded_spec

        return recorded_spec(spec, os.environ)
    if name == "state-dict":
        arch = options.arch or ""
        return arch if arch.startswith("tv:") else f"{Path(target).name} (timm:{arch.removeprefix('timm:')})"
    return f"{name}:{Path(target).name}"


STATE_DICT_SPEC = re.compile(r"(?P<file>[^ ]+) \((?P<arch>timm:[^()\s]+)\)")  # loaded_spec's "FILE (timm:ARCH)"


def recorded_spec_parts(spec: str) -> tuple[str, str, str | None] | None:
    """(registry name, target, arch) of a spec as a LoadedModel records it (`loaded_spec`): a
    library name for timm and tv, a file's name for a model file or a state_dict (whose arch is
    recorded beside it); None for what no loader took (predictions, an in-memory model)."""
    for prefix in ("timm:", "tv:", *MODEL_FILE_PREFIXES):
        if spec.startswith(prefix) and len(spec) > len(prefix):
            return SPEC_PREFIXES[prefix], spec[len(prefix) :], None
    matched = STATE_DICT_SPEC.fullmatch(spec)
    if matched:
        return "state-dict", matched["file"], matched["arch"]
    return None


def model_slug(spec: str) -> str:
    """A file-system-safe folder name for a model spec."""
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in spec.replace(":", "_"))
    return keep.strip("._") or "model"


def count_outputs(module, preprocessing: Preprocessing, spec: str = "the model") -> int:
    """The model's output size, from one forward pass on a blank input (before any real work); a
    model that fails on it is one line naming `spec`, the input shape and the cause."""
    import torch

    try:  # a size from a file (a processor config, an ep: file's shape, an entry under --rerun): bounded first
        h, w = gate.check_input_size(tuple(preprocessing.input_size), f"{spec}'s input size")
    except gate.LoaderRefused as refusal:
        raise ModelError(str(refusal)) from None
    with torch.no_grad():
        try:
            blank = torch.zeros(1, 3, h, w)
            out = module(blank)
        except HsiError:  # a model file's own refusal (an input size it does not take) says it already
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the model raises is its failure, in one line
            raise forward_failed(spec, (1, 3, h, w), exc) from None
    if isinstance(out, (tuple, list)):
        out = out[0]
    if isinstance(out, dict) and out:  # a zero-shot model's logits per prompt set: each has the same classes
        out = next(iter(out.values()))
    if not isinstance(out, torch.Tensor):
        raise ModelError(f"the model returns a {type(out).__name__}, not (batch, classes) logits")
    if out.ndim != 2:
        raise ModelError(f"the model returns a tensor of shape {tuple(out.shape)}, not (batch, classes) logits")
    return int(out.shape[1])
