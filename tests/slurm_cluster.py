"""A single-node Slurm cluster on this machine for the tests: munged, slurmctld and slurmd from
Debian's packages (apt-get install slurm-wlm munge), configured for localhost in a temporary folder
with ports of their own, run in the foreground as children of the test process and stopped by their
process ids. `start_local_slurm` returns None with a one-line reason where they cannot start (not
installed, not root, a daemon that will not come up)."""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


@dataclass
class LocalSlurm:
    conf: Path
    root: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in reversed(self.processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + path.read_text(errors="replace")[-2000:] for path in sorted(self.root.glob("*.log"))
        )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _sbin(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def missing_reason() -> str | None:
    """Why no local Slurm can start here, or None."""
    if os.name != "posix" or os.geteuid() != 0:
        return "a local Slurm runs its daemons as root, and the tests do not run as root"
    missing = [name for name in DAEMONS if _sbin(name) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install slurm-wlm munge)"
    return None


def _slurm_conf(root: Path, socket_path: Path) -> str:
    host = socket.gethostname()
    return "\n".join(
        [
            "ClusterName=hsitest",
            "SlurmctldHost=localhost",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={socket_path}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/builtin",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ReturnToService=2",
            "MpiDefault=none",
            "MinJobAge=600",  # squeue keeps ended tasks known while the tests look at them
            f"NodeName=localhost NodeHostname={host} CPUs={os.cpu_count() or 1} State=UNKNOWN",
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8",
            "",
        ]
    )


def start_local_slurm(root: Path) -> tuple[LocalSlurm | None, str]:
    """A running single-node Slurm under `root`, or (None, why not)."""
    reason = missing_reason()
    if reason:
        return None, reason
    for sub in ("state", "spool", "munge"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "munge", 0o700)
    key = root / "munge" / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    os.chmod(key, 0o600)
    socket_path = root / "munge" / "munge.socket"
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, socket_path))
    cluster = LocalSlurm(conf, root)
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munged = [
        _sbin("munged"),
        "--foreground",
        "--force",
        f"--socket={socket_path}",
        f"--key-file={key}",
        f"--pid-file={root / 'munge' / 'munged.pid'}",
        f"--log-file={root / 'munged.log'}",
        f"--seed-file={root / 'munge' / 'munged.seed'}",
    ]
    commands = [
        munged,
        [_sbin("slurmctld"), "-D", "-f", str(conf)],
        [_sbin("slurmd"), "-D", "-f", str(conf), "-N", "localhost"],
    ]
    try:
        for command in commands:
            cluster.processes.append(
                subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            time.sleep(0.5)
            if cluster.processes[-1].poll() is not None:
                cluster.stop()
                return None, f"{Path(command[0]).name} exited at start: {cluster.logs()[-300:]!r}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            if state.returncode == 0 and state.stdout.strip() in ("idle", "mix", "alloc"):
                return cluster, ""
            time.sleep(1)
    except BaseException:
        cluster.stop()
        raise
    cluster.stop()
    return None, f"the local Slurm node did not become idle within 60 s: {cluster.logs()[-300:]!r}"


TESTS = Path(__file__).resolve().parent


@contextmanager
def slurm_session(root: Path) -> Iterator[LocalSlurm]:
    """A local Slurm for a test module (skipped with the reason where none can start), with the
    environment its array tasks need: SLURM_CONF, and a PYTHONPATH that imports the toolkit and
    the tests' helpers as the test process does."""
    import pytest

    cluster, reason = start_local_slurm(root)
    if cluster is None:
        pytest.skip(f"no local Slurm: {reason}")
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("SLURM_CONF", str(cluster.conf))
            path = [str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]
            patch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
            yield cluster
    finally:
        cluster.stop()


@dataclass(frozen=True)
class BytesShardBuilder:
    """A shard builder (picklable by reference: this module is on the array tasks' PYTHONPATH) that
    writes each plan's items as the bytes of its shard, and raises on the shard named `failing`."""

    out_dir: str
    failing: str = ""

    def __call__(self, plan):
        from builder.core.hashing import sha256_file
        from builder.core.manifest import ShardStats
        from builder.core.runner import ShardResult

        if plan.filename == self.failing:
            raise RuntimeError(f"planted failure on {plan.filename}")
        path = Path(self.out_dir) / plan.filename
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(repr(plan.items).encode())
        return ShardResult(ShardStats(plan.filename, len(plan.items), path.stat().st_size, sha256_file(path)))
