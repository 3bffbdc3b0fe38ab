"""Where `hsi train` writes: one `OwnedFolder` (kind "train") for the whole `--out`, and a `RunFolder`
view of it per run (`<method>/seed-<s>`, JTT's `stage1`, DFR's `erm`), so every checkpoint, settings
file and score goes through the same rules: one run per `--out` (its lock), nothing written through a
link, no user's file overwritten, every file recorded with its sha256.

Under torchrun only rank 0 writes, so only rank 0 claims the folder; the other ranks get a view that
reads (a resumed `last.pt`, the final `best.pt`) and refuses to write.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from builder.core.names import inside
from builder.core.owned import FolderView, OwnedFolder

KIND = "train"


def writing_rank() -> bool:
    """Whether this process writes: rank 0 under torchrun (RANK is set before the process group
    exists, so this holds before `init_distributed`), and every plain process."""
    return int(os.environ.get("RANK", "0")) == 0


class RunFolder(FolderView):
    """The folder `prefix` inside an owned `--out` (the whole of it for an empty prefix); `owned` is
    None on the ranks that only read."""

    def __init__(self, owned: OwnedFolder | None, root: Path, prefix: str = "") -> None:
        super().__init__(owned, root, prefix)

    @property
    def name(self) -> str:
        return self.path.name

    def child(self, name: str) -> RunFolder:
        return RunFolder(self.owned, self.root, self.relative(name))

    def existing(self, name: str) -> Path | None:
        """The file `name` of this run, or None when there is none. A link on the way, or a file this
        command did not write (or that changed since), is refused by name, never read."""
        relative = self.relative(name)
        if self.owned is None:
            target = inside(self.root, *relative.split("/"))
        else:
            target = self.owned.path(relative)
        return target if target.exists() or target.is_symlink() else None

    def save_torch(self, name: str, payload: dict) -> Path:
        import torch

        with self.writing(name) as tmp:
            torch.save(payload, tmp)
        return self.path / name


@contextmanager
def run_folder(out: Path | str | RunFolder) -> Iterator[RunFolder]:
    """`out` as a RunFolder: a RunFolder as given (the command already holds its `--out`), a path
    claimed here for the length of the block (the Python API, or a run started on its own)."""
    if isinstance(out, RunFolder):
        yield out
        return
    root = Path(out)
    if not writing_rank():
        yield RunFolder(None, root)
        return
    with OwnedFolder(root, KIND) as owned:
        yield RunFolder(owned, root)
