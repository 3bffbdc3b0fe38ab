"""Hostile mirrors and interrupted or concurrent runs of `hsi publish` (issue 11): planted files,
a second run at once, a shard changed under the publisher, kills between commit and tag, stale
locks, Hub errors, and repo ids that are paths."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import hub_env
from release_factory import make_composed_dataset, two_releases
from subprocesses import run_hsi, run_python

from builder.core.locks import FolderLocked
from cards.release import build_release
from hf_scripts.git_mirror import git, mirror_plan, publish_to_git
from hf_scripts.publish import PublishError
from hsi.cli import main as hsi

NAME = "hard-spurious-imagenet"
SHARD = f"data/{NAME}/test-00000.tar"


@pytest.fixture
def releases(tmp_path):
    return two_releases(tmp_path)


def plant_secrets(folder: Path) -> None:
    (folder / ".ssh").mkdir(parents=True, exist_ok=True)
    (folder / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (folder / "private-notes.txt").write_text("not for publication")


def release_paths(release: Path) -> set[str]:
    return {p.relative_to(release).as_posix() for p in release.rglob("*") if p.is_file()}


def tree(mirror: Path, rev: str) -> set[str]:
    """The release's paths in a mirror commit (its .gitattributes, the LFS setup, is not one)."""
    return set(git(mirror, "ls-tree", "-r", "--name-only", rev).splitlines()) - {".gitattributes"}


def test_a_folder_with_foreign_files_is_refused_by_the_dry_run_and_the_run(releases, tmp_path, capsys):
    v1, _ = releases
    target = tmp_path / "notes"
    plant_secrets(target)
    for extra in ([], ["--yes"]):
        assert hsi(["publish", str(v1), "--to-git", str(target), "--version", "v1.0.0", *extra]) == 2
        assert "is not empty and is not a git mirror" in capsys.readouterr().err
    assert not (target / ".git").exists()


def test_files_planted_in_a_mirror_are_refused_and_never_committed(releases, tmp_path, capsys):
    v1, v2 = releases
    mirror = tmp_path / "mirror"
    publish_to_git(v1, mirror, "v1.0.0")
    plant_secrets(mirror)
    for extra in ([], ["--yes"]):
        assert hsi(["publish", str(v2), "--to-git", str(mirror), "--version", "v1.1.0", *extra]) == 2
        err = capsys.readouterr().err
        assert "not part of any release" in err and ".ssh/id_rsa" in err and "private-notes.txt" in err
    assert tree(mirror, "HEAD") == release_paths(v1) and "v1.1.0" not in git(mirror, "tag")
    (mirror / "private-notes.txt").unlink()
    (mirror / ".ssh" / "id_rsa").unlink()
    assert hsi(["publish", str(v2), "--to-git", str(mirror), "--version", "v1.1.0"]) == 0
    uploads = {line.split()[1] for line in capsys.readouterr().out.splitlines() if line.strip().startswith("upload ")}
    assert uploads == release_paths(v2)  # the dry run lists exactly the release's paths
    publish_to_git(v2, mirror, "v1.1.0")
    assert tree(mirror, "v1.1.0") == release_paths(v2)


def test_a_file_planted_in_the_release_folder_is_refused(releases, tmp_path):
    v1, _ = releases
    plant_secrets(v1)
    with pytest.raises(PublishError, match="not part of the release: .ssh/id_rsa, private-notes.txt"):
        publish_to_git(v1, tmp_path / "mirror", "v1.0.0")
    (v1 / ".ssh" / "id_rsa").unlink()
    (v1 / "private-notes.txt").unlink()
    # the card itself swapped for a link to a file outside (with the same text, so only the link is wrong)
    (v1 / "README.md").rename(tmp_path / "README.outside")
    (v1 / "README.md").symlink_to(tmp_path / "README.outside")
    with pytest.raises(PublishError, match="is a link"):
        publish_to_git(v1, tmp_path / "mirror2", "v1.0.0")


def test_a_second_run_is_refused_naming_the_first_ones_pid(releases, tmp_path):
    v1, v2 = releases
    mirror = tmp_path / "mirror"
    publish_to_git(v1, mirror, "v1.0.0")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
            "os.ftruncate(fd, 0); os.write(fd, str(os.getpid()).encode())\nprint('locked', "
            "flush=True)\ntime.sleep(120)",
            str(mirror / ".git" / "hsi-publish.lock"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(FolderLocked, match=rf"another `hsi publish` \(pid {holder.pid}\)"):
            publish_to_git(v2, mirror, "v1.1.0")
    finally:
        holder.kill()
        holder.wait()
    assert "v1.1.0" not in git(mirror, "tag")
    publish_to_git(v2, mirror, "v1.1.0")
    assert tree(mirror, "v1.1.0") == release_paths(v2)


def test_a_shard_truncated_under_the_publisher_is_never_tagged(releases, tmp_path, monkeypatch):
    from hf_scripts import git_mirror

    v1, _ = releases
    shard = v1 / SHARD
    real_store = git_mirror.store_lfs_object

    def truncate_then_store(git_dir, source, expected, path):
        # the release folder's checks have passed; the shard changes while it is being staged
        if source == v1 / SHARD:
            shard.write_bytes(shard.read_bytes()[:1024])
        return real_store(git_dir, source, expected, path)

    monkeypatch.setattr(git_mirror, "store_lfs_object", truncate_then_store)
    mirror = tmp_path / "mirror"
    with pytest.raises(PublishError, match=f"{SHARD} as staged .* differs from its sha256 in _release.json"):
        publish_to_git(v1, mirror, "v1.0.0")
    # nothing was published, and the mirror this run began is gone again (no half-made .git)
    assert not mirror.exists()
    # a shard changed before the run is refused by the release's own record, before anything is made
    with pytest.raises(PublishError, match=f"{SHARD} changed since `hsi release` wrote them"):
        publish_to_git(v1, mirror, "v1.0.0")
    assert not mirror.exists()


KILLED_PUBLISH = """
import os, signal, sys
from hf_scripts import git_mirror
real_git, stop_at = git_mirror.git, sys.argv[4]

def git(repo, *args, **kwargs):
    if " ".join(args).startswith(stop_at):
        os.kill(os.getpid(), signal.SIGKILL)
    return real_git(repo, *args, **kwargs)

git_mirror.git = git
git_mirror.publish_to_git(sys.argv[1], sys.argv[2], sys.argv[3])
"""


def killed_publish(release: Path, mirror: Path, version: str, stop_at: str) -> None:
    result = run_python(KILLED_PUBLISH, release, mirror, version, stop_at)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]


def test_a_kill_between_commit_and_tag_is_finished_by_the_next_run(releases, tmp_path):
    v1, v2 = releases
    mirror = tmp_path / "mirror"
    publish_to_git(v1, mirror, "v1.0.0")
    killed_publish(v2, mirror, "v1.1.0", "tag -a")
    assert git(mirror, "tag").split() == ["v1.0.0"] and tree(mirror, "HEAD") == release_paths(v2)
    assert "already this release: tag it v1.1.0" in "\n".join(mirror_plan(v2, mirror, "v1.1.0"))
    commit = publish_to_git(v2, mirror, "v1.1.0")
    assert git(mirror, "rev-parse", "v1.1.0^{commit}") == commit == git(mirror, "rev-parse", "HEAD")
    assert git(mirror, "rev-parse", "HEAD~1") == git(mirror, "rev-parse", "v1.0.0^{commit}")  # one commit, not two


def test_a_killed_checkout_and_its_stale_index_lock_are_recovered(releases, tmp_path):
    v1, v2 = releases
    mirror = tmp_path / "mirror"
    publish_to_git(v1, mirror, "v1.0.0")
    killed_publish(v2, mirror, "v1.1.0", "reset")  # killed as it starts to update the working tree
    # what a kill inside `git reset --hard` leaves: its index.lock, some files of the new tree
    (mirror / ".git" / "index.lock").write_bytes(b"")
    (mirror / "data" / "hard-spurious-imagenet" / "test-00002.tar").unlink()
    assert git(mirror, "tag").split() == ["v1.0.0", "v1.1.0"]
    dataset = make_composed_dataset(tmp_path / "c", splits={"test": 7}, seed=2)
    v3 = build_release(tmp_path / "v3" / "hard-spurious-imagenet", [dataset], version="v1.2.0", previous_release=v2)
    publish_to_git(v3, mirror, "v1.2.0")
    assert tree(mirror, "v1.2.0") == release_paths(v3)
    assert not (mirror / ".git" / "index.lock").exists()
    assert git(mirror, "status", "--porcelain", "--untracked-files=all") == ""


def test_a_foreign_index_lock_is_refused_with_a_clear_message(releases, tmp_path):
    v1, v2 = releases
    mirror = tmp_path / "mirror"
    publish_to_git(v1, mirror, "v1.0.0")
    (mirror / ".git" / "index.lock").write_bytes(b"")  # not ours: no checkout of ours was running
    with pytest.raises(PublishError, match="index.lock exists: a git command runs in the mirror"):
        publish_to_git(v2, mirror, "v1.1.0")
    assert (mirror / ".git" / "index.lock").exists()


# ---------------------------------------------------------------- the Hub (tests/hub_server.py)

HUB_REPO = "lab/hard-spurious-imagenet"
TOKEN = "hf_adversarial_secret_token"


def hub_hsi(args: list[str], hub, home: Path) -> subprocess.CompletedProcess:
    return run_hsi(args, hub_env(hub.endpoint, home, TOKEN))


def test_hub_http_errors_are_clear_messages_without_the_token(releases, tmp_path):
    from hub_server import LoopbackHub

    v1, _ = releases
    publish = ["publish", str(v1), "--repo", HUB_REPO, "--version", "v1.0.0", "--yes"]
    with LoopbackHub() as hub:
        hub.state.faults["POST /api/repos/create"] = (401, "Invalid credentials in Authorization header")
        refused = hub_hsi(publish, hub, tmp_path / "h")
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
        assert "hsi publish: error: publishing on lab/hard-spurious-imagenet failed with HTTP 401" in refused.stderr
        assert "check the token" in refused.stderr
        hub.state.faults = {"GET /api/datasets/": (500, "Internal Error")}
        failed = hub_hsi(publish, hub, tmp_path / "h")
        assert failed.returncode == 2 and "Traceback" not in failed.stderr, failed.stderr[-2000:]
        assert "failed with HTTP 500" in failed.stderr and "run again later" in failed.stderr
        verify = hub_hsi(["verify", HUB_REPO, "--version", "v1.0.0"], hub, tmp_path / "h")
        assert (
            verify.returncode == 2 and "verifying on lab/hard-spurious-imagenet failed with HTTP 500" in verify.stderr
        )
        for result in (refused, failed, verify):
            assert TOKEN not in result.stdout + result.stderr


@pytest.mark.parametrize("repo", ["lab/../../etc", "../x", "lab/name/extra", "lab", "lab/na me", "lab/x..y", "/abs/x"])
def test_repo_ids_that_are_paths_are_refused_before_any_request(repo, capsys):
    assert hsi(["verify", repo, "--version", "v1.0.0"]) == 2
    assert "is not of the form ORG/NAME" in capsys.readouterr().err


def test_a_hub_publish_stopped_between_commit_and_tag_is_finished_by_tagging(releases, tmp_path):
    from hub_server import LoopbackHub

    v1, v2 = releases
    with LoopbackHub() as hub:
        assert (
            hub_hsi(
                ["publish", str(v1), "--repo", HUB_REPO, "--version", "v1.0.0", "--yes"], hub, tmp_path / "h"
            ).returncode
            == 0
        )
        hub.state.faults["POST /api/datasets/lab/hard-spurious-imagenet/tag/"] = (503, "Service Unavailable")
        stopped = hub_hsi(["publish", str(v2), "--repo", HUB_REPO, "--version", "v1.1.0", "--yes"], hub, tmp_path / "h")
        assert stopped.returncode == 2 and "run the same publish again" in stopped.stderr, stopped.stderr[-2000:]
        repo = hub.state.repos[HUB_REPO]
        assert set(repo.tags) == {"v1.0.0"} and repo.branches["main"] != repo.tags["v1.0.0"]
        hub.state.faults.clear()
        dry = hub_hsi(["publish", str(v2), "--repo", HUB_REPO, "--version", "v1.1.0"], hub, tmp_path / "h")
        assert "is already this release: tag it v1.1.0" in dry.stdout, dry.stderr[-2000:]
        again = hub_hsi(["publish", str(v2), "--repo", HUB_REPO, "--version", "v1.1.0", "--yes"], hub, tmp_path / "h")
        assert again.returncode == 0, again.stderr[-2000:]
        assert repo.tags["v1.1.0"] == repo.branches["main"]
        assert repo.commits[repo.tags["v1.1.0"]].parent == repo.tags["v1.0.0"]  # tagged, not committed twice


# ---------------------------------------------------------------- issue 21: no network, relative mirrors,
# files hidden from git, records that are not ours


def test_verify_and_the_dry_run_without_network_are_one_line(releases, monkeypatch, capsys):
    """Failed before (issue 21, 12): an OfflineModeIsEnabled or httpx ConnectError traceback."""
    import socket

    from huggingface_hub import constants

    v1, _ = releases
    verify = ["verify", HUB_REPO, "--version", "v1.0.0"]
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hsi(verify) == 2
    err = capsys.readouterr().err
    assert "needs the Hub, and HF_HUB_OFFLINE is set: unset it" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    with socket.socket() as probe:  # a port nothing listens on: the Hub cannot be reached
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", closed)
    for args, hint in (
        (verify, "HF_ENDPOINT"),
        (["publish", str(v1), "--repo", HUB_REPO, "--version", "v1.0.0"], "HF_HUB_OFFLINE=1"),
    ):
        assert hsi(args) == 2
        err = capsys.readouterr().err
        assert f"the Hub at {closed} cannot be reached" in err and hint in err, err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1


VERIFY_EACH = """
import contextlib, io, sys
from hsi.cli import main
for repo in sys.argv[1:]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = main(["verify", repo, "--version", "v1.0.0"])
    print(repo, status, err.getvalue().strip().replace("\\n", " // "))
"""


def test_verify_reads_records_that_are_not_ours_as_one_line_each(releases, tmp_path):
    """Failed before (issue 21, 11): a list or bad JSON in _release.json, or `splits` a list in
    _info.json, was an AttributeError/JSONDecodeError traceback."""
    import os

    from hub_server import LoopbackHub, Repo

    v1, _ = releases
    good = {p.relative_to(v1).as_posix(): p.read_bytes() for p in v1.rglob("*") if p.is_file()}
    info = f"data/{NAME}/_info.json"
    broken_info = json.loads(good[info])
    broken_info["splits"] = [broken_info["splits"]["test"]]
    cases = {
        "lab/release-list": ({"_release.json": b"[1, 2]"}, "lab/release-list@v1.0.0/_release.json: expected an object"),
        "lab/release-bad": ({"_release.json": b"{oops"}, "lab/release-bad@v1.0.0/_release.json: _release.json is not"),
        "lab/info-splits": ({info: json.dumps(broken_info).encode()}, f"lab/info-splits@v1.0.0/{info}: splits must be"),
    }
    with LoopbackHub() as hub:
        for repo_id, (changes, _) in cases.items():
            repo = Repo(private=False)
            repo.tags["v1.0.0"] = repo.commit(None, {**good, **changes}, "Release v1.0.0")
            hub.state.repos[repo_id] = repo
        env = hub_env(hub.endpoint, tmp_path / "h", TOKEN)
        result = subprocess.run(
            [sys.executable, "-c", VERIFY_EACH, *cases],
            env=dict(env, PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.strip().splitlines())
    for repo_id, (_, expected) in cases.items():
        status, message = lines[repo_id].split(" ", 1)
        assert status == "2" and "hsi verify: error: " in message and expected in message, lines[repo_id]
        assert "//" not in message and "Traceback" not in message  # one line


def test_the_readmes_relative_mirror_folder_works(releases, tmp_path, monkeypatch, capsys):
    """Failed before (issue 21, 12): `--to-git mirror/` looked for its index at mirror/mirror/.git/...
    and left an empty .git behind."""
    v1, v2 = releases
    monkeypatch.chdir(tmp_path)
    for release, version in ((v1, "v1.0.0"), (v2, "v1.1.0")):
        relative = os.path.relpath(release, tmp_path)
        assert hsi(["publish", relative, "--to-git", "mirror/", "--version", version, "--yes"]) == 0, (
            capsys.readouterr().err
        )
    mirror = tmp_path / "mirror"
    assert git(mirror, "tag").split() == ["v1.0.0", "v1.1.0"] and tree(mirror, "v1.1.0") == release_paths(v2)
    assert git(mirror, "status", "--porcelain", "--untracked-files=all") == ""


def bigger_release(tmp_path: Path, previous: Path) -> Path:
    """v1.2.0 with more shards than v1.1.0: test-00002.tar and test-00003.tar are paths it adds."""
    dataset = make_composed_dataset(tmp_path / "c", splits={"test": 8}, shard_size=2, seed=2)
    return build_release(tmp_path / "v3" / NAME, [dataset], version="v1.2.0", previous_release=previous)


@pytest.mark.parametrize("killed", [False, True])
def test_a_file_hidden_by_info_exclude_is_never_overwritten(releases, tmp_path, killed):
    """Failed before (issue 21, 13): `git status` does not show an ignored file, so the checkout's
    `reset --hard` overwrote it with the release's file of that path."""
    v1, v2 = releases
    v3 = bigger_release(tmp_path, v2)
    mirror = tmp_path / "mirror"
    publish_to_git(v2, mirror, "v1.1.0")
    if killed:  # the next run finishes an interrupted checkout first: it must not overwrite it either
        killed_publish(v3, mirror, "v1.2.0", "reset")
    mine = mirror / "data" / NAME / "test-00003.tar"
    mine.write_bytes(b"my own shard")
    (mirror / ".git" / "info" / "exclude").write_text(f"data/{NAME}/test-00003.tar\n")
    with pytest.raises(PublishError, match=f"data/{NAME}/test-00003.tar"):
        publish_to_git(v3, mirror, "v1.2.0")
    assert mine.read_bytes() == b"my own shard"
    mine.unlink()
    if not killed:
        publish_to_git(v3, mirror, "v1.2.0")
    else:
        assert "already has tag v1.2.0" in str(pytest.raises(PublishError, publish_to_git, v3, mirror, "v1.2.0").value)
    assert tree(mirror, "v1.2.0") == release_paths(v3)
    assert git(mirror, "status", "--porcelain", "--untracked-files=all") == ""
