"""Where `hsi train` writes: one `OwnedFolder` (kind "train") for the whole `--out` (its lock, nothing
through a link, no user's file overwritten, every file recorded with its sha256), and a `RunFolder`
view of it per run (`<method>/seed-<s>`, JTT's `stage1`, DFR's `erm`). Under torchrun only rank 0
claims and writes; the other ranks get a view that only reads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from builder.core.names import inside
from builder.core.owned import FolderView, OwnedFolder

KIND = "train"


class RunFolder(FolderView):
    """The folder `prefix` inside an owned `--out`; `owned` is None on the ranks that only read."""

    def child(self, name: str) -> RunFolder:
        return RunFolder(self.owned, self.root, self.relative(name))

    def existing(self, name: str) -> Path | None:
        """The file `name` of this run, or None. A link on the way, or a file this command did not write
        (or that changed since), is refused by name, never read."""
        relative = self.relative(name)
        target = inside(self.root, *relative.split("/")) if self.owned is None else self.owned.path(relative)
        return target if target.exists() or target.is_symlink() else None

    def save_torch(self, name: str, payload: dict) -> Path:
        import torch

        with self.writing(name) as tmp:
            torch.save(payload, tmp)
        return self.path / name


@contextmanager
def run_folder(out: Path | str | RunFolder) -> Iterator[RunFolder]:
    """`out` as a RunFolder: one given as it is (the command holds its `--out`), a path claimed here for
    the block. RANK is set by torchrun before the process group exists."""
    if isinstance(out, RunFolder):
        yield out
    elif int(os.environ.get("RANK", "0")) != 0:
        yield RunFolder(None, Path(out))
    else:
        with OwnedFolder(Path(out), KIND) as owned:
            yield RunFolder(owned, Path(out))
