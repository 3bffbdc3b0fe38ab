"""The raw `_info.json` of a folder, for tests that read or tamper with a manifest as a file (the
toolkit itself reads manifests only through the typed `builder.core.manifest.Manifest`)."""

from __future__ import annotations

import json
from pathlib import Path

from builder.core.manifest import MANIFEST_NAME


def read_manifest(folder: Path) -> dict:
    return json.loads((Path(folder) / MANIFEST_NAME).read_text("utf-8"))
