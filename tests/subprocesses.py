"""Fresh processes of the toolkit, for the tests that need one (an environment read at import, a kill)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


def run_hsi(args, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m hsi.cli ARGS` from the repository root, output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "hsi.cli", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPOSITORY,
    )


def run_python(code: str, *args, timeout: int = 120) -> subprocess.CompletedProcess:
    """`python -c CODE ARGS` from the repository root, with the package and the tests' factories importable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "tests")]))
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
