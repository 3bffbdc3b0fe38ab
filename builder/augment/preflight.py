"""Refusals of `hsi scgs` that need more than one flag's value, all made before any write: where
the config may be written, what --overwrite may remove, which generation settings SCGS can use."""

from __future__ import annotations

import math
import string
from pathlib import Path
from typing import Any

from builder.core.errors import UsageError
from builder.core.manifest import MANIFEST_NAME


def check_generation(generation: Any) -> None:
    """What GenerationSettings lets through but SCGS cannot use: a non-finite guidance (NaN images), a
    prompt template with anything but plain `{class_name}` fields (`{class_name.upper}` would put a
    memory address into the prompt, so no two runs would agree)."""
    if not math.isfinite(float(generation.guidance)):
        raise UsageError(f"--guidance must be a finite number, got {generation.guidance}")
    try:
        fields = [
            (name, spec, conversion)
            for _, name, spec, conversion in string.Formatter().parse(generation.prompt_template)
            if name is not None
        ]
    except ValueError as exc:
        raise UsageError(f"--prompt-template {generation.prompt_template!r} cannot be used: {exc}") from None
    odd = [
        f"{{{name}{'!' + conversion if conversion else ''}{':' + spec if spec else ''}}}"
        for name, spec, conversion in fields
        if (name, spec, conversion) != ("class_name", "", None)
    ]
    if odd:
        raise UsageError(
            f"--prompt-template may hold only the plain field {{class_name}}, got {', '.join(odd)} in "
            f"{generation.prompt_template!r}; write a literal brace twice ({{{{ or }}}})"
        )


def check_output_place(out_root: Path, out_dir: Path, source_folder: Path) -> None:
    """Refuse an --out that is a file, a dataset folder, or that puts the config inside its source
    (or the source inside it): the source must stay as it was."""
    out_root = Path(out_root)
    if out_root.exists() and not out_root.is_dir():
        raise UsageError(f"--out {out_root} is a file, not a folder: pass the folder to write OUT/<config>-scgs into")
    if (out_root / MANIFEST_NAME).is_file():
        raise UsageError(
            f"--out {out_root} is itself a dataset folder (it holds {MANIFEST_NAME}): pass the folder beside it "
            f"(e.g. {out_root.parent}), where OUT/<config>-scgs is written"
        )
    target, source = out_dir.resolve(), Path(source_folder).resolve()
    if target == source or target.is_relative_to(source) or source.is_relative_to(target):
        raise UsageError(
            f"--out would write {out_dir.name} into (or over) its source folder {source_folder}; "
            "choose an --out outside it (e.g. the source's parent folder)"
        )
