"""CLIP models from a model spec, with their tokenizer and their own preprocessing.

Specs:
    openclip:ARCH:TAG    open-clip-torch's ARCH with the weights its pretrained TAG names (e.g.
                         `openclip:ViT-B-32-quickgelu:openai`), resolved through the Hugging Face
                         Hub client: from the local Hub cache when HF_HUB_OFFLINE=1
    openclip:ARCH:FILE   ARCH with the weights in FILE (.safetensors, or a torch file read with
                         weights_only=True: tensors only, never unpickled code); a known tag wins
                         over a file of the same name (write ./openai for the file)
    openclip:ARCH        ARCH with the weights file $HSI_OPENCLIP_WEIGHTS names
    openclip:CONFIG.json:...
                         an architecture of one's own: open_clip's model config file, registered
                         under its stem (recorded by that name)
    hf-clip:DIR          a transformers `CLIPModel` saved with save_pretrained, with its tokenizer and
                         image processor config, in a local folder
    hf-clip:ID           the same from the local Hub cache (or downloaded, unless HF_HUB_OFFLINE=1)

Weights are never substituted: missing weights, a tag that is not cached, a file that does not fit
the architecture or a folder that lacks some of the model's weights is an error naming the flag or
variable to set and where the weights are published; nothing is initialised at random. A tag whose
weights were trained with QuickGELU (OpenAI's) gets QuickGELU, as its pretrained config declares.

The preprocessing is read from the model's own config (open_clip's preprocess config, the folder's
image processor config) as plain fields (`ClipPreprocessing`), for the evaluation to record and to
warn when it centre-crops the canvas.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from builder.backends import loader_gate as gate
from builder.backends.torch_base import checkpoint_sha256, weight_files_sha256
from builder.core.errors import UsageError, first_few, printable, shown
from builder.core.untrusted import UntrustedInput, load_torch, regular_file

OPENCLIP_PREFIX = "openclip:"
HF_CLIP_PREFIX = "hf-clip:"
WEIGHTS_VARIABLE = "HSI_OPENCLIP_WEIGHTS"
WEIGHT_FILE_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
HUB_FILES = ("*.json", "*.safetensors", "*.txt", "*.model")  # hf-clip's configs, weights, vocabularies
HUB_HINT = (
    "point HF_HOME (or HF_HUB_CACHE) at a cache that holds them, or download them on a machine with network "
    "access (HF_HUB_OFFLINE=1 forbids downloads)"
)
# PIL's resampling filters by number, as image processor configs store them
RESAMPLE_NAMES = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "box", 5: "hamming"}


class ClipModelError(UsageError, ValueError):
    """A CLIP model spec that cannot be loaded: the message says what to pass."""


@dataclass(frozen=True)
class ClipPreprocessing:
    """How the model's own preprocessing treats a square canvas: resized to `resize` (height,
    width), then centre-cropped to `input_size` when that is smaller; `crops_canvas` says whether it is."""

    resize: tuple[int, int]
    input_size: tuple[int, int]
    interpolation: str
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    source: str

    @property
    def crops_canvas(self) -> bool:
        return self.input_size[0] < self.resize[0] or self.input_size[1] < self.resize[1]

    @property
    def crop_pct(self) -> float | None:
        """The share of the resized canvas's height the crop keeps; None when nothing is cropped."""
        return self.input_size[0] / self.resize[0] if self.crops_canvas else None

    def preprocessing_fields(self) -> dict:
        """Keyword arguments of the evaluation's `Preprocessing` (input_size, mean, std,
        interpolation, crop_pct, source): the model's own preprocessing, crop included."""
        return {
            "input_size": self.input_size,
            "mean": self.mean,
            "std": self.std,
            "interpolation": self.interpolation,
            "crop_pct": self.crop_pct,
            "source": self.source,
        }


@dataclass
class LoadedClip:
    spec: str  # as recorded: a file or folder by its name, never a machine path
    kind: str  # "open_clip" or "transformers"
    model: object  # torch.nn.Module in eval mode, on the CPU
    tokenizer: object
    preprocessing: ClipPreprocessing
    weights: str  # the tag, hub id, or file/folder name the weights came from
    weights_sha256: dict[str, str]  # sha256 of each weight file, by file name
    notes: list[str] = field(default_factory=list)


def is_clip_spec(spec: str) -> bool:
    return spec.startswith((OPENCLIP_PREFIX, HF_CLIP_PREFIX))


def load_clip(spec: str) -> LoadedClip:
    """The model, tokenizer and preprocessing of an `openclip:` or `hf-clip:` spec."""
    if spec.startswith(OPENCLIP_PREFIX):
        arch, weights = _openclip_parts(spec)
        return _load_openclip(arch, weights)
    if spec.startswith(HF_CLIP_PREFIX):
        return _load_hf_clip(spec[len(HF_CLIP_PREFIX) :])
    raise ClipModelError(f"{shown(spec)} is not a CLIP spec (openclip:ARCH[:TAG|FILE] or hf-clip:ID|DIR)")


def check_clip_spec(spec: str) -> None:
    """Refuse now what loading `spec` would refuse before reading any weights: an unknown
    architecture, a weights file that is missing (or a link), no weights named and no
    $HSI_OPENCLIP_WEIGHTS, an unknown tag, an `hf-clip:` path that is a file or a missing folder."""
    if spec.startswith(OPENCLIP_PREFIX):
        import open_clip

        arch, weights = _openclip_parts(spec)
        _known_arch(arch)
        if weights is not None and open_clip.get_pretrained_cfg(arch, weights):
            return  # a tag: whether its weights are cached is found when loading
        resolve_openclip_weights(arch, weights)  # a file or the variable's: checked, not read
    elif spec.startswith(HF_CLIP_PREFIX):
        target = spec[len(HF_CLIP_PREFIX) :]
        path = Path(target).expanduser()
        if path.is_symlink() or path.is_dir():
            hf_clip_folder(target)  # a link, or a folder holding one, code or an unknown config key: refused now
        if path.exists() and not path.is_dir():
            raise ClipModelError(f"hf-clip:{shown(target, quote=False)} is a file; hf-clip takes a folder or a hub id")
        if not path.exists() and (path.is_absolute() or target.startswith((".", "~")) or target.count("/") > 1):
            raise ClipModelError(
                f"hf-clip:{shown(target, quote=False)}: no such folder (a hub id is ORG/NAME; a folder is one saved "
                "with save_pretrained)"
            )
    else:
        raise ClipModelError(f"{shown(spec)} is not a CLIP spec (openclip:ARCH[:TAG|FILE] or hf-clip:ID|DIR)")


# ---- open_clip ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpenClipWeights:
    path: Path  # the file to load (in the Hub cache for a tag)
    name: str  # what is recorded: the tag, or the file's name
    tag: str | None


def _openclip_parts(spec: str) -> tuple[str, str | None]:
    rest = spec[len(OPENCLIP_PREFIX) :]
    arch, _, weights = rest.partition(":")
    if not arch:
        raise ClipModelError(f"{shown(spec)} names no architecture: openclip:ARCH[:TAG|FILE], e.g. ViT-B-32")
    return registered_arch(arch), weights or None


def registered_arch(arch: str) -> str:
    """`arch` itself, or for a model config file (ARCH.json, open_clip's format: embed_dim,
    vision_cfg, text_cfg) its stem, once the file is registered with open_clip's add_model_config,
    so an architecture of one's own loads as open_clip's do."""
    if not arch.endswith(".json"):
        return arch
    # refuses links, non-JSON, unknown keys (tokenizer_kwargs beyond the tokenizer's own options) and huge sizes
    return gate.register_open_clip_config(Path(arch).expanduser(), "model config (openclip:CONFIG.json)")


def _known_arch(arch: str) -> None:
    import open_clip

    if arch not in open_clip.list_models():
        raise ClipModelError(f"open_clip has no architecture {shown(arch)} (see open_clip.list_models())")


def published_weights(arch: str, tag: str | None = None) -> str:
    """Where the weights of `arch` (with `tag`: of that tag) are published, for an error message."""
    import open_clip

    tags = [tag] if tag else open_clip.list_pretrained_tags_by_model(arch)
    if not tags:
        return f"open_clip publishes no weights for {arch}"
    config = open_clip.get_pretrained_cfg(arch, tags[0])
    if config.get("hf_hub"):
        # "org/name/" or "org/name/file": the repository is the first two parts
        place = "https://huggingface.co/" + "/".join(config["hf_hub"].split("/")[:2])
    else:
        place = config.get("url") or "open_clip's pretrained list (open_clip.list_pretrained())"
    if tag:
        return f"the weights are published at {place}"
    return f"its weights are published by tag, e.g. {tags[0]} at {place} (tags: {first_few(tags, 8)})"


def resolve_openclip_weights(arch: str, given: str | None) -> OpenClipWeights:
    """The weights file of `openclip:ARCH[:given]`: a tag from the Hub cache, a file, or the file
    $HSI_OPENCLIP_WEIGHTS names; refused with what to pass when there is none."""
    import open_clip

    _known_arch(arch)
    if given is None:
        variable = os.environ.get(WEIGHTS_VARIABLE)
        if not variable:
            raise ClipModelError(
                f"openclip:{arch} names no weights: give openclip:{arch}:TAG (a pretrained tag) or "
                f"openclip:{arch}:FILE, or set {WEIGHTS_VARIABLE}=FILE; {published_weights(arch)}"
            )
        return _weights_file(arch, variable, WEIGHTS_VARIABLE)
    if open_clip.get_pretrained_cfg(arch, given):
        return _tag_file(arch, given)
    if Path(given).suffix in WEIGHT_FILE_SUFFIXES or Path(given).exists() or os.sep in given:
        return _weights_file(arch, given, f"openclip:{arch}:FILE")
    raise ClipModelError(
        f"openclip:{arch}:{shown(given, quote=False)}: {shown(given)} is neither a pretrained tag of {arch} nor a "
        f"weights file ({', '.join(WEIGHT_FILE_SUFFIXES)}); {published_weights(arch)}"
    )


def _weights_file(arch: str, given: str, origin: str) -> OpenClipWeights:
    path = Path(given).expanduser()
    hint = f"{published_weights(arch)}; pass the file as openclip:{arch}:FILE or with {WEIGHTS_VARIABLE}"
    try:
        regular_file(path, f"the weights file ({origin})")
    except UntrustedInput as error:
        raise ClipModelError(f"{error}: {hint}") from None
    if path.suffix not in WEIGHT_FILE_SUFFIXES:
        raise ClipModelError(
            f"{printable(str(path))} ({origin}) is not a weights file ({', '.join(WEIGHT_FILE_SUFFIXES)}): {hint}"
        )
    return OpenClipWeights(path, path.name, None)


def _tag_file(arch: str, tag: str) -> OpenClipWeights:
    try:
        path = gate.open_clip_pretrained_file(arch, tag)
    except Exception as error:  # noqa: BLE001 - the hub client and urllib raise many kinds; all mean "not here"
        raise ClipModelError(
            f"the weights of openclip:{arch}:{tag} are not available here ({type(error).__name__}): "
            f"{published_weights(arch, tag)}; {HUB_HINT}, or pass the file as openclip:{arch}:FILE or with "
            f"{WEIGHTS_VARIABLE}"
        ) from None
    if not path:
        raise ClipModelError(f"open_clip's tag {tag} of {arch} names no weights file: {published_weights(arch)}")
    return OpenClipWeights(Path(path), tag, tag)


def _load_openclip(arch: str, given: str | None) -> LoadedClip:
    import open_clip

    weights = resolve_openclip_weights(arch, given)
    options: dict = {}
    notes = []
    if weights.tag is not None:
        if open_clip.get_pretrained_cfg(arch, weights.tag).get("quick_gelu"):
            options["force_quick_gelu"] = True
            notes.append(f"QuickGELU, as the pretrained config of {arch}:{weights.tag} declares")
        source = weights.tag  # the tag's config also sets the preprocessing (mean, std, resize mode)
    else:
        source = str(weights.path)
    _tensors_only(weights.path.resolve(), arch)  # a Hub cache entry is a link to its blob; a FILE is checked not to be
    try:
        model = gate.open_clip_model(arch, pretrained=source, require_pretrained=True, device="cpu", **options)
    except gate.LoaderRefused:
        raise
    except Exception as error:  # noqa: BLE001 - torch, safetensors and open_clip raise many kinds; one line each
        raise ClipModelError(
            f"cannot load {weights.path.name} into openclip:{arch} ({type(error).__name__}: {_first_line(error)}); "
            f"{published_weights(arch)}"
        ) from None
    model.eval()
    try:
        tokenizer = gate.open_clip_tokenizer(arch)
    except Exception as error:  # noqa: BLE001 - an HF tokenizer of a text tower may be missing offline
        raise ClipModelError(
            f"the tokenizer of openclip:{arch} is not available ({_first_line(error)}); {HUB_HINT}"
        ) from None
    _pads(tokenizer, f"openclip:{arch}")
    return LoadedClip(
        f"{OPENCLIP_PREFIX}{arch}:{weights.name}",
        "open_clip",
        model,
        tokenizer,
        _openclip_preprocessing(open_clip.get_model_preprocess_cfg(model), arch, weights),
        weights.name,
        {weights.path.name: checkpoint_sha256(weights.path)},
        notes,
    )


def _tensors_only(path: Path, arch: str) -> None:
    """Refuse a torch file that holds more than tensors and plain values before open_clip reads it:
    open_clip retries a load that fails with TypeError without weights_only, which would run a
    crafted file's code. A safetensors file holds tensors by its format; its header is bounded."""
    if path.suffix == ".safetensors":
        gate.check_weight_file(path, "the weights file")
        return
    try:
        load_torch(path, "the weights file", published_weights(arch))
    except UntrustedInput as error:
        raise ClipModelError(str(error)) from None
    except Exception as error:  # noqa: BLE001 - whatever else the unpickler raises, the file is refused
        raise ClipModelError(
            f"{path.name} cannot be read as tensors ({type(error).__name__}: {_first_line(error)}); "
            f"{published_weights(arch)}"
        ) from None


def _openclip_preprocessing(config: dict, arch: str, weights: OpenClipWeights) -> ClipPreprocessing:
    origin = f"the pretrained config of {weights.tag}" if weights.tag else "open_clip's defaults (a file carries none)"
    return preprocessing_of(config, f"open_clip preprocess config of {arch}, from {origin}")


def module_preprocessing(model) -> ClipPreprocessing | None:
    """The preprocessing an open_clip model carries (open_clip.create_model sets it); None for any
    other model (a transformers CLIPModel's lives in its image processor, not in the model)."""
    if not (hasattr(model, "encode_image") and hasattr(model, "visual")):
        return None
    import open_clip

    config = dict(open_clip.get_model_preprocess_cfg(model))
    if not all(key in config for key in ("size", "mean", "std")):
        return None
    return preprocessing_of(config, "open_clip preprocess config the model carries")


def preprocessing_of(config: dict, source: str) -> ClipPreprocessing:
    """open_clip's preprocess config (size, resize_mode, interpolation, mean, std) as plain fields."""
    size = config["size"]
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    mode = config.get("resize_mode", "shortest")
    if mode == "squash" or height == width:
        resize = (height, width)
    else:  # "shortest" covers the input and centre-crops; "longest" fits it and pads
        side = max(height, width) if mode == "shortest" else min(height, width)
        resize = (side, side)
    return ClipPreprocessing(
        resize,
        (height, width),
        config.get("interpolation", "bicubic"),
        tuple(config["mean"]),
        tuple(config["std"]),
        source,
    )


# ---- transformers --------------------------------------------------------------------------------


def hf_clip_folder(target: str) -> Path:
    """The local folder of `hf-clip:target`: the folder itself, or the hub id's cached snapshot."""
    path = Path(target).expanduser()
    what = f"the model folder of hf-clip:{shown(target, quote=False)}"
    if path.is_symlink() or path.is_dir():
        gate.check_hf_clip_folder(path, what)  # the folder and every file in it plain, configs allowlisted
        return path
    if path.exists():
        raise ClipModelError(f"hf-clip:{shown(target, quote=False)} is a file; hf-clip takes a folder or a hub id")
    try:
        folder = gate.hub_snapshot(target, list(HUB_FILES))
    except gate.LoaderRefused:
        raise
    except Exception as error:  # noqa: BLE001 - the hub client raises many kinds; all mean "not here"
        raise ClipModelError(
            f"hf-clip:{shown(target, quote=False)} is neither a local folder nor in the Hugging Face Hub cache "
            f"({type(error).__name__}): pass a folder saved with save_pretrained (model, tokenizer and image "
            f"processor), or the id of weights published at https://huggingface.co/{printable(target)}; {HUB_HINT}"
        ) from None
    gate.check_hf_clip_folder(folder, what, cache_entry=folder.parents[1])
    return folder


def _load_hf_clip(target: str) -> LoadedClip:
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

    folder = hf_clip_folder(target)
    what = f"hf-clip:{shown(target, quote=False)}"
    try:
        model, info = gate.hf_from_pretrained(CLIPModel, folder, local_files_only=True, output_loading_info=True)
    except Exception as error:  # noqa: BLE001 - config, weights and safetensors errors: one line each
        raise ClipModelError(
            f"{what}: cannot load a CLIPModel ({type(error).__name__}: {_first_line(error)})"
        ) from None
    missing = sorted(info.get("missing_keys") or ()) + sorted(info.get("mismatched_keys") or ())
    if missing:
        raise ClipModelError(
            f"{what}: the weights lack {len(missing)} of the model's tensors ({first_few(missing, 3)}), which would be "
            "initialised at random: pass a complete checkpoint"
        )
    model.eval()
    try:
        tokenizer = gate.hf_from_pretrained(AutoTokenizer, folder, local_files_only=True)
        processor = gate.hf_from_pretrained(AutoImageProcessor, folder, local_files_only=True)
    except Exception as error:  # noqa: BLE001 - a folder without tokenizer or preprocessor files
        raise ClipModelError(
            f"{what}: the folder lacks the model's tokenizer or image processor config ({_first_line(error)}); "
            "save them with it (CLIPProcessor.save_pretrained)"
        ) from None
    _pads(tokenizer, what)
    name = folder.name if Path(target).expanduser().is_dir() else target
    return LoadedClip(
        f"{HF_CLIP_PREFIX}{name}",
        "transformers",
        model,
        tokenizer,
        _hf_preprocessing(processor, name),
        name,
        weight_files_sha256(folder),
    )


def _hf_preprocessing(processor, name: str) -> ClipPreprocessing:
    if not getattr(processor, "do_resize", True):
        raise ClipModelError(f"hf-clip:{name}: the image processor does not resize, so its input size is unknown")
    size, crop = processor.size, getattr(processor, "crop_size", None)
    if getattr(size, "shortest_edge", None):
        resize = (size.shortest_edge, size.shortest_edge)  # a square canvas's shortest edge is every edge
    else:
        resize = (size.height, size.width)
    input_size = (crop.height, crop.width) if getattr(processor, "do_center_crop", False) and crop else resize
    resample = processor.resample
    interpolation = RESAMPLE_NAMES.get(int(resample), str(resample)) if resample is not None else "bicubic"
    return ClipPreprocessing(
        resize,
        input_size,
        interpolation,
        tuple(processor.image_mean),
        tuple(processor.image_std),
        f"image processor config of {name} ({type(processor).__name__})",
    )


def _pads(tokenizer, what: str) -> None:
    """Refuse a Hugging Face tokenizer without a pad token: every prompt is padded to the context
    length, and transformers would fail there with a traceback mid-run."""
    inner = getattr(tokenizer, "tokenizer", tokenizer)  # open_clip's HFTokenizer wraps the transformers one
    if hasattr(inner, "pad_token_id") and inner.pad_token_id is None:
        raise ClipModelError(
            f"{what}: its tokenizer ({type(inner).__name__}) has no pad token, and every prompt is padded to the "
            "context length; use a tokenizer that defines one"
        )


_first_line = gate.first_line
