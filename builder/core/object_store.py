"""Output and input folders on object storage (`s3://`, `gs://`, `file://`) through fsspec.

A stage never writes objects piece by piece: it runs into a local staging folder (one per URL, under
`$HSI_STAGING`, default `~/.cache/hsi/staging`), which first receives what the store already holds
of that dataset folder (so a run resumes and a finished folder is recognised), and the result goes
up afterwards: every changed file, then the manifest (`_info.json`) last, so a reader never sees a
manifest listing an object that is not there yet. Credentials come from where the store's library
looks (AWS_* variables, profiles, instance roles; GOOGLE_APPLICATION_CREDENTIALS) and are never
written anywhere.

An input folder on a store (`hsi extract --source s3://BUCKET/imagenet`) is staged the same way,
the other way round (`stage_source`): the objects the run reads are copied into its staging folder
once, each name through the one name check, links never followed, and the readers list that
folder as any other; the store's URL is written nowhere in the output.

One run per folder on a store too: a lock object `.<name>.lock` beside the folder, created only if
absent (S3 `If-None-Match: *`, a local file opened exclusively). A store that cannot do that
conditional write is refused with the reason; a lock left by a killed run is named, to be removed
by hand once no run writes there.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from builder.core.errors import InputError, UsageError

OBJECT_SCHEMES = ("s3", "s3a", "gs", "gcs", "file")
MANIFEST_LAST = "_info.json"  # builder.core.manifest.MANIFEST_NAME, uploaded after everything else


class ObjectStoreError(UsageError):
    """An object store URL that cannot be used: a missing library, no access, no conditional write."""


class StoreLocked(ObjectStoreError):
    """Another run holds the folder's lock object."""


def is_object_url(text: object) -> bool:
    """Whether `text` is an object store URL this toolkit reads and writes (not hf://, which the
    publishing commands handle)."""
    scheme, sep, _ = str(text).partition("://")
    return bool(sep) and scheme.lower() in OBJECT_SCHEMES


def _filesystem(url: str):
    try:
        import fsspec

        return fsspec.core.url_to_fs(url)
    except ImportError as exc:
        scheme = url.partition("://")[0]
        raise ObjectStoreError(
            f"{url}: the {scheme}:// store needs {exc.name}, which is not installed; install it with: "
            "pip install 'hard-spurious-imagenet[cluster]' (s3fs; gcsfs for gs://)"
        ) from None
    except ValueError as exc:
        raise ObjectStoreError(f"{url}: not a usable object store URL ({exc})") from None


@dataclass(frozen=True)
class StoreEntry:
    """One listed entry: `kind` ("file", "link", "directory", ...), size and the store's version
    of its content (S3's ETag, GCS's md5 or generation, a local file's mtime)."""

    kind: str
    size: int
    version: str


def _version(info: dict) -> str:
    for key in ("ETag", "etag", "md5Hash", "generation", "mtime", "LastModified"):
        if info.get(key) not in (None, ""):
            return str(info[key])
    return ""


@dataclass(frozen=True)
class StoreFolder:
    """A folder on an object store: `url` as given, its filesystem and path inside it."""

    url: str

    @property
    def fs_and_path(self):
        fs, path = _filesystem(self.url.rstrip("/"))
        return fs, path

    def child(self, *names: str) -> StoreFolder:
        return StoreFolder("/".join([self.url.rstrip("/"), *names]))

    def entries(self) -> dict[str, StoreEntry]:
        """Every entry below the folder by relative name ({} when there is none): objects, and on
        a file:// store its links (listed, never followed)."""
        fs, root = self.fs_and_path
        try:
            found = fs.find(root, detail=True)
        except FileNotFoundError:
            return {}
        except PermissionError as exc:
            raise ObjectStoreError(f"{self.url}: access denied ({exc}); check the store's credentials") from None
        listing = {}
        for path, info in found.items():
            relative = PurePosixPath(path).relative_to(PurePosixPath(root)).as_posix()
            if relative != ".":
                listing[relative] = StoreEntry(
                    "link" if info.get("islink") else str(info.get("type", "file")),
                    int(info.get("size") or 0),
                    _version(info),
                )
        return listing

    def files(self) -> dict[str, int]:
        """{relative name: size} of every object below the folder ({} when there is none)."""
        return {name: entry.size for name, entry in self.entries().items() if entry.kind == "file"}

    def read_bytes(self, name: str) -> bytes | None:
        fs, root = self.fs_and_path
        try:
            return fs.cat_file(f"{root}/{name}")
        except FileNotFoundError:
            return None

    def download(self, name: str, local: Path) -> None:
        fs, root = self.fs_and_path
        local.parent.mkdir(parents=True, exist_ok=True)
        partial = local.with_name(f".{local.name}.{os.getpid()}.download")
        fs.get_file(f"{root}/{name}", str(partial))
        os.replace(partial, local)

    def upload(self, local: Path, name: str) -> None:
        fs, root = self.fs_and_path
        fs.put_file(str(local), f"{root}/{name}")

    def remove(self, name: str) -> None:
        fs, root = self.fs_and_path
        try:
            fs.rm_file(f"{root}/{name}")
        except FileNotFoundError:
            pass


def staging_root() -> Path:
    return Path(os.environ.get("HSI_STAGING") or Path.home() / ".cache" / "hsi" / "staging")


def staging_folder(url: str) -> Path:
    """The local folder a URL's files are staged in: below a folder named by the URL's hash, under
    the URL's last name (readers that take a folder's name for its config see the same name)."""
    url = url.rstrip("/")
    digest = hashlib.sha256(url.encode()).hexdigest()[:24]
    name = url.rpartition("/")[2]
    plain = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}", name) and name not in (".", "..")
    return staging_root() / digest / (name if plain else "root")


def _is_temporary(name: str) -> bool:
    leaf = PurePosixPath(name).name
    return leaf.endswith((".tmp", ".download")) or leaf.startswith(".")


def pull_folder(store: StoreFolder, local: Path) -> int:
    """Copy every object of `store` into `local` unless the local file is the one last pulled or
    pushed (same size and sha256 as recorded); the number copied."""
    from builder.core.hashing import sha256_file

    known = _read_pushed(store)
    copied = 0
    for name, size in sorted(store.files().items()):
        if _is_temporary(name) or ".." in PurePosixPath(name).parts:
            continue
        target = local.joinpath(*PurePosixPath(name).parts)
        if target.is_file() and target.stat().st_size == size and known.get(name) == [size, sha256_file(target)]:
            continue
        store.download(name, target)
        known[name] = [size, sha256_file(target)]
        copied += 1
    _write_pushed(store, known)
    return copied


def _pushed_record(store: StoreFolder) -> Path:
    """Where the sizes and digests of the files last pulled from or pushed to `store` are kept
    (beside the staging folders, never in an output folder), so an unchanged file is not sent again."""
    digest = hashlib.sha256(store.url.rstrip("/").encode()).hexdigest()[:24]
    return staging_root() / "pushed" / f"{digest}.json"


def _read_pushed(store: StoreFolder) -> dict:
    try:
        data = json.loads(_pushed_record(store).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_pushed(store: StoreFolder, known: dict) -> None:
    path = _pushed_record(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(known, sort_keys=True), "utf-8")
    os.replace(tmp, path)


def send_shard(store_url: str, out_dir: Path, filename: str, state_name: str) -> None:
    """Where a Ray actor writes to a store: its finished shard, then the shard's state record, go up;
    the local copies (temporaries on that node) are removed."""
    store = StoreFolder(store_url)
    tar, state = Path(out_dir) / filename, Path(out_dir) / state_name
    store.upload(tar, filename)
    store.upload(state, state_name)
    tar.unlink()
    state.unlink()


def push_folder(local: Path, store: StoreFolder) -> int:
    """Upload every file of `local` the store lacks or holds with another content, the manifest last;
    a changed manifest is taken down first, so no reader pairs the old one with new shards. Objects
    of the folder that the local copy no longer has (an --overwrite) are removed at the end."""
    from builder.core.hashing import sha256_file

    remote = store.files()
    names = sorted(
        path.relative_to(local).as_posix()
        for path in local.rglob("*")
        if path.is_file() and not path.is_symlink() and not _is_temporary(path.relative_to(local).as_posix())
    )
    pushed = _read_pushed(store)
    current = {name: [(local / name).stat().st_size, sha256_file(local / name)] for name in names}
    manifest_changed = current.get(MANIFEST_LAST) != pushed.get(MANIFEST_LAST)
    if MANIFEST_LAST in remote and MANIFEST_LAST in current and manifest_changed:
        store.remove(MANIFEST_LAST)
        remote.pop(MANIFEST_LAST)
    sent = 0
    for name in [n for n in names if n != MANIFEST_LAST] + ([MANIFEST_LAST] if MANIFEST_LAST in names else []):
        if remote.get(name) == current[name][0] and pushed.get(name) == current[name]:
            continue
        store.upload(local / name, name)
        sent += 1
    for name in sorted(set(remote) - set(names)):
        if not _is_temporary(name):
            store.remove(name)
    _write_pushed(store, current)
    return sent


def lock_object(store: StoreFolder) -> StoreFolder:
    """The lock object of a store folder: `.<name>.lock` beside it."""
    url = store.url.rstrip("/")
    parent, _, name = url.rpartition("/")
    if "://" not in parent or not name:
        raise ObjectStoreError(f"{store.url}: name a folder inside a bucket (s3://BUCKET/FOLDER), not a bucket")
    return StoreFolder(f"{parent}/.{name}.lock")


def _create_only(fs, path: str, data: bytes) -> bool:
    """Write `path` only if it does not exist; False when it exists. Refuses a store that cannot."""
    try:
        fs.pipe_file(path, data, mode="create")
    except FileExistsError:
        return False
    except TypeError:
        raise ObjectStoreError(
            f"{type(fs).__name__} cannot write an object only if it is absent, so two runs could write one "
            "folder; write to a local folder or to a store that supports conditional writes (S3, file://)"
        ) from None
    except PermissionError as exc:
        raise ObjectStoreError(f"{path}: access denied ({exc}); check the store's credentials") from None
    return True


@contextmanager
def exclusive_store_folder(store: StoreFolder) -> Iterator[None]:
    """Hold the folder's lock object for the block (one run per folder on a store)."""
    lock = lock_object(store)
    fs, path = lock.fs_and_path
    fs.makedirs(path.rpartition("/")[0], exist_ok=True)
    holder = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "since": int(time.time())})
    if not _create_only(fs, path, holder.encode()):
        try:
            text = fs.cat_file(path).decode("utf-8", "replace").strip()
        except FileNotFoundError:
            text = "a run that has just ended"
        raise StoreLocked(
            f"{store.url} is being written by another hsi run ({text[:200]}); wait for it to finish, or if no run "
            f"writes there (a killed run), remove the lock object {lock.url} and run the same command again"
        )
    # a store that ignores the condition would accept this second write: refuse to rely on it
    if _create_only(fs, path, b"probe"):
        fs.pipe_file(path, holder.encode())
        fs.rm_file(path)
        raise ObjectStoreError(
            f"{store.url}: the store ignores conditional writes (If-None-Match), so it cannot hold a run's lock; "
            "write to a local folder or to a store that honours them"
        )
    try:
        yield
    finally:
        try:
            fs.rm_file(path)
        except FileNotFoundError:
            pass


@dataclass(frozen=True)
class StoreMirror:
    """A stage output that lives on a store: `local` is the staging folder standing for `url`."""

    local: Path
    url: str

    def store_of(self, out_dir: Path) -> StoreFolder:
        """The store folder of a local output folder below `local`."""
        try:
            relative = Path(out_dir).resolve().relative_to(self.local.resolve())
        except ValueError:
            raise InputError(f"{out_dir} is not inside the staging folder of {self.url}") from None
        return StoreFolder(self.url).child(*relative.parts) if relative.parts else StoreFolder(self.url)

    @contextmanager
    def mirrored(self, out_dir: Path) -> Iterator[StoreFolder]:
        """Lock the folder on the store, stage what it holds, run the block, push the result (the
        manifest last). A failed block pushes nothing: the staging copy keeps its finished shards."""
        store = self.store_of(out_dir)
        with exclusive_store_folder(store):
            pull_folder(store, Path(out_dir))
            yield store
            push_folder(Path(out_dir), store)


def stage_out(out: str | Path) -> tuple[Path, StoreMirror | None]:
    """The local folder a stage writes for `--out`, and its mirror when `--out` is a store URL."""
    if is_object_url(out):
        url = str(out).rstrip("/")
        local = staging_folder(url)
        local.mkdir(parents=True, exist_ok=True)
        return local, StoreMirror(local, url)
    return Path(out), None


def fetch_folder(url: str) -> Path:
    """A local copy of the dataset folder at `url` (its objects, into its staging folder), for the
    readers that check a folder on disk (validate, release); the caller checks it as any folder."""
    store = StoreFolder(url.rstrip("/"))
    local = staging_folder(store.url)
    if not store.files():
        raise InputError(f"{url} holds nothing (or cannot be listed); check the URL and the store's credentials")
    pull_folder(store, local)
    return local


@dataclass
class StagedSource:
    """An input folder of a store copied to disk: `root` holds the objects a run reads, `refused`
    the (name, why) of those not copied: a name that cannot become a path, a link."""

    url: str
    root: Path
    refused: list[tuple[str, str]]
    fetched: int


def stage_source(url: str, wanted: Callable[[str, bool], bool]) -> StagedSource:
    """Copy the objects of the input folder at `url` that `wanted(relative name, is an object)`
    accepts into its staging folder, where the readers list them as any folder: an object already
    there (the same size and version as last copied, the file untouched since) is not fetched again,
    and a staged file `wanted` accepts whose object is gone is removed, so the staging folder lists
    what the store holds (files other runs staged for other names, another split's, are left alone).
    Each name passes the one name check before it becomes a path; links (file://) are never followed."""
    from builder.core.locks import held_lock
    from builder.core.names import UnsafeNameError, check_path_component

    store = StoreFolder(url.rstrip("/"))
    entries = store.entries()
    if not entries:
        raise InputError(
            f"{store.url} holds nothing: no bucket or folder of that name, or it cannot be listed; "
            "check the URL and the store's credentials"
        )
    local = staging_folder(store.url)
    local.mkdir(parents=True, exist_ok=True)
    busy = f"{store.url} is being staged in {local} by another hsi run (pid {{holder}}); wait for it to finish"
    refused: list[tuple[str, str]] = []
    keep: set[Path] = set()
    fetched = 0
    with held_lock(local.parent / f".{local.name}.lock", busy):
        known = _read_pushed(store)
        # what other runs staged (another split's objects) stays, with its record
        copied = {name: stamp for name, stamp in known.items() if not wanted(name, True)}
        for name, listed in sorted(entries.items()):
            if listed.kind == "directory" or not wanted(name, listed.kind == "file"):
                continue
            try:
                parts = [check_path_component(part, "object name") for part in name.split("/")]
            except UnsafeNameError as exc:
                refused.append((name, str(exc)))
                continue
            if listed.kind != "file":
                refused.append((name, f"{name} is a {listed.kind}, not an object; links are not followed"))
                continue
            target = local.joinpath(*parts)
            keep.add(target)
            stamp = [listed.size, listed.version]
            if not (target.is_file() and not target.is_symlink() and known.get(name) == [*stamp, _mtime(target)]):
                store.download(name, target)
                fetched += 1
            copied[name] = [*stamp, _mtime(target)]
        for path in sorted(local.rglob("*")):
            name = path.relative_to(local).as_posix()
            if (path.is_file() or path.is_symlink()) and path not in keep and wanted(name, True):
                path.unlink()  # gone from the store (or never its): not listed again
        _write_pushed(store, copied)
    return StagedSource(store.url, local, refused, fetched)


def _mtime(path: Path) -> int:
    return path.stat().st_mtime_ns
