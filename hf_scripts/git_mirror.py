"""`hsi publish --to-git DIR`: a release as a commit and tag of a local git repository.

The repository is laid out like the Hub repo (the release folder's files at its root), so a lab
without Hub access can serve it with a Hugging Face-compatible mirror that reads local git repos
(e.g. olah) and load it with HF_ENDPOINT and `revision="vX.Y.Z"`. Same rules as the Hub: one commit
per release, an existing tag is never moved, and main must still be the previous release.

Safety (issue 11):
- Only the release's own paths are committed: the commit's tree is built from the release folder
  in a private index (`GIT_INDEX_FILE`), never from the mirror's working tree, so a file planted in
  DIR is never picked up; DIR must be new, empty, or a mirror with no untracked files (ignored
  ones included: a checkout would overwrite a file hidden by `.git/info/exclude` as readily).
- Paths are made absolute once (git runs with `-C DIR`), and a first publish that fails before its
  tag removes the `.git` it made.
- One run per mirror: the toolkit's one lock (builder.core.locks) on `.git/hsi-publish.lock`; a
  second run is refused with the first one's pid.
- Before the commit, every shard blob is hashed again and compared with `_release.json`.
- Shards (`*.tar`) are stored the way Hub repos store them, in git LFS: the tree holds a
  `.gitattributes` (`*.tar filter=lfs diff=lfs merge=lfs -text`) and, for each shard, an LFS pointer
  (`version https://git-lfs.github.com/spec/v1`, `oid sha256:...`, `size N`); the bytes go to
  `.git/lfs/objects/aa/bb/<oid>`, where `git lfs push` (to push the mirror) and olah (to serve it)
  find them. The pointers are written here rather than by git-lfs, so no git-lfs is needed to build
  or serve a mirror; pushing it needs git-lfs on the pushing machine.
- A kill leaves the mirror recoverable: main moves by one compare-and-swap `update-ref`; when main
  is already exactly this release (a kill between commit and tag) the next run only tags it; a
  working-tree checkout of ours that was killed (marked by `.git/hsi-checkout`) is finished and its
  stale `index.lock` removed.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

from builder.core.hashing import copy_checked, sha256_file
from builder.core.locks import held_lock
from cards.release import VERSION_PATTERN, parse_version
from hf_scripts.publish import KEEP_REMOTE, PublishError, check_release_folder, release_shards

# A fixed identity: the mirror's history should not depend on who ran the command.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "hsi publish",
    "GIT_AUTHOR_EMAIL": "hsi@localhost",
    "GIT_COMMITTER_NAME": "hsi publish",
    "GIT_COMMITTER_EMAIL": "hsi@localhost",
}
LOCK_NAME = "hsi-publish.lock"  # inside .git: held (flock) for the whole run
CHECKOUT_MARK = "hsi-checkout"  # inside .git: present while we update the working tree
PRIVATE_INDEX = re.compile(r"hsi-index\.[0-9]+(\.lock)?")
GITATTRIBUTES = ".gitattributes"
LFS_PATTERN = "*.tar"
LFS_ATTRIBUTES = f"{LFS_PATTERN} filter=lfs diff=lfs merge=lfs -text\n"
LFS_SPEC = "https://git-lfs.github.com/spec/v1"


def lfs_pointer(sha256: str, size: int) -> str:
    """The git LFS pointer of a file: what the tree holds in place of its bytes."""
    return f"version {LFS_SPEC}\noid sha256:{sha256}\nsize {size}\n"


def lfs_object_path(git_dir: Path, sha256: str) -> Path:
    return git_dir / ".git" / "lfs" / "objects" / sha256[:2] / sha256[2:4] / sha256


def in_lfs(path: str) -> bool:
    return path.endswith(".tar")


def store_lfs_object(git_dir: Path, source: Path, expected: str, path: str) -> None:
    """Copy `source` into the mirror's LFS store under its sha256, checking the copy is `expected`."""
    target = lfs_object_path(git_dir, expected)
    if target.is_file() and not target.is_symlink() and sha256_file(target) == expected:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    copy_checked(
        source,
        target,
        expected,
        lambda _digest: PublishError(
            f"{path} as staged in {git_dir} differs from its sha256 in _release.json; the release "
            "folder changed while publishing or is damaged: rebuild it, nothing was committed"
        ),
    )


def _env(extra: dict | None = None) -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | GIT_IDENTITY | (extra or {})


def git(repo: Path, *args: str, env: dict | None = None, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["git", "--no-optional-locks", "-C", str(repo), *args],
        env=_env(env),
        capture_output=True,
        text=True,
        input=stdin,
    )
    if result.returncode != 0:
        raise PublishError(f"git {' '.join(args)} failed in {repo}: {result.stderr.strip()}")
    return result.stdout.strip()


def _head(git_dir: Path) -> str | None:
    result = subprocess.run(
        ["git", "-C", str(git_dir), "rev-parse", "--verify", "-q", "HEAD^{commit}"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    return result.stdout.strip() or None


def _is_mirror(git_dir: Path) -> bool:
    return (git_dir / ".git").is_dir() and not (git_dir / ".git").is_symlink()


def check_mirror_folder(git_dir: Path) -> list[str]:
    """Refuse a folder we must not commit into; return the lines of any recovery to do."""
    if git_dir.is_symlink():
        raise PublishError(
            f"--to-git {git_dir} is a link; a mirror is never written through a link: pass the folder it leads to"
        )
    if not git_dir.exists():
        return [f"git init {git_dir}"]
    if not git_dir.is_dir():
        raise PublishError(f"{git_dir} is not a folder")
    if not _is_mirror(git_dir):
        if any(git_dir.iterdir()):
            raise PublishError(
                f"{git_dir} is not empty and is not a git mirror; give a new or empty folder, or a mirror "
                "that `hsi publish --to-git` made"
            )
        return [f"git init {git_dir}"]
    if (git_dir / ".git" / CHECKOUT_MARK).exists():
        return [f"finish the interrupted checkout of {git_dir}"]  # its dirt is ours: it is redone first
    status = git(git_dir, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    entries = [e for e in status.split("\0") if e]
    untracked = untracked_files(git_dir)  # those hidden by .gitignore or .git/info/exclude too
    if untracked:
        hidden = sorted(set(untracked) - {e[3:] for e in entries if e.startswith("??")})
        raise PublishError(
            f"{git_dir} has files that are not part of any release: {', '.join(untracked[:10])}"
            + (f" (hidden from git by an ignore rule: {', '.join(hidden[:10])})" if hidden else "")
            + "; move them out of the mirror (a publish checks out each release over its working tree, and "
            "nothing in it is committed but the release's own files)"
        )
    if entries:
        raise PublishError(
            f"{git_dir} has uncommitted changes to {', '.join(e[3:] for e in entries[:10])}; inspect them, "
            f"then `git -C {git_dir} reset --hard` to return the mirror to its last release"
        )
    return []


def untracked_files(git_dir: Path) -> list[str]:
    """Every file of the working tree git does not track, ignored ones included (no exclude rules are
    applied): none of them was written by a publish, and a checkout could overwrite any of them."""
    return sorted(p for p in git(git_dir, "ls-files", "--others", "-z").split("\0") if p)


def refuse_overwriting_foreign(git_dir: Path) -> None:
    """Before finishing an interrupted checkout (`reset --hard`): an untracked file where HEAD has a
    file (or a folder) is overwritten by it, so it must be the one HEAD holds (written by the killed
    checkout); any other is someone's, and is refused by name."""
    head = _head(git_dir)
    if head is None:
        return
    tree = {}  # path -> blob id of HEAD's files ("MODE blob OID\tPATH" lines)
    for line in git(git_dir, "ls-tree", "-r", "-z", "--full-tree", head).split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            tree[path] = meta.split()[2]
    folders = {path.rsplit("/", 1)[0] + "/" for path in tree if "/" in path}
    foreign = []
    for path in untracked_files(git_dir):
        if path in tree:
            if git(git_dir, "hash-object", "--no-filters", "--", path) != tree[path]:
                foreign.append(path)
        elif path + "/" in folders or any(path.startswith(t + "/") for t in tree):
            foreign.append(path)
    if foreign:
        raise PublishError(
            f"{git_dir} has files the interrupted checkout would overwrite and that no publish wrote: "
            f"{', '.join(foreign[:10])}; move them out of the mirror, then publish again"
        )


def _latest_release(git_dir: Path) -> str | None:
    tags = [t for t in git(git_dir, "tag", "--list", "v*").split() if VERSION_PATTERN.match(t)]
    return git(git_dir, "rev-list", "-n", "1", max(tags, key=parse_version)) if tags else None


def _tree_of(git_dir: Path, commit: str) -> str:
    return git(git_dir, "rev-parse", f"{commit}^{{tree}}")


def _tagging_only(git_dir: Path, head: str | None, tree: str | None) -> bool:
    """True when main is already exactly this release, right after the previous one (a run killed
    between commit and tag): it only needs its tag."""
    if head is None or tree is None or _tree_of(git_dir, head) != tree:
        return False
    latest = _latest_release(git_dir)
    parents = git(git_dir, "rev-list", "--parents", "-n", "1", head).split()[1:]
    return parents == ([latest] if latest else parents)


def mirror_plan(release_dir: Path, git_dir: Path, version: str) -> list[str]:
    """The file operations `publish_to_git` would do, as readable lines (reads only: blobs are
    hashed into a throw-away index outside the mirror, never written into it)."""
    return _plan(Path(release_dir).absolute(), Path(git_dir).absolute(), version, write=False)[0]


def _plan(release_dir: Path, git_dir: Path, version: str, write: bool) -> tuple[list[str], str | None, bool]:
    """(lines, the release's tree or None for a new mirror, whether main only needs the tag)."""
    checked = check_release_folder(release_dir, version)
    lines = check_mirror_folder(git_dir)
    meta, files = checked.meta, checked.files
    if not _is_mirror(git_dir):
        lines += [f"  upload {path} ({size} bytes)" for path, size in files]
        lfs = f"  git LFS for {LFS_PATTERN} ({GITATTRIBUTES}; the shards' bytes in .git/lfs/objects)"
        return lines + [lfs, f"commit and tag {version}"], None, False
    if version in git(git_dir, "tag", "--list", version).split():
        raise PublishError(f"{git_dir} already has tag {version}; a published version is never moved or reused")
    head = _head(git_dir)
    tree = _release_tree(git_dir, release_dir, files, meta, write) if head or write else None
    if _tagging_only(git_dir, head, tree):
        return lines + [f"main ({head}) is already this release: tag it {version}"], tree, True
    latest = _latest_release(git_dir)
    if latest is not None and head != latest:
        raise PublishError(f"{git_dir}: main moved past the latest release; refusing to publish over it")
    old = set(git(git_dir, "ls-tree", "-r", "--name-only", head).splitlines()) if head else set()
    lines += [f"  upload {path} ({size} bytes)" for path, size in files]
    lines.append(f"  git LFS for {LFS_PATTERN} ({GITATTRIBUTES}; the shards' bytes in .git/lfs/objects)")
    lines += [f"  delete {path}" for path in sorted(old - {path for path, _ in files} - KEEP_REMOTE)]
    return lines + [f"commit and tag {version}"], tree, False


def _release_tree(git_dir: Path, release_dir: Path, files: list[tuple[str, int]], meta: dict, write: bool) -> str:
    """The tree of exactly the release's files (shards as LFS pointers, plus `.gitattributes`), built in
    a private index. With `write`, the blobs are written into the mirror, every shard is copied into
    its LFS store and the copy's sha256 checked against `_release.json`; without, the pointers are
    made from `_release.json` (a dry run reads no shard)."""
    shards = release_shards(meta)
    with tempfile.TemporaryDirectory(prefix="hsi-index-") as scratch:
        index = git_dir / ".git" / f"hsi-index.{os.getpid()}" if write else Path(scratch) / "index"
        env = {"GIT_INDEX_FILE": str(index)}
        sources = []  # what each tree entry's blob is made of
        for number, (path, size) in enumerate(files):
            if not in_lfs(path):
                sources.append(release_dir.resolve() / path)
                continue
            expected = shards.get(path)
            if expected is None:
                raise PublishError(f"{path} is a .tar that _release.json does not list; rebuild the release")
            if write:
                store_lfs_object(git_dir, release_dir / path, expected, path)
            pointer = Path(scratch) / f"pointer-{number}"
            pointer.write_text(lfs_pointer(expected, size), "ascii")
            sources.append(pointer)
        attributes = Path(scratch) / "gitattributes"
        attributes.write_text(LFS_ATTRIBUTES, "ascii")
        entries = [path for path, _ in files] + [GITATTRIBUTES]
        try:
            oids = git(
                git_dir,
                "hash-object",
                *(["-w"] if write else []),
                "--no-filters",
                "--stdin-paths",
                stdin="".join(f"{source}\n" for source in [*sources, attributes]),
            ).split()
            git(
                git_dir,
                "update-index",
                "--add",
                "--index-info",
                env=env,
                stdin="".join(f"100644 blob {oid}\t{path}\n" for oid, path in zip(oids, entries)),
            )
            return git(git_dir, "write-tree", *([] if write else ["--missing-ok"]), env=env)
        finally:
            index.unlink(missing_ok=True)


def mirror_lock(git_dir: Path):
    """One publish per mirror at a time (the toolkit's one lock, on `.git/hsi-publish.lock`); the lock
    goes with the process, even on a kill."""
    busy = (
        f"{git_dir} is being published by another `hsi publish` (pid {{holder}}); wait for it to finish, then run again"
    )
    return held_lock(git_dir / ".git" / LOCK_NAME, busy)


def _recover(git_dir: Path) -> None:
    """Under the lock, anything a killed run of ours left is stale: private indexes go, and an
    interrupted checkout is finished (its index.lock removed first)."""
    dot_git = git_dir / ".git"
    for entry in dot_git.iterdir():
        if PRIVATE_INDEX.fullmatch(entry.name) and entry.is_file():
            entry.unlink()
    if (dot_git / CHECKOUT_MARK).exists():
        (dot_git / "index.lock").unlink(missing_ok=True)
        refuse_overwriting_foreign(git_dir)
        _checkout(git_dir)


def _checkout(git_dir: Path) -> None:
    """Bring the working tree to HEAD (a view for people; the commits never come from it) and
    drop the mark that said it lags behind."""
    git(git_dir, "reset", "--hard", "--quiet")
    (git_dir / ".git" / CHECKOUT_MARK).unlink(missing_ok=True)


def publish_to_git(release_dir: Path, git_dir: Path, version: str) -> str:
    """Commit the release into `git_dir` (created if needed) and tag it; returns the commit id.

    Both folders are made absolute once (git runs with `-C`, so a relative path handed to it would be
    read from inside the mirror). A mirror this run creates is removed again if the run fails before
    its tag: no half-made `.git` is left behind."""
    release_dir, git_dir = Path(release_dir).absolute(), Path(git_dir).absolute()
    created: list[Path] = []
    if not _is_mirror(git_dir):
        check_release_folder(release_dir, version)  # refusals before the init (checked again under the lock)
        check_mirror_folder(git_dir)
        created = [folder for folder in [git_dir, *git_dir.parents] if not folder.exists()]
        git_dir.mkdir(parents=True, exist_ok=True)
        created.insert(0, git_dir / ".git")
        try:
            git(git_dir, "init", "--quiet", "--initial-branch=main")
        except BaseException:
            _remove_created(created)
            raise
    try:
        return _publish_locked(release_dir, git_dir, version)
    except BaseException:
        if created and not _has_tag(git_dir, version):
            _remove_created(created)
        raise


def _has_tag(git_dir: Path, version: str) -> bool:
    try:
        return bool(git(git_dir, "tag", "--list", version))
    except PublishError:
        return False


def _remove_created(created: list[Path]) -> None:
    """Remove what a failed first publish made: its `.git`, then the folders it created (if empty)."""
    import shutil

    dot_git, *folders = created
    if dot_git.is_dir() and not dot_git.is_symlink():
        shutil.rmtree(dot_git)
    for folder in folders:
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            folder.rmdir()


def _publish_locked(release_dir: Path, git_dir: Path, version: str) -> str:
    with mirror_lock(git_dir):
        _recover(git_dir)
        if (git_dir / ".git" / "index.lock").exists():
            raise PublishError(
                f"{git_dir}/.git/index.lock exists: a git command runs in the mirror, or one was killed; "
                "if none runs, remove the file and publish again"
            )
        _, tree, tag_only = _plan(release_dir, git_dir, version, write=True)  # every refusal, now under the lock
        head = _head(git_dir)
        commit = head
        # From here the working tree may lag behind main: the mark tells the next run that the
        # difference is ours to check out, not someone's changes.
        (git_dir / ".git" / CHECKOUT_MARK).write_text(f"{os.getpid()}\n")
        if not tag_only:
            commit = git(git_dir, "commit-tree", tree, *(["-p", head] if head else []), "-m", f"Release {version}")
            branch = git(git_dir, "symbolic-ref", "HEAD")
            git(git_dir, "update-ref", "-m", f"hsi publish {version}", branch, commit, head or "")  # compare-and-swap
        git(git_dir, "tag", "-a", version, commit, "-m", f"Hard-Spurious-ImageNet {version}")
        _checkout(git_dir)
    return commit
