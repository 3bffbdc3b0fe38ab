"""The read side of `hsi publish --to-git`: a real Hugging Face-compatible mirror (olah) serves the
local git repository, and `datasets.load_dataset(..., revision=vX.Y.Z)` loads it through HF_ENDPOINT.

olah reads local git repos from its `mirrors-path` folders, laid out as
<mirrors-path>/<datasets|models|spaces>/<org>/<name> (olah/server_mirror.py). It runs offline (no
upstream probes) with its upstream pointed at a closed loopback port, so nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import olah  # noqa: F401  (the dev extra installs it: a missing olah fails here rather than skipping)
import pytest
from release_factory import make_composed_dataset

from cards.release import build_release
from hsi.cli import main as hsi_main

ORG, NAME = "lab", "hard-spurious-imagenet"
CONFIG = "hard-spurious-imagenet"


# No proxy: urllib.request.urlopen keeps the opener of its first call, proxies read from the environment
# then, and another test in this worker may have made that call under a monkeypatched dead proxy.
DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


@pytest.fixture
def olah_server(tmp_path):
    """olah on a free 127.0.0.1 port serving tmp_path/mirrors; yields (endpoint, mirrors, log file)."""
    mirrors = tmp_path / "mirrors"
    (mirrors / "datasets").mkdir(parents=True)
    port, dead_port = free_port(), free_port()  # dead_port: nothing listens there
    netloc = f"127.0.0.1:{port}"
    config = tmp_path / "olah.toml"
    config.write_text(
        "\n".join(
            [
                "[basic]",
                'host = "127.0.0.1"',
                f"port = {port}",
                f"repos-path = {toml_str(str(tmp_path / 'olah-cache'))}",
                f"mirrors-path = [{toml_str(str(mirrors))}]",
                'hf-scheme = "http"',
                f'hf-netloc = "127.0.0.1:{dead_port}"',
                f'hf-lfs-netloc = "127.0.0.1:{dead_port}"',
                'mirror-scheme = "http"',
                f'mirror-netloc = "{netloc}"',
                f'mirror-lfs-netloc = "{netloc}"',
                "",
                "[accessibility]",
                "offline = true",
                "",
            ]
        )
    )
    log = tmp_path / "olah.out"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "olah.server", "--config", str(config), "--log-path", str(tmp_path / "olah-logs")],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        # olah imports a web stack: on a loaded 2-core machine its start-up alone has taken 30 s
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                pytest.fail(f"olah exited with {process.returncode}: {log.read_text(errors='replace')[-3000:]}")
            try:
                with DIRECT.open(f"http://{netloc}/api/datasets/{ORG}/absent/refs", timeout=2):
                    break
            except urllib.error.HTTPError:
                break  # it answers (a 404 for an absent repo): up
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"olah did not answer within 120 s: {log.read_text(errors='replace')[-3000:]}")
                time.sleep(0.2)
        yield f"http://{netloc}", mirrors, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def load_revisions(endpoint: str, revisions: list[str], work: Path) -> dict[str, dict]:
    """load_dataset ORG/NAME at each revision in a fresh process and cache, through HF_ENDPOINT."""
    code = (
        "import json, sys\n"
        "from datasets import load_dataset\n"
        "for rev in sys.argv[2:]:\n"
        f"    ds = load_dataset({f'{ORG}/{NAME}'!r}, split='test', revision=rev, cache_dir=sys.argv[1] + '/' + rev)\n"
        "    print(json.dumps({'rev': rev, 'rows': ds.num_rows, 'keys': list(ds['__key__']), 'json': ds[0]['json']}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "HF_TOKEN")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(work / "hf-home"), HF_HUB_DISABLE_TELEMETRY="1")
    result = subprocess.run(
        [sys.executable, "-c", code, str(work / "datasets-cache"), *revisions],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    return {item["rev"]: item for item in loaded}


def first_sample_json(release: Path) -> dict:
    with tarfile.open(release / "data" / CONFIG / "test-00000.tar") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith(".json"))
        return json.loads(tar.extractfile(member).read())


def test_olah_serves_the_git_mirror_by_revision(olah_server, tmp_path):
    endpoint, mirrors, log = olah_server
    v1 = build_release(
        tmp_path / "v1" / NAME,
        [make_composed_dataset(tmp_path / "a", splits={"test": 5}, shard_size=2)],
        version="v1.0.0",
    )
    v2 = build_release(
        tmp_path / "v2" / NAME,
        [make_composed_dataset(tmp_path / "b", splits={"test": 6}, shard_size=4, seed=1)],
        version="v1.1.0",
        previous_release=v1,
        changes=["new seed"],
    )
    repo = mirrors / "datasets" / ORG / NAME
    assert hsi_main(["publish", str(v1), "--to-git", str(repo), "--version", "v1.0.0", "--yes"]) == 0

    first = load_revisions(endpoint, ["v1.0.0"], tmp_path / "load1")["v1.0.0"]
    old_json = first_sample_json(v1)
    assert first["rows"] == 5 and first["keys"] == [f"test_{i:06d}" for i in range(5)]
    assert first["json"] == old_json and old_json["seed"] == 0

    # a new release while olah runs: v1.1.0 serves the changed samples, v1.0.0 still the old ones
    assert hsi_main(["publish", str(v2), "--to-git", str(repo), "--version", "v1.1.0", "--yes"]) == 0
    loaded = load_revisions(endpoint, ["v1.1.0", "v1.0.0"], tmp_path / "load2")
    assert loaded["v1.1.0"]["rows"] == 6 and loaded["v1.1.0"]["json"] == first_sample_json(v2)
    assert loaded["v1.1.0"]["json"]["seed"] == 1
    assert loaded["v1.0.0"]["rows"] == 5 and loaded["v1.0.0"]["json"] == old_json

    # the files came through olah, from the tagged commits of the local repository
    served = log.read_text(errors="replace")
    for tag in ("v1.0.0", "v1.1.0"):
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", f"{tag}^{{commit}}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert f"/datasets/{ORG}/{NAME}/resolve/{commit}/data/{CONFIG}/test-00000.tar" in served
