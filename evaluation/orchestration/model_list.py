"""The models of `hsi eval` and `hsi probe`: one `--model SPEC`, or `--models` as comma-separated
specs or a YAML file listing specs and mappings {model, checkpoint, arch, ...} (and the description
of each model's leaderboard entry: entry_name, architecture, training_data, paper).

A `models.yaml` is someone else's file as often as one's own: it is read through the untrusted layer,
and each entry is checked against the keys a model takes, so a typo (`chekpoint:`) or a value of the
wrong kind (`input_size: abc`) is one line naming the file, the entry and the field, before any model
is loaded. Paths in an entry (checkpoint, classes, a `ts:`, `ep:` or `onnx:` file) are relative to
the YAML's folder.

An entry's `trusted_sha256` (one sha256 or a list) trusts the TorchScript files with those digests to
run their code, as `--trust-file` does: it is the trust of whoever wrote the listing, so read a
stranger's models.yaml before running it.
"""

from __future__ import annotations

import re
from pathlib import Path

from builder.backends.code_trust import SHA256
from builder.core.errors import UsageError
from builder.core.untrusted import Fields, UntrustedInput, check_number, describe, read_yaml
from evaluation.model_formats.models import MAX_INPUT_SIDE, MODEL_FILE_PREFIXES
from evaluation.ranking.entries import check_entry_url, check_paper, check_text

INTERPOLATIONS = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")
ENTRY_KEYS = (
    "model",
    "checkpoint",
    "arch",
    "num_classes",
    "classes",
    "mean",
    "std",
    "input_size",
    "interpolation",
    "crop_pct",
    "trusted_sha256",  # the TorchScript files trusted to run their code (--trust-file)
    # the model's leaderboard entry (evaluation.ranking.entries): what `--entry-name`, `--architecture`,
    # `--training-data`, `--paper` and `--entry-url` give one model
    "entry_name",
    "architecture",
    "training_data",
    "paper",
    "entry_url",
)
SIZE = re.compile(r"\d+(,\d+){0,2}")  # S, H,W or 3,H,W, as --input-size takes it
WHAT = "--models list"
# A listing of a whole zoo is a few KB: these bound a stranger's file before it is parsed, and the
# models it may name before any is checked.
MAX_LIST_BYTES = 1 << 20
MAX_MODELS = 1000


def model_entries(model: str | None, models: str | None, one_model_flags: bool = False) -> list[dict]:
    """Each model to evaluate as a mapping of its spec and per-model options. `one_model_flags`:
    --checkpoint, --arch or --classes was given, which only a single model can take."""
    if bool(model) == bool(models):
        raise UsageError("pass exactly one of --model SPEC or --models LIST")
    if model:
        return [{"model": model}]
    assert models is not None
    if Path(models).suffix in (".yaml", ".yml"):
        return read_model_list(Path(models))
    specs = [spec.strip() for spec in models.split(",") if spec.strip()]
    if len(specs) > 1 and one_model_flags:
        raise UsageError(
            "--checkpoint, --arch and --classes apply to one model; give several models their own in a --models YAML "
            "file"
        )
    return [{"model": spec} for spec in specs]


def read_model_list(path: Path) -> list[dict]:
    """The entries of a models.yaml: a non-empty list of specs or mappings, every field checked."""
    listed = read_yaml(path, WHAT, max_bytes=MAX_LIST_BYTES)
    if not isinstance(listed, list) or not listed:
        raise UntrustedInput(
            f"{path}: {WHAT} must hold a non-empty YAML list of specs or mappings, got {describe(listed)}"
        )
    if len(listed) > MAX_MODELS:
        raise UntrustedInput(f"{path}: {WHAT} names {len(listed)} models, more than {MAX_MODELS}; split it")
    return [_entry(item, path, n) for n, item in enumerate(listed)]


def _entry(item: object, path: Path, index: int) -> dict:
    if isinstance(item, str):
        item = {"model": item}
    if not isinstance(item, dict):
        raise UntrustedInput(
            f"{path}: [{index}]: expected a model spec or a mapping {{model, ...}}, got {describe(item)}"
        )
    fields = Fields(item, path, f"[{index}]").only(ENTRY_KEYS)
    entry: dict = {"model": fields.string("model")}
    if not entry["model"].strip():
        raise fields.error("the model spec is empty", "model")
    for key in ("checkpoint", "classes", "arch"):
        if fields.has(key):
            entry[key] = fields.string(key)
            if not entry[key].strip():
                raise fields.error("is empty", key)
    for key in ("checkpoint", "classes"):
        if key in entry:
            entry[key] = str(path.parent / entry[key])
    prefix = next((p for p in MODEL_FILE_PREFIXES if entry["model"].startswith(p)), None)
    if prefix and not Path(entry["model"][len(prefix) :]).is_absolute():  # a file beside the listing
        entry["model"] = prefix + str(path.parent / entry["model"][len(prefix) :])
    if fields.has("num_classes"):
        entry["num_classes"] = fields.integer("num_classes", low=1)
    for key in ("mean", "std"):
        if fields.has(key):
            entry[key] = _three_numbers(fields, key)
    if fields.has("input_size"):
        entry["input_size"] = _input_size(fields)
    if fields.has("interpolation"):
        entry["interpolation"] = fields.string("interpolation", choices=INTERPOLATIONS)
    if fields.has("crop_pct"):
        entry["crop_pct"] = fields.number("crop_pct", low=0, high=1)
        if entry["crop_pct"] == 0:
            raise fields.error("must be in (0, 1], got 0", "crop_pct")
    if fields.has("trusted_sha256"):
        entry["trusted_sha256"] = _sha256s(fields)
    for key in ("entry_name", "architecture", "training_data", "paper", "entry_url"):
        if fields.has(key):
            check = {"paper": check_paper, "entry_url": check_entry_url}.get(key, check_text)
            entry[key] = check(fields.raw(key), lambda problem, key=key: fields.error(problem, key))
    # a key given as null stays null: it overrides the command line's flag, as it always did
    entry.update({key: None for key, value in item.items() if value is None and key != "model"})
    return entry


def _sha256s(fields: Fields) -> tuple[str, ...]:
    """trusted_sha256: one sha256 or a list of them, each 64 hex digits."""
    value = fields.raw("trusted_sha256")
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, str) and SHA256.match(v.strip().lower()) for v in values):
        raise fields.error(
            f"takes the sha256 of a file (64 hex digits) or a list of them, got {describe(value)}", "trusted_sha256"
        )
    return tuple(v.strip().lower() for v in values)


def _three_numbers(fields: Fields, key: str) -> str:
    """mean/std as --mean takes it: one number, 3 numbers, or their comma-separated text."""
    value = fields.raw(key)
    values = value if isinstance(value, list) else str(value).split(",") if isinstance(value, str) else [value]
    if len(values) not in (1, 3):
        raise fields.error(f"takes one number or 3, got {describe(value)}", key)
    numbers = []
    for item in values:
        if isinstance(item, str):
            try:
                item = float(item)
            except ValueError:
                raise fields.error(f"takes numbers, got {describe(value)}", key) from None
        numbers.append(check_number(item, lambda problem: fields.error(problem, key)))
    return ",".join(str(number) for number in numbers)


def _input_size(fields: Fields) -> int | str:
    """input_size as --input-size takes it: S, or "H,W" / "3,H,W", every side at least 1."""
    value = fields.raw("input_size")
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str) and SIZE.fullmatch(value.replace(" ", "")):
        text = value.replace(" ", "")
    else:
        raise fields.error(f"takes S, H,W or 3,H,W (whole numbers), got {describe(value)}", "input_size")
    sides = [int(side) for side in text.split(",")]
    if min(sides) < 1 or max(sides) > MAX_INPUT_SIDE:
        raise fields.error(f"every side must lie in 1..{MAX_INPUT_SIDE}, got {describe(value)}", "input_size")
    return value if isinstance(value, int) else text
