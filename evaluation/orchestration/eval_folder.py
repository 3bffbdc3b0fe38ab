"""Where one model's evaluation lives inside `hsi eval --out`: the folder's name, which carries what
changes the numbers, and every write into it, through the output folder's `OwnedFolder` (so nothing
goes through a link, no user's file is replaced, and a re-run removes only its own leftovers)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from builder.core.owned import FolderView, OwnedFolder, owns_recorded
from evaluation.model_formats.models import (
    MODEL_FILE_PREFIXES,
    LoadedModel,
    ModelOptions,
    Preprocessing,
    is_zero_shot_spec,
    loaded_spec,
    model_slug,
)
from evaluation.zero_shot.record import record_set_names
from evaluation.zero_shot.templates import DEFAULT_SETS

EVAL_KIND = "eval"  # the OwnedFolder kind of `hsi eval --out`


def _number(value: float) -> str:
    return f"{value:g}"


def _numbers(values: tuple[float, ...]) -> str:
    return _number(values[0]) if len(set(values)) == 1 else ",".join(_number(v) for v in values)


def _preprocessing_parts(loaded: LoadedModel) -> list[str]:
    """The preprocessing that departs from the model's own default, as name parts. A TorchScript,
    torch.export or ONNX file carries no data config: its flags are its preprocessing, so only a
    crop counts there."""
    pre = loaded.preprocessing
    parts = [f"crop{_number(pre.crop_pct)}"] if pre.crop_pct is not None else []
    default: Preprocessing | None = loaded.default_preprocessing
    if default is None or loaded.spec.startswith(MODEL_FILE_PREFIXES):
        return parts
    if pre.input_size != default.input_size:
        h, w = pre.input_size
        parts.append(f"size{h}" if h == w else f"size{h}x{w}")
    if pre.interpolation != default.interpolation:
        parts.append(pre.interpolation)
    if pre.mean != default.mean:
        parts.append(f"mean{_numbers(pre.mean)}")
    if pre.std != default.std:
        parts.append(f"std{_numbers(pre.std)}")
    return parts


def _prompt_parts(set_names: tuple[str, ...] | None) -> list[str]:
    """A zero-shot model's prompt sets when they are not the default ones (openai, simple, no-scale)."""
    if not set_names or tuple(set_names) == tuple(DEFAULT_SETS):
        return []
    joined = "_".join(set_names)
    if len(joined) > 60:  # many or long names: their digest keeps the folder name short
        joined = hashlib.sha256("\0".join(set_names).encode("utf-8")).hexdigest()[:12]
    return [model_slug(f"prompts-{joined}")]


def folder_name(loaded: LoadedModel, label_space: str = "imagenet", limit: int | None = None) -> str:
    """`<model>` for a default run; `<model>-crop0.875`, `<model>-subset`, `<model>-limit240`,
    `<model>-prompts-simple`... when the preprocessing, the label space, `--limit` or a zero-shot
    model's prompt sets differ, so runs that give other numbers never share a folder (nor replace
    each other's report and leaderboard row)."""
    sets = record_set_names(loaded.zero_shot) if loaded.zero_shot else None
    return _joined([model_slug(loaded.spec), *_preprocessing_parts(loaded), *_prompt_parts(sets)], label_space, limit)


def spec_folder_name(spec: str, options: ModelOptions, label_space: str = "imagenet", limit: int | None = None) -> str:
    """The folder of a model that could not be loaded (where its failed.json goes): `folder_name`'s,
    as far as the spec and options tell without the model (a crop, the label space, `--limit`; not
    the parts that compare flags with the model's own data config)."""
    crop = [f"crop{_number(options.crop_pct)}"] if options.crop_pct is not None else []
    sets = tuple(name for name, _ in options.template_sets) if options.template_sets else None
    prompts = _prompt_parts(sets) if is_zero_shot_spec(spec) else []
    return _joined([model_slug(loaded_spec(spec, options)), *crop, *prompts], label_space, limit)


MAX_SCORED_NAME = 100  # a folder named after an entry's name (up to 300 characters) stays a short name


def scored_folder_name(file: Path, entry_name: str | None = None) -> str:
    """The model folder of predictions scored from `file` (`hsi eval --predictions`): named after the
    entry's name when one is given, else after the file's stem, by the rule that names a spec's
    folder, kept to ASCII and MAX_SCORED_NAME characters (a name every reader of the folder takes)."""
    slug = model_slug(entry_name if entry_name is not None else Path(file).stem)
    ascii_only = "".join(c if c.isascii() else "_" for c in slug)[:MAX_SCORED_NAME]
    return ascii_only.strip("._") or "predictions"


def _joined(parts: list[str], label_space: str, limit: int | None) -> str:
    if label_space != "imagenet":
        parts.append(label_space)
    if limit is not None:
        parts.append(f"limit{limit}")
    return "-".join(parts)


@contextmanager
def claimed(root: Path, kind: str = EVAL_KIND) -> Iterator[OwnedFolder]:
    """`OwnedFolder(root, kind)` held for the block; when the block fails before writing anything
    into a folder this run created, the empty folders are removed again (a refusal leaves no trace)."""
    created = not (Path(root).exists() or Path(root).is_symlink())
    try:
        with OwnedFolder(root, kind) as owned:
            yield owned
    except BaseException:
        if created:
            _remove_empty(Path(root))
        raise


def _remove_empty(root: Path) -> None:
    if root.is_symlink() or not root.is_dir():
        return
    for folder in sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
        with suppress(OSError):
            folder.rmdir()
    with suppress(OSError):
        root.rmdir()


class ModelFolder(FolderView):
    """The files of one evaluation: `name/...` inside an OwnedFolder (`name` "" for its root)."""

    def __init__(self, owned: OwnedFolder, name: str = "") -> None:
        super().__init__(owned, prefix=name)

    @property
    def name(self) -> str:
        return self.prefix

    def check_writable(self, *files: str) -> None:
        """As FolderView's, but creating nothing for a model folder that does not exist yet."""
        if self.name and not (self.path.exists() or self.path.is_symlink()):
            return
        super().check_writable(*files)

    def keep_only(self, files: set[str]) -> list[str]:
        """Remove this folder's recorded files outside `files` (an earlier run's leftovers: a
        `clean_accuracy.csv` the new run did not produce, a plot the new metrics do not allow)."""
        # a report written at the root of a folder (`--from ... --out X`) tidies only its plots
        prefix = f"{self.name}/" if self.name else "plots/"
        keep = {self.relative(f) for f in files}
        removed = [n for n in self.owner().listed(prefix) if n not in keep]
        for name in removed:
            self.owner().remove(name)
        return removed


@dataclass(frozen=True)
class FolderRecord:
    """What a worker process knows of the output folder the parent holds: its root, and the files the
    parent had recorded (name -> sha256) when it handed the work out. Read-only: a worker writes
    nothing, it only decides what its model needs (skip, add passes, evaluate)."""

    root: Path
    files: Mapping[str, str]

    @classmethod
    def of(cls, owned: OwnedFolder) -> FolderRecord:
        return cls(owned.root, dict(owned.files))

    def owns(self, relative: str) -> bool:
        """As `OwnedFolder.owns`: recorded, a plain file, its bytes unchanged since."""
        return owns_recorded(self.root, self.files, relative)


class PlainFolder:
    """The same writes into a folder its caller owns and checks (e.g. a training report's folder)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @contextmanager
    def writing(self, file: str) -> Iterator[Path]:
        target = self.path / file
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp{target.suffix}")
        try:
            yield tmp
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)

    def write_text(self, file: str, text: str) -> Path:
        with self.writing(file) as tmp:
            tmp.write_text(text, "utf-8")
        return self.path / file

    def keep_only(self, files: set[str]) -> list[str]:
        return []
