"""`hsi publish --to-git DIR`: a release as a commit and tag of a local git repository.

The repository is laid out like the Hub repo (the release folder's files at its root), so a lab
without Hub access can serve it with a Hugging Face-compatible mirror that reads local git repos
(e.g. olah) and load it with HF_ENDPOINT and `revision="vX.Y.Z"`. Same rules as the Hub: one commit
per release, an existing tag is never moved, and main must still be the previous release.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from cards.release import VERSION_PATTERN, parse_version

from hf_scripts.publish import KEEP_REMOTE, PublishError, check_release_folder, release_files

# A fixed identity: the mirror's history should not depend on who ran the command.
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "hsi publish", "GIT_AUTHOR_EMAIL": "hsi@localhost",
                "GIT_COMMITTER_NAME": "hsi publish", "GIT_COMMITTER_EMAIL": "hsi@localhost"}


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | GIT_IDENTITY
    result = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise PublishError(f"git {' '.join(args)} failed in {repo}: {result.stderr.strip()}")
    return result.stdout.strip()


def mirror_plan(release_dir: Path, git_dir: Path, version: str) -> list[str]:
    """The file operations `publish_to_git` would do, as readable lines (reads only)."""
    check_release_folder(release_dir, version)
    lines = [] if (git_dir / ".git").is_dir() else [f"git init {git_dir}"]
    if (git_dir / ".git").is_dir() and version in git(git_dir, "tag", "--list", version).split():
        raise PublishError(f"{git_dir} already has tag {version}; a published version is never moved or reused")
    new = {path for path, _ in release_files(release_dir)}
    old = set(git(git_dir, "ls-files").splitlines()) if (git_dir / ".git").is_dir() else set()
    lines += [f"  upload {path} ({size} bytes)" for path, size in release_files(release_dir)]
    lines += [f"  delete {path}" for path in sorted(old - new - KEEP_REMOTE)]
    lines.append(f"commit and tag {version}")
    return lines


def publish_to_git(release_dir: Path, git_dir: Path, version: str) -> str:
    """Commit the release into `git_dir` (created if needed) and tag it; returns the commit id."""
    release_dir, git_dir = Path(release_dir), Path(git_dir)
    mirror_plan(release_dir, git_dir, version)  # all refusals happen before anything changes
    if not (git_dir / ".git").is_dir():
        git_dir.mkdir(parents=True, exist_ok=True)
        git(git_dir, "init", "--quiet", "--initial-branch=main")
    tags = [t for t in git(git_dir, "tag", "--list", "v*").split() if VERSION_PATTERN.match(t)]
    if tags:
        latest = git(git_dir, "rev-list", "-n", "1", max(tags, key=parse_version))
        if git(git_dir, "rev-parse", "HEAD") != latest:
            raise PublishError(f"{git_dir}: main moved past the latest release; refusing to publish over it")
    for tracked in git(git_dir, "ls-files").splitlines():
        if tracked not in KEEP_REMOTE:
            (git_dir / tracked).unlink(missing_ok=True)
    for path, _ in release_files(release_dir):
        (git_dir / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(release_dir / path, git_dir / path)
    git(git_dir, "add", "--all")
    git(git_dir, "commit", "--quiet", "--allow-empty", "-m", f"Release {version}")
    git(git_dir, "tag", "-a", version, "-m", f"Hard-Spurious-ImageNet {version}")
    return git(git_dir, "rev-parse", "HEAD")
