"""Publishing for real against a loopback Hub (tests/hub_server.py): dry run, create, upload, tag,
load by revision, verify, refusals; the git mirror; an opt-in test against the real Hub."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import LoopbackHub, hub_env
from release_factory import make_composed_dataset, two_releases
from subprocesses import run_hsi

from cards.release import build_release

REPO = "lab/hard-spurious-imagenet"


def hsi(args: list[str], endpoint: str, home: Path) -> subprocess.CompletedProcess:
    """Run `hsi` in a fresh process pointed at the loopback hub."""
    return run_hsi(args, hub_env(endpoint, home))


@pytest.fixture
def releases(tmp_path):
    return two_releases(tmp_path)


def test_publish_tag_verify_and_refusals(releases, tmp_path):
    v1, v2 = releases
    with LoopbackHub() as hub:
        dry = hsi(["publish", str(v1), "--repo", REPO, "--version", "v1.0.0"], hub.endpoint, tmp_path / "h")
        assert dry.returncode == 0, dry.stderr
        assert "create dataset repo" in dry.stdout and "upload data/hard-spurious-imagenet/test-00002.tar" in dry.stdout
        assert "dry run: nothing changed" in dry.stdout and hub.state.repos == {}
        assert all(r.startswith("GET") for r in hub.state.requests)

        done = hsi(
            ["publish", str(v1), "--repo", REPO, "--version", "v1.0.0", "--yes", "--private"],
            hub.endpoint,
            tmp_path / "h",
        )
        assert done.returncode == 0, done.stderr
        repo = hub.state.repos[REPO]
        assert repo.private and repo.tags["v1.0.0"] == repo.branches["main"]
        files = repo.commits[repo.tags["v1.0.0"]].files
        assert (
            files["data/hard-spurious-imagenet/test-00000.tar"]
            == (v1 / "data/hard-spurious-imagenet/test-00000.tar").read_bytes()
        )
        assert "hf_loopback_test_token" not in done.stdout + done.stderr

        again = hsi(["publish", str(v1), "--repo", REPO, "--version", "v1.0.0", "--yes"], hub.endpoint, tmp_path / "h")
        assert again.returncode == 2 and "never moved or reused" in again.stderr
        assert set(repo.tags) == {"v1.0.0"}

        second = hsi(["publish", str(v2), "--repo", REPO, "--version", "v1.1.0", "--yes"], hub.endpoint, tmp_path / "h")
        assert second.returncode == 0, second.stderr
        assert "delete data/hard-spurious-imagenet/test-00002.tar" in second.stdout
        assert repo.commits[repo.tags["v1.1.0"]].parent == repo.tags["v1.0.0"]

        for version, count in (("v1.0.0", 5), ("v1.1.0", 6)):
            check = hsi(["verify", REPO, "--version", version], hub.endpoint, tmp_path / f"h{version}")
            assert check.returncode == 0, check.stderr[-3000:]
            assert "hard-spurious-imagenet/test: " in check.stdout and f"{count} samples streamed" in check.stdout

        # corrupt a shard of the published v1.0.0 commit: verify must notice
        repo.commits[repo.tags["v1.0.0"]].files["data/hard-spurious-imagenet/test-00001.tar"] = b"\0" * 10240
        broken = hsi(["verify", REPO, "--version", "v1.0.0"], hub.endpoint, tmp_path / "h-broken")
        assert broken.returncode == 1 and "test-00001.tar: sha256 or size differs" in broken.stdout


def test_load_dataset_by_revision(releases, tmp_path):
    v1, v2 = releases
    with LoopbackHub() as hub:
        for release, version in ((v1, "v1.0.0"), (v2, "v1.1.0")):
            assert (
                hsi(
                    ["publish", str(release), "--repo", REPO, "--version", version, "--yes"],
                    hub.endpoint,
                    tmp_path / "h",
                ).returncode
                == 0
            )
        code = (
            "from datasets import load_dataset\n"
            f"for rev in ('v1.0.0', 'v1.1.0'):\n"
            f"    ds = load_dataset({REPO!r}, split='test', revision=rev, cache_dir={str(tmp_path / 'c')!r} + rev)\n"
            "    print(rev, ds.num_rows, ds[0]['json']['seed'])\n"
        )
        env = dict(
            os.environ,
            HF_ENDPOINT=hub.endpoint,
            HF_HUB_OFFLINE="0",
            HF_DATASETS_OFFLINE="0",
            HF_HOME=str(tmp_path / "h2"),
        )
        result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.splitlines()[-2:] == ["v1.0.0 5 0", "v1.1.0 6 1"]


def test_bad_card_and_version_mismatch_are_refused(releases, tmp_path):
    from hf_scripts.publish import PublishError, check_release_folder

    v1, _ = releases
    with pytest.raises(PublishError, match="not v2.0.0"):
        check_release_folder(v1, "v2.0.0")
    readme = v1 / "README.md"
    readme.write_text(readme.read_text().replace("license: other\n", "license: other\nlicense: other\n", 1))
    with pytest.raises(PublishError, match="the card is refused"):
        check_release_folder(v1, "v1.0.0")
    with LoopbackHub() as hub:
        result = hsi(["publish", str(v1), "--repo", REPO, "--version", "v1.0.0", "--yes"], hub.endpoint, tmp_path / "h")
        assert result.returncode == 2 and "duplicate" in result.stderr and hub.state.repos == {}


def test_git_mirror_commits_and_tags(releases, tmp_path):
    from hf_scripts.git_mirror import git, publish_to_git
    from hf_scripts.publish import PublishError

    v1, v2 = releases
    mirror = tmp_path / "mirror"
    first = publish_to_git(v1, mirror, "v1.0.0")
    second = publish_to_git(v2, mirror, "v1.1.0")
    assert (
        git(mirror, "rev-parse", "v1.0.0^{commit}") == first and git(mirror, "rev-parse", "v1.1.0^{commit}") == second
    )
    assert git(mirror, "rev-parse", "HEAD~1") == first
    listed = git(mirror, "ls-tree", "-r", "--name-only", "v1.0.0").splitlines()
    assert "data/hard-spurious-imagenet/test-00002.tar" in listed and "README.md" in listed
    assert (
        "data/hard-spurious-imagenet/test-00002.tar"
        not in git(mirror, "ls-tree", "-r", "--name-only", "v1.1.0").splitlines()
    )
    from hf_scripts.git_mirror import lfs_object_path

    pointer = git(mirror, "show", "v1.0.0:data/hard-spurious-imagenet/test-00000.tar")  # a shard is in git LFS
    oid = pointer.split("oid sha256:")[1].split()[0]
    assert lfs_object_path(mirror, oid).read_bytes() == (v1 / "data/hard-spurious-imagenet/test-00000.tar").read_bytes()
    with pytest.raises(PublishError, match="never moved"):
        publish_to_git(v2, mirror, "v1.1.0")


@pytest.mark.skipif(
    not (os.environ.get("HSI_HUB_TEST_REPO") and os.environ.get("HF_TOKEN")),
    reason="set HSI_HUB_TEST_REPO=ORG/NAME and HF_TOKEN to publish to the real Hub",
)
def test_real_hub_publish_and_verify(tmp_path):
    import time

    version = f"v0.{int(time.time())}.0"  # a fresh version each run: tags are never reused
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    release = build_release(tmp_path / "hard-spurious-imagenet", [dataset], version=version)
    env = dict(os.environ, HF_HUB_OFFLINE="0", HF_DATASETS_OFFLINE="0")

    def run(*a):
        return subprocess.run(
            [sys.executable, "-m", "hsi.cli", *a], env=env, capture_output=True, text=True, timeout=900
        )  # noqa: E731

    repo = os.environ["HSI_HUB_TEST_REPO"]
    published = run("publish", str(release), "--repo", repo, "--version", version, "--yes", "--private")
    assert published.returncode == 0, published.stderr
    assert run("verify", repo, "--version", version).returncode == 0
