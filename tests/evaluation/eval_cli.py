"""`hsi eval` command lines of the evaluation tests: one quiet run with a short bootstrap."""

from __future__ import annotations

from trusted_code import trust_flags

RAW = ["--mean", "0", "--std", "1"]  # planted predictors read raw [0, 1] pixels


def eval_args(
    dataset, models: str, out, *extra: str, workers: int | None = 0, bootstrap: int | None = 100, raw: bool = True
):
    """`hsi eval DATASET --model(s) MODELS [--mean 0 --std 1] --out OUT [--workers N] --no-progress
    [--bootstrap B] EXTRA...` (None leaves a flag at its default); several comma-separated specs or a
    listing file go to --models. Each `ts:` file of MODELS is trusted by its sha256 (--trust-file)."""
    several = "," in models or str(models).endswith((".yaml", ".yml", ".txt"))
    return [
        "eval",
        str(dataset),
        "--models" if several else "--model",
        str(models),
        *(RAW if raw else []),
        "--out",
        str(out),
        *(["--workers", str(workers)] if workers is not None else []),
        "--no-progress",
        *(["--bootstrap", str(bootstrap)] if bootstrap is not None else []),
        *trust_flags(models),
        *extra,
    ]
