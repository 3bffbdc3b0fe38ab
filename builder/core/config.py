"""Stage configs: canonical JSON, fingerprints, YAML specs with CLI overrides, and the check that
refuses to mix an output folder's settings with new ones."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

import yaml

CONFIG_NAME = "_config.yaml"


class ConfigError(ValueError):
    """A config or spec value is invalid; the message says which field and what is allowed."""


class SettingsMismatch(RuntimeError):
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


def save_settings(out_dir: Path, settings: Mapping[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(json.loads(canonical_json(settings)), sort_keys=True, allow_unicode=True)
    (out_dir / CONFIG_NAME).write_text(text, "utf-8")


def load_settings(out_dir: Path) -> dict | None:
    path = out_dir / CONFIG_NAME
    if not path.is_file():
        return None
    return yaml.safe_load(path.read_text("utf-8")) or {}


def check_settings(out_dir: Path, settings: Mapping[str, Any]) -> None:
    """Refuse to continue into a folder that was started with other output-affecting settings."""
    previous = load_settings(out_dir)
    if previous is None:
        return
    normalised = json.loads(canonical_json(settings))
    if previous != normalised:
        diff = "\n  ".join(differing_settings(previous, normalised))
        raise SettingsMismatch(
            f"{out_dir} was made with other settings:\n  {diff}\n"
            "Use the same settings to resume, another --out, or --overwrite to rebuild it."
        )
