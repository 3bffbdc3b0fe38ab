"""The `patchmatch` inpainter: PatchMatch (Barnes et al. 2009) through the `patchmatch-cython`
package, a model-free fill that copies the surrounding texture into the hole where Telea smears
its rim inward.

Scale (`--inpaint-scale`): `canvas` (the default) fills the photo as compose will see it, stretched
to the 224 x 224 canvas (a side already shorter stays as it is), then upscales the fill back and
pastes it only inside the mask, so every pixel outside the mask stays the photo's own and the fill
costs about the same for any photo size;
`full` fills at the native resolution; a number N fills at an N-px short side (never enlarged).

Determinism: each image is seeded from its source id (sha256), so its fill depends on nothing else:
not its batch, the worker count or the runner. Where too few source pixels are left to copy from
(the package refuses a mask covering the whole image, and a sliver of source only tiles itself),
the image is filled by Telea instead and the fallback is returned, for extract to record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version

import cv2
import numpy as np

from builder.backends.base import BackendInfo, Inpainter, InpaintFallback
from builder.backends.classical import TeleaInpainter
from builder.backends.registry import from_setting, register_backend
from builder.core.config import ConfigError
from builder.core.imaging import resize_rgb
from builder.formats.parts import PARTS_CANVAS_FILTER, PARTS_CANVAS_SIZE

SCALES = ("canvas", "full")
FALLBACK_REASON = "inpaint-fallback"
# A downscaled pixel holds colour from about two output pixels around it (bicubic support), so the
# working mask is grown by that much: no object colour survives at the hole's rim to be copied.
RIM_PIXELS = 2


def parse_scale(value: str | int) -> str | int:
    """`canvas`, `full` or a short side in pixels (a positive whole number, as text or int)."""
    if isinstance(value, str) and value in SCALES:
        return value
    text = str(value)
    if not isinstance(value, bool) and text.isdigit() and int(text) >= 8:
        return int(text)
    raise ConfigError(f"--inpaint-scale must be canvas, full or a short side of 8 px or more, got {value!r}")


@dataclass(frozen=True)
class PatchMatchConfig:
    scale: str | int = from_setting("inpaint_scale", "canvas")
    patch_size: int = from_setting("patchmatch_patch_size", 5)  # odd side of the patches compared
    # fall back to Telea when less of the working image than this is left to copy from
    min_source_fraction: float = from_setting("patchmatch_min_source", 0.05)
    telea_radius: int = from_setting("telea_radius", 3)  # the fallback's radius

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", parse_scale(self.scale))
        if not (isinstance(self.patch_size, int) and self.patch_size >= 3 and self.patch_size % 2 == 1):
            raise ConfigError(
                f"--patchmatch-patch-size must be an odd number of pixels, 3 or more, got {self.patch_size!r}"
            )
        if not 0 <= self.min_source_fraction < 1:
            raise ConfigError(
                f"--patchmatch-min-source must be a fraction from 0 to below 1, got {self.min_source_fraction!r}"
            )


def image_seed(image_id: str) -> int:
    """The 32-bit seed of one image (the solver's seed is a C unsigned int)."""
    return int.from_bytes(hashlib.sha256(f"patchmatch:{image_id}".encode()).digest()[:4], "little")


def pixels_seed(image: np.ndarray) -> int:
    """Without an id, the pixels name the image: still a seed that depends on the image alone."""
    return image_seed(hashlib.sha256(np.ascontiguousarray(image).tobytes()).hexdigest())


class PatchMatchInpainter(Inpainter):
    def __init__(self, config: PatchMatchConfig) -> None:
        from patchmatch_cython import CythonSolver, inpaint_pyramid  # noqa: F401 - refuse early if missing

        self.config = config
        self.fallback = TeleaInpainter(radius=config.telea_radius)

    def info(self) -> BackendInfo:
        return BackendInfo(
            "patchmatch",
            {
                "patchmatch_cython": version("patchmatch-cython"),
                "scale": self.config.scale,
                "patch_size": self.config.patch_size,
                "min_source_fraction": self.config.min_source_fraction,
                "fallback": self.fallback.info().to_json(),
                "seed": "sha256 of the source image id",
            },
        )

    def working_size(self, height: int, width: int) -> tuple[int, int]:
        """(height, width) the fill runs at."""
        scale = self.config.scale
        if scale == "canvas":  # never enlarged: upscaling adds no texture to copy, only work
            return min(height, PARTS_CANVAS_SIZE), min(width, PARTS_CANVAS_SIZE)
        if scale == "full" or min(height, width) <= int(scale):
            return height, width
        ratio = int(scale) / min(height, width)
        return max(int(scale), round(height * ratio)), max(int(scale), round(width * ratio))

    def fill_one(self, image: np.ndarray, mask: np.ndarray, seed: int) -> np.ndarray | str:
        """The filled image, or why PatchMatch cannot fill it (the detail of a fallback row)."""
        from patchmatch_cython import CythonSolver, inpaint_pyramid

        height, width = image.shape[:2]
        work_h, work_w = self.working_size(height, width)
        resized = (work_h, work_w) != (height, width)
        if resized:
            work_image = resize_rgb(image, work_w, work_h, PARTS_CANVAS_FILTER)
            area = cv2.resize(mask.astype(np.float32), (work_w, work_h), interpolation=cv2.INTER_AREA) > 0
            side = 2 * RIM_PIXELS + 1
            work_mask = cv2.dilate(area.astype(np.uint8), np.ones((side, side), np.uint8)) > 0
        else:
            work_image, work_mask = image, mask
        source = 1.0 - float(work_mask.mean())
        if source < self.config.min_source_fraction:
            return (
                f"{source:.1%} of the {work_w}x{work_h} working image is left outside the mask, "
                f"under the {self.config.min_source_fraction:.0%} PatchMatch needs"
            )
        try:
            filled = inpaint_pyramid(
                work_image, work_mask, patch_size=self.config.patch_size, solver_class=CythonSolver, seed=seed
            )
        except ValueError as exc:
            if "mask covers the entire image" not in str(exc):
                raise
            return f"patchmatch: {exc} ({source:.1%} of the {work_w}x{work_h} working image is outside the mask)"
        if resized:
            filled = resize_rgb(filled, width, height, PARTS_CANVAS_FILTER)
        return np.where(mask[..., None], filled, image)

    def inpaint_with_fallbacks(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> tuple[list[np.ndarray], list[InpaintFallback | None]]:
        results: list[np.ndarray] = []
        fallbacks: list[InpaintFallback | None] = []
        for i, (image, mask) in enumerate(zip(images, masks, strict=True)):
            if not mask.any():
                results.append(image.copy())
                fallbacks.append(None)
                continue
            seed = image_seed(ids[i]) if ids is not None else pixels_seed(image)
            filled = self.fill_one(image, mask, seed)
            if isinstance(filled, str):
                results.append(self.fallback.inpaint_batch([image], [mask])[0])
                fallbacks.append(InpaintFallback(FALLBACK_REASON, f"filled by telea: {filled}", self.fallback.info()))
            else:
                results.append(filled)
                fallbacks.append(None)
        return results, fallbacks

    def inpaint_batch(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> list[np.ndarray]:
        """The fills alone; the fallbacks are reported by `inpaint_with_fallbacks` (what extract calls)."""
        return self.inpaint_with_fallbacks(images, masks, ids)[0]


@register_backend("inpainter", "patchmatch", config_class=PatchMatchConfig)
def make_patchmatch_inpainter(config: PatchMatchConfig) -> PatchMatchInpainter:
    return PatchMatchInpainter(config)
