"""The one gate every call into a third-party model loader goes through: open_clip, transformers'
`from_pretrained` (models, tokenizers, processors), timm, torchvision, diffusers and segment-anything.

Those libraries trust what they are handed. A config may name code (transformers' `auto_map`,
`trust_remote_code` in open_clip's `tokenizer_kwargs`), a folder may hold links to any file, a size
read from a file is allocated as it stands, transformers asks on the terminal whether to run a
folder's code, and their reports print a stranger's tensor names raw. So, here and nowhere else:

- `trust_remote_code=False` is passed to every call that takes it; it is never read from a file;
- a config is read through `builder.core.untrusted` with a size cap, and only the keys its loader
  is known to take are accepted (an allowlist per file, taken from the library's own config
  classes where it has them); any other key is refused naming the file and the key;
- a model folder and every entry in it must be plain (no link, unless it stays inside the Hub
  cache entry the folder belongs to), and no folder holds Python files;
- every size read from a file (input sides, widths, layer and tensor counts, header and file
  sizes) is bounded before anything is allocated;
- a library call runs with an empty stdin (no prompt can be answered), with logging, warnings,
  stdout and stderr held back, so nothing a stranger wrote reaches the terminal raw; the caller
  turns a failure into one escaped line.

`torch.load` of a stranger's file is `builder.core.untrusted.load_torch` (weights_only=True), the
reading layer this gate builds on. A test (tests/adversarial/test_adv_loader_gate.py) lists every
call into these loaders in the product's packages and fails on one outside this module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import re
import struct
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from builder.core.errors import UsageError, printable, shown
from builder.core.untrusted import UntrustedInput, read_json, regular_file

MAX_INPUT_SIDE = 8192  # far above any ImageNet model's input, far below what overflows a tensor's size
MAX_CONFIG_BYTES = 1 << 20  # a model, tokenizer or processor config: a few KB in every published model
MAX_VOCABULARY_BYTES = 64 << 20  # tokenizer.json, vocab.json, merges.txt: CLIP's are under 4 MB
MAX_FOLDER_ENTRIES = 10_000
MAX_TENSORS = 100_000  # the largest published checkpoints hold a few thousand tensors
MAX_HEADER_BYTES = 64 << 20  # a safetensors header (the format's own reader stops at 100 MB)
MAX_WIDTH = 16_384  # hidden sizes, embedding dimensions, intermediate sizes
MAX_LAYERS = 256
MAX_COUNT = 1_000_000  # any other count a config holds: vocabulary, positions, heads, queries
MAX_PARAMETERS = 10_000_000_000  # a model estimated larger than this is refused before it is built
CODE_SUFFIXES = (".py", ".pyc", ".so", ".dll", ".dylib")


class LoaderRefused(UsageError, ValueError):
    """A model file, folder or config the gate refuses before any library reads it."""


# ---- the call itself ------------------------------------------------------------------------------


@contextlib.contextmanager
def library_call() -> Iterator[None]:
    """Run a third-party loader with no terminal: stdin empty (transformers' trust prompt reads EOF and
    refuses), logging off, warnings ignored, and stdout and stderr held back and dropped (progress bars,
    load reports naming a file's tensors)."""
    previous_disable = logging.root.manager.disable
    previous_stdin = sys.stdin
    sys.stdin = io.StringIO("")
    logging.disable(logging.CRITICAL)
    try:
        with (
            warnings.catch_warnings(),
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous_disable)
        sys.stdin = previous_stdin


def first_line(error: BaseException) -> str:
    """A library's error as a caller's message quotes it: its first line, escaped, at most 200 characters."""
    text = str(error).strip()
    return printable(text.splitlines()[0])[:200] if text else type(error).__name__


def hf_from_pretrained(cls: Any, source: Path | str, **kwargs: Any) -> Any:
    """`cls.from_pretrained(source, ...)` of transformers or diffusers, never running a folder's code."""
    kwargs["trust_remote_code"] = False
    with library_call():
        return cls.from_pretrained(source, **kwargs)


def timm_model(name: str, **kwargs: Any) -> Any:
    """`timm.create_model(name, ...)`; a `pretrained_cfg_overlay` file was checked by the caller."""
    import timm

    with library_call():
        return timm.create_model(name, **kwargs)


def torchvision_model(name: str, **kwargs: Any) -> Any:
    """`torchvision.models.get_model(name, ...)`: the published weights enum, or none."""
    import torchvision

    with library_call():
        return torchvision.models.get_model(name, **kwargs)


def sam_model(name: str) -> Any:
    """segment-anything's registered architecture `name` with no checkpoint path: the caller reads the
    weights as tensors and loads them with load_state_dict (and may build it on the meta device)."""
    from segment_anything import sam_model_registry

    with library_call():
        return sam_model_registry[name]()


def open_clip_model(arch: str, **kwargs: Any) -> Any:
    """`open_clip.create_model(arch, ...)` with `weights_only=True`."""
    import open_clip

    kwargs["weights_only"] = True
    with library_call():
        return open_clip.create_model(arch, **kwargs)


def open_clip_tokenizer(arch: str) -> Any:
    """`open_clip.get_tokenizer(arch)`; a Hugging Face tokenizer is built with trust_remote_code=False."""
    import open_clip

    text_cfg = (open_clip.get_model_config(arch) or {}).get("text_cfg") or {}
    kwargs = {"trust_remote_code": False} if text_cfg.get("hf_tokenizer_name") else {}
    with library_call():
        return open_clip.get_tokenizer(arch, **kwargs)


def open_clip_pretrained_file(arch: str, tag: str) -> str:
    """The cached (or downloaded) file of open_clip's pretrained `tag` of `arch`."""
    import open_clip

    with library_call():
        return open_clip.download_pretrained(open_clip.get_pretrained_cfg(arch, tag))


def hub_snapshot(repo_id: str, patterns: list[str]) -> Path:
    """The local snapshot of a Hub model repository (the cache when HF_HUB_OFFLINE=1), checked as a
    model folder whose links stay inside its own cache entry."""
    from huggingface_hub import snapshot_download

    with library_call():
        folder = Path(snapshot_download(repo_id, allow_patterns=patterns))
    return model_folder(folder, f"the Hub snapshot of {shown(repo_id, quote=False)}", cache_entry=folder.parents[1])


# ---- folders and files ----------------------------------------------------------------------------


def model_folder(path: Path, what: str, cache_entry: Path | None = None) -> Path:
    """`path` when it is a plain folder whose every entry is a plain file or folder; a link is refused
    (in a Hub snapshot, `cache_entry`, links to the entry's own blobs are how the cache stores files
    and are followed only there). Python files and native libraries are refused: no folder loaded
    here runs code. At most MAX_FOLDER_ENTRIES entries are looked at."""
    path = Path(path)
    where = printable(str(path))
    if path.is_symlink():
        raise LoaderRefused(f"{where}: {what} is a link; links are never followed: pass the folder itself")
    if not path.is_dir():
        raise LoaderRefused(f"{where}: {what} is not a folder")
    inside = Path(cache_entry).resolve() if cache_entry is not None else None
    seen = 0
    for root, folders, files in os.walk(path, followlinks=False):
        for name in sorted(folders + files):
            seen += 1
            if seen > MAX_FOLDER_ENTRIES:
                raise LoaderRefused(
                    f"{where}: {what} holds more than {MAX_FOLDER_ENTRIES} entries; no model needs them"
                )
            entry = Path(root) / name
            shown_entry = printable(str(entry.relative_to(path)))
            if entry.is_symlink():
                target = entry.resolve()
                if inside is None or not target.is_relative_to(inside) or not target.is_file():
                    raise LoaderRefused(
                        f"{where}: {shown_entry} in {what} is a link; links are never followed: copy the file in"
                    )
            elif not entry.is_dir() and not entry.is_file():
                raise LoaderRefused(f"{where}: {shown_entry} in {what} is not a plain file")
            if name.endswith(CODE_SUFFIXES):
                raise LoaderRefused(
                    f"{where}: {what} holds code ({shown_entry}); a model folder is loaded only without code"
                )
    return path


def bounded_file(path: Path, what: str, limit: int) -> Path:
    """`path`, a plain file of at most `limit` bytes."""
    try:
        size = regular_file(path, what).stat().st_size
    except UntrustedInput as error:
        raise LoaderRefused(str(error)) from None
    if size > limit:
        raise LoaderRefused(f"{printable(str(path))}: {what} is {size} bytes, more than {limit}; no model's is")
    return path


def config_json(path: Path, what: str) -> dict:
    """The JSON object of a config file of at most MAX_CONFIG_BYTES."""
    bounded_file(path, what, MAX_CONFIG_BYTES)
    try:
        data = read_json(path, what)
    except UntrustedInput as error:
        raise LoaderRefused(str(error)) from None
    if not isinstance(data, dict):
        raise LoaderRefused(f"{printable(str(path))}: {what} is not a JSON object")
    return data


def safetensors_header(path: Path, what: str) -> dict:
    """The header of a safetensors file, read without the library: its length, its tensor count and
    every tensor's byte range are bounded by the file before anything else reads it."""
    where = printable(str(path))
    size = regular_file(path, what).stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            raise LoaderRefused(f"{where}: {what} is not a safetensors file (shorter than its header length)")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise LoaderRefused(
                f"{where}: {what} declares a header of {length} bytes (at most {min(MAX_HEADER_BYTES, size - 8)})"
            )
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise LoaderRefused(f"{where}: {what} has a header that is not JSON") from None
    if not isinstance(header, dict):
        raise LoaderRefused(f"{where}: {what} has a header that is not a JSON object")
    tensors = len(header) - ("__metadata__" in header)
    if tensors > MAX_TENSORS:
        raise LoaderRefused(f"{where}: {what} declares {tensors} tensors, more than {MAX_TENSORS}")
    data_bytes = size - 8 - length
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= data_bytes
        ):
            raise LoaderRefused(
                f"{where}: {what}: tensor {shown(name)} has no byte range inside the file's {data_bytes} data bytes"
            )
    return header


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def check_weight_file(path: Path, what: str) -> None:
    """A weights file before a library reads it: plain, and a safetensors header bounded."""
    try:
        regular_file(path, what)
    except UntrustedInput as error:
        raise LoaderRefused(str(error)) from None
    if Path(path).suffix == ".safetensors":
        safetensors_header(Path(path), what)


def input_side(value: object, what: str) -> int:
    """A side of a model's input (pixels) read from a file: an integer in 1..MAX_INPUT_SIDE."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_INPUT_SIDE:
        raise LoaderRefused(f"{what} is an input side of 1 to {MAX_INPUT_SIDE} pixels, got {shown(value)}")
    return value


def check_input_size(size: tuple[int, int], what: str) -> tuple[int, int]:
    """(height, width) of an input about to be allocated, each side in 1..MAX_INPUT_SIDE."""
    return input_side(size[0], f"{what}: the height"), input_side(size[1], f"{what}: the width")


# ---- config allowlists --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ConfigRules:
    """What one config (or one object inside it) may hold: its keys, the objects under some keys
    (each with rules of its own), and which integers are sides, widths or layer counts."""

    keys: frozenset[str]
    objects: Mapping[str, ConfigRules] = dataclasses.field(default_factory=dict)
    sides: frozenset[str] = frozenset()
    widths: frozenset[str] = frozenset()
    layers: frozenset[str] = frozenset()
    values: Mapping[str, frozenset] = dataclasses.field(default_factory=dict)  # keys with a closed set of values


def check_config(data: Mapping, rules: ConfigRules, where: str, field: str = "") -> None:
    """Refuse a key outside `rules` (naming the file and the key), a size past its bound, a value
    outside a closed set; walk the objects the rules name."""
    for key, value in data.items():
        name = f"{field}.{key}" if field else str(key)
        if key not in rules.keys:
            raise LoaderRefused(
                f"{where}: key {shown(name)} is not one this loader takes (an unknown key may make the library "
                "load code or other files); remove it"
            )
        if key in rules.values and not _hashable_in(value, rules.values[key]):
            raise LoaderRefused(f"{where}: {name} is {shown(value)}, not one of {sorted(map(str, rules.values[key]))}")
        if key in rules.objects and value is not None:
            if not isinstance(value, Mapping):
                raise LoaderRefused(f"{where}: {name} is {shown(value)}, not an object")
            check_config(value, rules.objects[key], where, name)
        else:
            _check_sizes(value, key, name, rules, where)


def _hashable_in(value: object, allowed: frozenset) -> bool:
    try:
        return value in allowed
    except TypeError:
        return False


def _check_sizes(value: object, key: str, name: str, rules: ConfigRules, where: str) -> None:
    """Every integer under `key` (a list of them too) within the bound its kind has."""
    if isinstance(value, Mapping):
        for child_key, child in value.items():
            _check_sizes(child, key, f"{name}.{child_key}", rules, where)
        return
    if isinstance(value, list):
        if len(value) > MAX_COUNT:
            raise LoaderRefused(f"{where}: {name} lists {len(value)} values, more than {MAX_COUNT}")
        for item in value:
            _check_sizes(item, key, name, rules, where)
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    bound = (
        MAX_INPUT_SIDE
        if key in rules.sides
        else MAX_WIDTH
        if key in rules.widths
        else MAX_LAYERS
        if key in rules.layers
        else MAX_COUNT
    )
    if isinstance(value, float) and value != value:  # NaN is refused by the JSON reader already
        return
    if abs(value) > bound:
        raise LoaderRefused(f"{where}: {name} is {shown(value)}, more than {bound}; no model this loader takes is")


def estimated_parameters(width: int, layers: int, vocabulary: int = 0) -> int:
    """Roughly how many parameters a transformer tower of `layers` blocks of `width` has (12 w^2 each)."""
    return 12 * width * width * layers + vocabulary * width


def refuse_huge_model(parameters: int, where: str) -> None:
    if parameters > MAX_PARAMETERS:
        raise LoaderRefused(
            f"{where}: the config describes a model of about {parameters:.2e} parameters, more than "
            f"{MAX_PARAMETERS:.0e}; it is refused before it is built"
        )


# ---- open_clip ------------------------------------------------------------------------------------


def _dataclass_keys(cls: Any) -> frozenset[str]:
    return frozenset(field.name for field in dataclasses.fields(cls))


OPEN_CLIP_TOKENIZER_KWARGS = frozenset({"clean", "strip_sep_token", "language"})  # HFTokenizer's own arguments
OPEN_CLIP_LAYER_KWARGS = ConfigRules(
    frozenset({"eps", "inplace", "approximate", "negative_slope", "elementwise_affine"})
)
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\Z")
# open_clip keys that make it build another library's model from a name, or fetch weights
OPEN_CLIP_REFUSED = frozenset({"hf_model_name", "hf_model_pretrained", "timm_model_pretrained"})


def open_clip_rules() -> ConfigRules:
    """open_clip's model config as its own dataclasses define it, less the keys that load other models."""
    from open_clip.model import CLIPTextCfg, CLIPVisionCfg

    sides = frozenset({"image_size", "patch_size"})
    widths = frozenset({"width", "head_width", "embed_dim", "attn_pooler_queries"})
    layers = frozenset({"layers", "heads", "attn_pooler_heads"})
    layer_kwargs = {"act_kwargs": OPEN_CLIP_LAYER_KWARGS, "norm_kwargs": OPEN_CLIP_LAYER_KWARGS}
    vision = ConfigRules(_dataclass_keys(CLIPVisionCfg) - OPEN_CLIP_REFUSED, dict(layer_kwargs), sides, widths, layers)
    text = ConfigRules(
        _dataclass_keys(CLIPTextCfg) - OPEN_CLIP_REFUSED,
        {**layer_kwargs, "tokenizer_kwargs": ConfigRules(OPEN_CLIP_TOKENIZER_KWARGS)},
        frozenset({"context_length"}),
        widths,
        layers,
    )
    top = frozenset({"embed_dim", "vision_cfg", "text_cfg", "quick_gelu", "custom_text", "init_logit_scale"})
    top |= {"init_logit_bias", "nonscalar_logit_scale", "cast_dtype"}
    return ConfigRules(top, {"vision_cfg": vision, "text_cfg": text}, widths=frozenset({"embed_dim"}))


def open_clip_config(path: Path, what: str) -> dict:
    """An open_clip model config file (embed_dim, vision_cfg, text_cfg) every key of which is one
    open_clip's config classes define and that loads nothing else: no `hf_model_name`, a tokenizer
    only by Hub id (ORG/NAME) and `tokenizer_kwargs` limited to the tokenizer's own options, so no
    `trust_remote_code` (or any other loader argument) reaches transformers."""
    where = printable(str(path))
    config = config_json(path, what)
    missing = [key for key in ("embed_dim", "vision_cfg", "text_cfg") if key not in config]
    if missing:
        raise LoaderRefused(
            f"{where}: an open_clip model config holds embed_dim, vision_cfg and text_cfg; "
            f"it lacks {', '.join(missing)}"
        )
    check_config(config, open_clip_rules(), where)
    text = config.get("text_cfg") or {}
    name = text.get("hf_tokenizer_name")
    if name is not None and not (isinstance(name, str) and HUB_ID.match(name)):
        raise LoaderRefused(
            f"{where}: text_cfg.hf_tokenizer_name {shown(name)} is not a Hub id (ORG/NAME); a tokenizer is never "
            "read from a path a config names"
        )
    vision = config.get("vision_cfg") or {}
    estimate = sum(
        estimated_parameters(_int(cfg.get("width"), 768), _layer_count(cfg.get("layers")), vocabulary)
        for cfg, vocabulary in ((vision, 0), (text, _int(text.get("vocab_size"), 49408)))
    )
    refuse_huge_model(estimate, where)
    return config


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _layer_count(value: object) -> int:
    if isinstance(value, list):  # a ResNet tower's blocks per stage
        return sum(_int(item, 0) for item in value)
    return _int(value, 12)


def register_open_clip_config(path: Path, what: str) -> str:
    """Register the checked model config at `path` with open_clip under its stem; the stem."""
    import open_clip

    open_clip_config(path, what)
    with library_call():
        if path.stem not in open_clip.list_models():
            open_clip.add_model_config(path)
    return path.stem


# ---- transformers CLIP folders ----------------------------------------------------------------------

# The keys transformers' PretrainedConfig wrote in the 4.x releases that published CLIP configs carry.
LEGACY_CONFIG_KEYS = frozenset(
    {
        *("add_cross_attention", "bad_words_ids", "begin_suppress_tokens", "chunk_size_feed_forward"),
        *("cross_attention_hidden_size", "decoder_start_token_id", "diversity_penalty", "do_sample"),
        *("early_stopping", "encoder_no_repeat_ngram_size", "exponential_decay_length_penalty"),
        *("finetuning_task", "forced_bos_token_id", "forced_eos_token_id", "is_decoder", "is_encoder_decoder"),
        *("length_penalty", "max_length", "min_length", "no_repeat_ngram_size", "num_beam_groups", "num_beams"),
        *("num_return_sequences", "output_scores", "prefix", "pruned_heads", "remove_invalid_values"),
        *("repetition_penalty", "return_dict_in_generate", "sep_token_id", "suppress_tokens"),
        *("task_specific_params", "temperature", "tf_legacy_loss", "tie_encoder_decoder", "tie_word_embeddings"),
        *("top_k", "top_p", "torch_dtype", "dtype", "torchscript", "typical_p", "use_bfloat16", "dropout"),
        *("gradient_checkpointing", "text_config_dict", "vision_config_dict", "transformers_version"),
        *("architectures", "model_type", "_name_or_path", "id2label", "label2id", "problem_type"),
        *("output_attentions", "output_hidden_states", "return_dict", "attention_dropout", "initializer_factor"),
    }
)
HF_SIDES = frozenset({"image_size", "patch_size", "shortest_edge", "longest_edge", "height", "width", "size"})
HF_SIDES |= {"crop_size"}
HF_WIDTHS = frozenset({"hidden_size", "intermediate_size", "projection_dim", "num_channels"})
HF_LAYERS = frozenset({"num_hidden_layers", "num_attention_heads"})
CLIP_TOKENIZERS = frozenset({"CLIPTokenizer", "CLIPTokenizerFast"})
TOKENIZER_CONFIG_KEYS = frozenset(
    {
        *("add_prefix_space", "added_tokens_decoder", "backend", "bos_token", "clean_up_tokenization_spaces"),
        *("do_lower_case", "eos_token", "errors", "extra_special_tokens", "model_max_length", "pad_token"),
        *("processor_class", "tokenizer_class", "unk_token", "name_or_path", "special_tokens_map_file"),
        *("model_input_names", "padding_side", "truncation_side", "split_special_tokens"),
    }
)
IMAGE_PROCESSOR_TYPES = frozenset({"CLIPImageProcessor", "CLIPImageProcessorFast", "CLIPFeatureExtractor"})


def hf_clip_rules() -> dict[str, ConfigRules]:
    """The config files of a transformers CLIP folder and what each may hold, from transformers' own classes."""
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPTextConfig, CLIPVisionConfig

    with library_call():
        text_keys = frozenset(CLIPTextConfig().to_dict()) | LEGACY_CONFIG_KEYS
        vision_keys = frozenset(CLIPVisionConfig().to_dict()) | LEGACY_CONFIG_KEYS
        top_keys = frozenset(CLIPConfig().to_dict()) | LEGACY_CONFIG_KEYS
        processor_keys = frozenset(CLIPImageProcessor().to_dict())
    sizes = {"sides": HF_SIDES, "widths": HF_WIDTHS, "layers": HF_LAYERS}
    model = ConfigRules(
        top_keys,
        {
            "text_config": ConfigRules(text_keys, **sizes),
            "vision_config": ConfigRules(vision_keys, **sizes),
            "text_config_dict": ConfigRules(text_keys, **sizes),
            "vision_config_dict": ConfigRules(vision_keys, **sizes),
        },
        values={"model_type": frozenset({"clip"})},
        **sizes,
    )
    processor = ConfigRules(
        processor_keys | {"image_processor_type", "feature_extractor_type", "processor_class"},
        values={
            "image_processor_type": IMAGE_PROCESSOR_TYPES,
            "feature_extractor_type": IMAGE_PROCESSOR_TYPES,
            "processor_class": frozenset({"CLIPProcessor"}),
        },
        **sizes,
    )
    tokenizer = ConfigRules(
        TOKENIZER_CONFIG_KEYS,
        objects={"added_tokens_decoder": ConfigRules(frozenset(), objects={})},
        values={"tokenizer_class": CLIP_TOKENIZERS, "processor_class": frozenset({"CLIPProcessor"})},
    )
    return {
        "config.json": model,
        "preprocessor_config.json": processor,
        "tokenizer_config.json": tokenizer,
        "special_tokens_map.json": ConfigRules(frozenset({"bos_token", "eos_token", "pad_token", "unk_token"})),
        "processor_config.json": ConfigRules(
            frozenset({"processor_class"}), values={"processor_class": frozenset({"CLIPProcessor"})}
        ),
    }


HF_CLIP_VOCABULARIES = ("tokenizer.json", "vocab.json", "merges.txt")


def check_hf_clip_folder(folder: Path, what: str, cache_entry: Path | None = None) -> None:
    """A transformers CLIP folder before transformers reads it: plain (links only inside its Hub cache
    entry), no code, every config file bounded and holding only the keys CLIP's classes take (so no
    `auto_map`: transformers would otherwise ask on the terminal whether to run the folder's code),
    every size bounded, every safetensors header bounded."""
    model_folder(folder, what, cache_entry)
    rules = hf_clip_rules()
    for path in sorted(Path(folder).iterdir()):
        where = f"{what}: {printable(path.name)}"
        if path.name in rules:
            config = config_json(path, where)
            if path.name == "tokenizer_config.json":
                config = {k: v for k, v in config.items() if k != "added_tokens_decoder"} | (
                    {"added_tokens_decoder": {}} if "added_tokens_decoder" in config else {}
                )
                _check_added_tokens(path, where)
            check_config(config, rules[path.name], where)
        elif path.name in HF_CLIP_VOCABULARIES:
            bounded_file(path, where, MAX_VOCABULARY_BYTES)
        elif path.suffix == ".safetensors":
            safetensors_header(path, where)
        elif path.suffix == ".json" and path.name != "model.safetensors.index.json":
            raise LoaderRefused(f"{where}: a CLIP folder holds no such config file; remove it")
    config = (
        config_json(Path(folder) / "config.json", f"{what}: config.json")
        if (Path(folder) / "config.json").is_file()
        else {}
    )
    estimate = 0
    for tower in ("text_config", "vision_config"):
        cfg = config.get(tower) or {}
        estimate += estimated_parameters(
            _int(cfg.get("hidden_size"), 768), _int(cfg.get("num_hidden_layers"), 12), _int(cfg.get("vocab_size"), 0)
        )
    refuse_huge_model(estimate, what)


def _check_added_tokens(path: Path, where: str) -> None:
    """tokenizer_config.json's added_tokens_decoder: token ids to plain token descriptions."""
    tokens = config_json(path, where).get("added_tokens_decoder") or {}
    if not isinstance(tokens, dict) or len(tokens) > MAX_COUNT:
        raise LoaderRefused(f"{where}: added_tokens_decoder is not a bounded object of tokens")
    allowed = frozenset({"content", "lstrip", "normalized", "rstrip", "single_word", "special", "__type"})
    for token_id, token in tokens.items():
        if not isinstance(token, dict):
            raise LoaderRefused(f"{where}: added_tokens_decoder.{shown(token_id, quote=False)} is not an object")
        check_config(token, ConfigRules(allowed), where, f"added_tokens_decoder.{token_id}")
