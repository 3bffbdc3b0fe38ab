"""Stage configs: canonical JSON, fingerprints, YAML specs with CLI overrides, and the check that
refuses to mix an output folder's settings with new ones."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from builder.core.errors import SettingsError, UsageError

CONFIG_NAME = "_config.yaml"


class ConfigError(UsageError, ValueError):
    """A config or spec value is invalid; the message says which field and what is allowed."""


class SettingsMismatch(SettingsError):
    """An output folder was made with other settings."""


def canonical_json(payload: Any) -> str:
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(payload: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(payload).encode("utf-8")).hexdigest()[:16]


def load_yaml_mapping(path: Path) -> dict:
    try:
        data = yaml.safe_load(Path(path).read_text("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"spec file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"spec file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"spec file {path} must hold a mapping at the top level")
    return data


def differing_settings(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Human-readable lines `field: old -> new` for every setting that differs."""
    lines = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        name = f"{prefix}{key}"
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            lines.extend(differing_settings(before, after, prefix=f"{name}."))
        elif before != after:
            lines.append(f"{name}: {before!r} -> {after!r}")
    return lines


def _write_settings_file(out_dir: Path, payload: Mapping[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(json.loads(canonical_json(payload)), sort_keys=True, allow_unicode=True)
    path = out_dir / CONFIG_NAME
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, "utf-8")
    os.replace(tmp, path)  # a crash mid-write never leaves an empty settings file behind


def load_settings(out_dir: Path) -> dict | None:
    path = out_dir / CONFIG_NAME
    if not path.is_file():
        return None
    return yaml.safe_load(path.read_text("utf-8")) or {}


def save_settings(out_dir: Path, settings: Mapping[str, Any], key: str | None = None) -> None:
    """Save `settings` as the folder's settings file, or as its entry `key` (other entries kept)."""
    if key is None:
        _write_settings_file(out_dir, settings)
        return
    _write_settings_file(out_dir, {**(load_settings(out_dir) or {}), key: settings})


def check_settings(out_dir: Path, settings: Mapping[str, Any], key: str | None = None) -> None:
    """Refuse to continue into a folder (or one entry of it) started with other output-affecting settings."""
    previous = load_settings(out_dir)
    if previous is not None and key is not None:
        previous = previous.get(key)
    if previous is None:
        return
    normalised = json.loads(canonical_json(settings))
    if previous != normalised:
        diff = "\n  ".join(differing_settings(previous, normalised))
        what = f"{out_dir} holds split {key!r} made" if key is not None else f"{out_dir} was made"
        raise SettingsMismatch(
            f"{what} with other settings:\n  {diff}\n"
            "Use the same settings to resume, another --out, or --overwrite to rebuild it."
        )


def drop_settings(out_dir: Path, key: str) -> None:
    """Forget the settings entry `key` (extract --overwrite of one split)."""
    settings = load_settings(out_dir)
    if settings is not None and settings.pop(key, None) is not None:
        _write_settings_file(out_dir, settings)
