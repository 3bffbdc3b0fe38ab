"""A fake cue-conflict folder in model-vs-human's layout: 16 class folders of
`<shape><i>-<texture><j>.png`, small random images (the real set is 1,280 224 px PNGs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from evaluation.probes.shape import CATEGORIES


def write_cue_conflict(root: Path, per_class: int = 1, same_cue: bool = True, size: int = 64) -> Path:
    """Each shape category gets `per_class` stimuli with the next categories' textures; with
    `same_cue`, the first category also gets one image whose shape equals its texture."""
    root = Path(root)
    rng = np.random.default_rng(0)
    for c, shape in enumerate(CATEGORIES):
        folder = root / shape
        folder.mkdir(parents=True, exist_ok=True)
        names = [f"{shape}{i + 1}-{CATEGORIES[(c + 1 + i) % 16]}{i + 1}.png" for i in range(per_class)]
        if same_cue and c == 0:
            names.append(f"{shape}9-{shape}9.png")
        for name in names:
            Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(folder / name)
    return root
