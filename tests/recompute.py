"""`hsi eval --from`, as the tests run it: every report again from a predictions table alone."""

from __future__ import annotations

from pathlib import Path

from hsi.cli import main


def recompute(predictions: Path, out: Path, bootstrap: int = 100) -> dict | None:
    """`hsi eval --from PREDICTIONS --out OUT --bootstrap N`: the eval.json it wrote, or None when
    it exited non-zero (the refusal is on stderr)."""
    import json

    status = main(["eval", "--from", str(predictions), "--out", str(out), "--bootstrap", str(bootstrap)])
    return json.loads((Path(out) / "eval.json").read_text()) if status == 0 else None
