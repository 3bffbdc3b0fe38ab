"""Fresh processes of the toolkit, for the tests that need one (an environment read at import, a kill)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


def hsi_command(*args) -> list[str]:
    """The command line `python -m hsi.cli ARGS`, for a process of one's own (Popen, a kill)."""
    return [sys.executable, "-m", "hsi.cli", *map(str, args)]


def wait_for_states(folder: Path, count: int, timeout: float = 60) -> None:
    """Wait until a run in another process has finished `count` shards (their states in folder/_state)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(list((folder / "_state").glob("*.json"))) >= count:
            return
        time.sleep(0.02)
    raise AssertionError(f"no progress in {folder}")


def run_hsi(args, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    """`python -m hsi.cli ARGS` from the repository root, output captured as text."""
    return subprocess.run(
        hsi_command(*args),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPOSITORY,
    )


def run_python(code: str, *args, timeout: int = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -c CODE ARGS` from the repository root, with the package and the tests' factories importable,
    in `env` (default: this process's environment)."""
    env = dict(env or os.environ, PYTHONPATH=os.pathsep.join([str(REPOSITORY), str(REPOSITORY / "tests")]))
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=REPOSITORY,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
