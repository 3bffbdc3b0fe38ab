"""The one reading layer for files that may come from a stranger: a checkpoint, a predictions table,
an `eval.json` in a results folder, a `models.yaml`, a release's `_release.json`.

Every such file is read here, never with a bare `json.loads`, `yaml.safe_load`, `pq.read_table` or
`torch.load`: a link, a folder or a missing file is refused before it is opened, a syntax error is
one line naming the file, and each format's one `StrictModel` (shared by its writer and its readers)
checks the object inside, so a wrong type or an out-of-range value is one line naming the file and the
field (`eval.json: metrics.samples: expected an integer, got 'abc'`). Nothing is unpickled: `load_torch`
passes `weights_only=True`, so a crafted checkpoint cannot run code; training state is tensors and plain types.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from builder.core.errors import InputError, printable, shown


class UntrustedInput(InputError, ValueError):
    """A file a command reads that is not what it should be (link, syntax, schema, values)."""


def describe(value: object) -> str:
    """A short, one-line picture of a value for an error message."""
    kinds = {dict: "an object", list: "a list", type(None): "null", bool: "a boolean"}
    if type(value) in kinds and not isinstance(value, bool):
        return kinds[type(value)]
    return shown(value, limit=40)


def _where(path: Path | str) -> str:
    return printable(str(path))


def regular_file(path: Path, what: str) -> Path:
    """`path`, refused unless it is a plain file (not a link, a folder, a FIFO, or missing)."""
    path = Path(path)
    if path.is_symlink():
        raise UntrustedInput(f"{_where(path)}: {what} is a link; links are never followed: pass the file itself")
    if not path.exists():
        raise UntrustedInput(f"{_where(path)}: {what} not found")
    if not path.is_file():
        raise UntrustedInput(f"{_where(path)}: {what} is not a regular file")
    return path


def read_json(path: Path, what: str = "JSON file") -> Any:
    """The parsed JSON of a plain file, or one line naming the file and where it breaks."""
    path = regular_file(path, what)
    try:
        return json.loads(path.read_bytes().decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError:
        raise UntrustedInput(f"{_where(path)}: {what} is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise UntrustedInput(
            f"{_where(path)}: {what} is not valid JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from None
    except RecursionError:
        raise UntrustedInput(f"{_where(path)}: {what} nests too deeply to be one of ours") from None


def _refuse_constant(name: str) -> float:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


def read_yaml(path: Path, what: str = "YAML file", max_bytes: int | None = None) -> Any:
    """The parsed YAML (safe loader) of a plain file, or one line naming the file and the line. A key
    given twice in one mapping is refused (YAML would keep the last silently); a file past
    `max_bytes` is refused before it is read."""
    import yaml

    path = regular_file(path, what)
    size = path.stat().st_size
    if max_bytes is not None and size > max_bytes:
        raise UntrustedInput(f"{_where(path)}: {what} is {size} bytes, more than {max_bytes}; none needs that many")
    try:
        return yaml.load(path.read_bytes().decode("utf-8"), Loader=_unique_keys_loader())
    except UnicodeDecodeError:
        raise UntrustedInput(f"{_where(path)}: {what} is not UTF-8 text") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise UntrustedInput(f"{_where(path)}: {what} is not valid YAML ({problem}{at})") from None
    except RecursionError:
        raise UntrustedInput(f"{_where(path)}: {what} nests too deeply") from None


def _unique_keys_loader() -> Any:
    """yaml's SafeLoader, refusing a mapping that names a key twice (one line, naming the key and its line)."""
    import yaml

    class UniqueKeysLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    repeated = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the safe loader's own error says so
                    break
                if repeated:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {shown(key)} is given twice", key_node.start_mark
                    )
            return super().construct_mapping(node, deep=deep)

    return UniqueKeysLoader


def read_parquet(path: Path, what: str = "parquet table"):
    """A pyarrow Table from a plain file, or one line saying the file is not a readable parquet table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = regular_file(path, what)
    try:
        return pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError, IndexError, KeyError, TypeError) as error:
        reason = printable(str(error).splitlines()[0] if str(error) else type(error).__name__)
        raise UntrustedInput(f"{_where(path)}: {what} is not a readable parquet file ({reason})") from None


def load_torch(path: Path, what: str = "checkpoint", hint: str = "") -> Any:
    """`torch.load(weights_only=True)` of a plain file: tensors and plain types only, never code.

    A truncated or foreign file, or one that needs unpickling beyond tensors, is one line; `hint`
    says what to do (e.g. which flag names the file)."""
    import pickle

    import torch

    path = regular_file(path, what)
    tail = f"; {hint}" if hint else ""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        # torch's text around the reason advises turning weights_only off: only the reason is kept
        reason = _unpickler_reason([line.strip() for line in str(error).splitlines() if line.strip()])
        if reason.startswith("Unsupported operand") or reason == "unreadable":
            raise UntrustedInput(
                f"{_where(path)}: {what} is truncated or not a torch file ({printable(reason)[:160]}){tail}"
            ) from None
        holds = f"{what} holds more than tensors and plain values, and is never unpickled"
        raise UntrustedInput(f"{_where(path)}: {holds} ({printable(reason)[:160]}){tail}") from None
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, AttributeError, IndexError) as error:
        first = printable(str(error).splitlines()[0])[:160] if str(error) else type(error).__name__
        raise UntrustedInput(f"{_where(path)}: {what} is truncated or not a torch file ({first}){tail}") from None


def _unpickler_reason(lines: list[str]) -> str:
    """Why torch's restricted unpickler refused a file: the global it names, else the text after
    "WeightsUnpickler error:", else the first line that is not torch's advice."""
    named = [
        line.split("error:", 1)[-1].split(" was not an allowed global")[0].strip()
        for line in lines
        if "Unsupported global" in line
    ]
    if named:
        return named[0]
    for n, line in enumerate(lines):
        if "WeightsUnpickler error:" in line:
            after = line.split("WeightsUnpickler error:", 1)[1].strip()
            return after or (lines[n + 1] if n + 1 < len(lines) else "unreadable")
    advice = ("Weights only load failed", "Please file an issue", "Check the documentation")
    return next((line for line in lines if not line.startswith(advice)), "unreadable")


def load_torch_bytes(data: bytes) -> Any:
    """`torch.load(weights_only=True)` of bytes already read (a record inside an archive): tensors and
    plain types only; the caller says in one line what its errors mean."""
    import io

    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


class StrictModel(BaseModel):
    """The base of every file format's model: strict types (no "1" for 1), no unknown keys, no inf or
    nan, immutable. Values come from `read_json`/`read_yaml`, so a tuple-shaped field is a `list` (a
    strict tuple refuses a JSON array); a float field takes an int, so a writer that must keep `1` as
    `1` types it `int | float`."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


Model = TypeVar("Model", bound=BaseModel)


def parse_model(model: type[Model], data: object, source: Path | str, where: str = "") -> Model:
    """`data` checked against `model`, or one line naming the file and the first wrong field."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise UntrustedInput(_first_problem(error, _where(source), where)) from None


def read_model(model: type[Model], path: Path, what: str = "JSON file", max_bytes: int | None = None) -> Model:
    """A JSON (`.json`) or YAML (any other suffix) file read through the link, size and syntax refusals,
    then checked against `model`."""
    path = Path(path)
    if path.suffix == ".json":
        if max_bytes is not None:
            _refuse_larger(regular_file(path, what), what, max_bytes)
        data = read_json(path, what)
    else:
        data = read_yaml(path, what, max_bytes=max_bytes)
    return parse_model(model, data, path)


def _refuse_larger(path: Path, what: str, max_bytes: int) -> None:
    size = path.stat().st_size
    if size > max_bytes:
        raise UntrustedInput(f"{_where(path)}: {what} is {size} bytes, more than {max_bytes}; none needs that many")


_PROBLEMS = {
    "missing": "missing",
    "extra_forbidden": "unknown key",
    "int_type": "expected an integer",
    "float_type": "expected a number",
    "string_type": "expected a string",
    "bool_type": "expected true or false",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "finite_number": "expected a finite number",
}


def _first_problem(error: ValidationError, source: str, where: str) -> str:
    """pydantic's first error as `file: dotted.field[n]: problem, got value (and k more)`."""
    problems = error.errors(include_url=False)
    first = problems[0]
    field = where
    for part in first["loc"]:
        field += f"[{part}]" if isinstance(part, int) else f"{'.' if field else ''}{part}"
    kind = first["type"]
    problem = _PROBLEMS.get(kind) or printable(first["msg"][0].lower() + first["msg"][1:])
    if kind not in ("missing", "extra_forbidden") and "input" in first:
        problem += f", got {describe(first['input'])}"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{source}: {field + ': ' if field else ''}{problem}{more}"


_NO_DEFAULT = object()


class Fields:
    """Checked access to one object (a JSON or YAML mapping) read from an untrusted file.

    Each accessor names the file and the dotted field in its error, so a reader states its schema as
    a sequence of reads: `meta.integer("classes", low=1)`, `meta.object("model").string("spec")`.
    """

    def __init__(self, data: object, source: Path | str, where: str = "") -> None:
        self.source = _where(source)
        self.where = where
        if not isinstance(data, Mapping):
            raise self.error(f"expected an object, got {describe(data)}")
        self.data = data

    def error(self, problem: str, key: str | None = None) -> UntrustedInput:
        field = ".".join(part for part in (self.where, key) if part)
        return UntrustedInput(f"{self.source}: {field + ': ' if field else ''}{problem}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def raw(self, key: str, default: Any = _NO_DEFAULT) -> Any:
        if key not in self.data or (self.data[key] is None and default is not _NO_DEFAULT):
            if default is _NO_DEFAULT:
                raise self.error("missing", key)
            return default
        return self.data[key]

    def only(self, allowed: Iterable[str]) -> Fields:
        """Refuse keys outside `allowed` (a typo is not silently ignored)."""
        unknown = sorted(str(k) for k in self.data if k not in set(allowed))
        if unknown:
            raise self.error(f"unknown key {describe(unknown[0])} (known: {', '.join(sorted(allowed))})")
        return self

    def object(self, key: str, default: Any = _NO_DEFAULT) -> Fields:
        value = self.raw(key, {} if default is not _NO_DEFAULT else _NO_DEFAULT)
        return Fields(value, self.source, ".".join(p for p in (self.where, key) if p))

    def objects(self, key: str, default: Any = _NO_DEFAULT) -> list[Fields]:
        prefix = ".".join(p for p in (self.where, key) if p)
        return [Fields(item, self.source, f"{prefix}[{n}]") for n, item in enumerate(self.list(key, default))]

    def list(self, key: str, default: Any = _NO_DEFAULT) -> list:
        value = self.raw(key, default)
        if not isinstance(value, list):
            raise self.error(f"expected a list, got {describe(value)}", key)
        return value

    def string(
        self,
        key: str,
        default: Any = _NO_DEFAULT,
        *,
        pattern: re.Pattern | None = None,
        choices: Iterable[str] | None = None,
    ) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _NO_DEFAULT:
            return value
        return check_string(value, lambda problem: self.error(problem, key), pattern=pattern, choices=choices)

    def integer(self, key: str, default: Any = _NO_DEFAULT, *, low: int | None = None, high: int | None = None) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _NO_DEFAULT:
            return value
        return check_integer(value, lambda problem: self.error(problem, key), low=low, high=high)

    def number(
        self, key: str, default: Any = _NO_DEFAULT, *, low: float | None = None, high: float | None = None
    ) -> Any:
        value = self.raw(key, default)
        if value is default and default is not _NO_DEFAULT:
            return value
        return check_number(value, lambda problem: self.error(problem, key), low=low, high=high)

    def boolean(self, key: str, default: Any = _NO_DEFAULT) -> Any:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise self.error(f"expected true or false, got {describe(value)}", key)
        return value


def check_string(value: object, error, *, pattern: re.Pattern | None = None, choices: Iterable[str] | None = None):
    if not isinstance(value, str):
        raise error(f"expected a string, got {describe(value)}")
    if choices is not None and value not in set(choices):
        raise error(f"{describe(value)} is not one of {', '.join(sorted(choices))}")
    if pattern is not None and not pattern.fullmatch(value):
        raise error(f"{describe(value)} is not of the expected form")
    return value


def check_integer(value: object, error, *, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"expected an integer, got {describe(value)}")
    _check_range(value, error, low, high)
    return value


def check_number(value: object, error, *, low: float | None = None, high: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"expected a number, got {describe(value)}")
    if not math.isfinite(value):
        raise error(f"expected a finite number, got {describe(value)}")
    _check_range(value, error, low, high)
    return value


def _check_range(value, error, low, high) -> None:
    if low is not None and value < low:
        raise error(f"{value} is below the smallest allowed value {low}")
    if high is not None and value > high:
        raise error(f"{value} is above the largest allowed value {high}")
