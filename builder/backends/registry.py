"""One registry for every model the toolkit runs: maskers, inpainters and detectors (extract and
validation), the Grad-CAM++ CAM and the Stable Diffusion generator (SCGS), and the classifiers of
`hsi eval` (registered by `evaluation.model_formats.models`, whose model types they build).

Adding a model is one module in this package and one registration, as with timm's `register_model`:

    @dataclass(frozen=True)
    class MyConfig:
        checkpoint: str | None = from_setting("my_checkpoint")
        device: str = "auto"

    @register_backend("masker", "mine", config_class=MyConfig, requires=("torch",))
    def make_my_masker(config: MyConfig) -> Masker: ...

The modules of this package are imported on the first lookup, so every registration is known; they
import torch, segment-anything or transformers only inside their functions, so looking a backend up
(and `hsi extract --masker box`) never imports torch. `requires` names the packages a factory needs:
when one is missing, `make_backend` says which pip extra installs it instead of failing mid-run.

Each entry has its own small frozen config. `backend_config` builds it from flat settings (an
`ExtractConfig`, the command line's arguments): a field reads the setting its metadata names
(`from_setting`), else the setting of its own name; a setting that is absent or None keeps the
field's default.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from builder.core.errors import HsiError

KINDS = ("masker", "inpainter", "detector", "classifier", "cam", "generator")
DISTRIBUTION = "hard-spurious-imagenet"
SETTING = "setting"  # the field metadata key naming the flat setting a config field is read from


class BackendUnavailable(HsiError):
    """A requested backend cannot be used (unknown name, missing extra, missing or unusable
    checkpoint); never a fallback to another one."""


@dataclass(frozen=True)
class BackendEntry:
    kind: str
    name: str
    factory: Callable[[Any], Any]
    config_class: type
    requires: tuple[str, ...] = ()
    extra: str = "models"

    def missing_package(self) -> str | None:
        return next((package for package in self.requires if importlib.util.find_spec(package) is None), None)


_entries: dict[tuple[str, str], BackendEntry] = {}
_discovered = False


def from_setting(setting: str, default: Any = None) -> Any:
    """A config field read from the flat setting `setting` (e.g. SamConfig.model from `sam_model`)."""
    return dataclasses.field(default=default, metadata={SETTING: setting})


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown backend kind {kind!r}; the kinds are: {', '.join(KINDS)}")


def _qualified_name(function: Callable) -> str:
    return f"{function.__module__}.{function.__qualname__}"


def register_backend(
    kind: str, name: str, *, config_class: type, requires: tuple[str, ...] = (), extra: str = "models"
) -> Callable:
    """Decorator: register `factory(config) -> backend` as the `kind` named `name`."""
    _check_kind(kind)
    if not (dataclasses.is_dataclass(config_class) and config_class.__dataclass_params__.frozen):
        raise TypeError(f"the config of {kind} {name!r} must be a frozen dataclass, got {config_class!r}")

    def register(factory: Callable) -> Callable:
        known = _entries.get((kind, name))
        # the same function registered again (a module imported twice) is harmless; another is a clash
        if known and _qualified_name(known.factory) != _qualified_name(factory):
            raise ValueError(
                f"the {kind} {name!r} is registered twice: by {_qualified_name(known.factory)} "
                f"and by {_qualified_name(factory)}"
            )
        _entries[(kind, name)] = BackendEntry(kind, name, factory, config_class, tuple(requires), extra)
        return factory

    return register


def _discover() -> None:
    """Import every module of this package once, so that their registrations run."""
    global _discovered
    if _discovered:
        return
    package = importlib.import_module("builder.backends")
    for module in pkgutil.iter_modules(package.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"builder.backends.{module.name}")
    _discovered = True


def available(kind: str) -> list[str]:
    """The registered names of `kind`, sorted."""
    _check_kind(kind)
    _discover()
    return sorted(name for entry_kind, name in _entries if entry_kind == kind)


def entry(kind: str, name: str) -> BackendEntry:
    _check_kind(kind)
    _discover()
    if (kind, name) not in _entries:
        raise BackendUnavailable(f"unknown {kind} {name!r}; choose one of: {', '.join(available(kind))}")
    return _entries[(kind, name)]


def backend_config(kind: str, name: str, settings: Any) -> Any:
    """The config of the `kind` named `name`, read from the attributes of `settings`."""
    config_class = entry(kind, name).config_class
    values = {}
    for field in dataclasses.fields(config_class):
        value = getattr(settings, field.metadata.get(SETTING, field.name), None)
        if value is not None:
            values[field.name] = value
    return config_class(**values)


def make_backend(kind: str, name: str, config: Any = None) -> Any:
    """Build the `kind` named `name` from its config (its defaults when None). Every check that can
    refuse (unknown name, missing package, missing checkpoint) raises BackendUnavailable here,
    before any work."""
    chosen = entry(kind, name)
    if config is None:
        config = chosen.config_class()
    if not isinstance(config, chosen.config_class):
        raise TypeError(f"the {kind} {name!r} takes a {chosen.config_class.__name__}, got {type(config).__name__}")
    missing = chosen.missing_package()
    if missing is not None:
        raise BackendUnavailable(
            f"the {kind} {name!r} needs optional packages that are not installed ({missing}); "
            f"install them with: pip install '{DISTRIBUTION}[{chosen.extra}]'"
        )
    return chosen.factory(config)
