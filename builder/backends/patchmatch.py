"""The `patchmatch` inpainter: PatchMatch (Barnes et al. 2009) through the `patchmatch-cython`
package, a model-free fill that copies the surrounding texture into the hole where Telea smears
its rim inward.

Scale (`--inpaint-scale`): `canvas` (the default) fills the photo as compose will see it, stretched
to the 224 x 224 canvas (a side already shorter stays as it is), for the mask grown by 2 px (a
downscaled pixel holds colour from about two around it); it keeps that whole fill: the canvas is the
fill as made, and the full-resolution background takes the upscaled fill on every pixel it replaced
(fill.png), the photo's own everywhere else, so the fill costs about the same for any photo size;
`full` fills at the native resolution; a number N fills at an N-px short side (never enlarged).

Determinism: each image is seeded from its source id (sha256), so its fill depends on nothing else:
not its batch, the worker count or the runner. Where the library cannot fill a hole (under
`min_source_fraction` of the working image is left, or the known band is thinner than its coarse
pyramid levels' blocks and it refuses "mask covers the entire image"), the band fill
(`builder.backends.band_fill`: a pyramid capped to what the band survives, started from a smooth
fill) fills it from the band's patches, as long as `band_min_source` of the working image is known
(counted before the rim is grown when the grown rim would leave less). Under that, the image is
filled by Telea instead and the fallback is returned, for extract to record.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version

import cv2
import numpy as np

from builder.backends.band_fill import MIN_SOURCE_PATCHES, fill_from_band
from builder.backends.base import BackendInfo, FilledImage, Inpainter, InpaintFallback
from builder.backends.classical import TeleaInpainter
from builder.backends.registry import from_setting, register_backend
from builder.core.config import ConfigError
from builder.core.imaging import resize_rgb
from builder.formats.fill_scores import canvas_mask
from builder.formats.parts import PARTS_CANVAS_FILTER, PARTS_CANVAS_SIZE

SCALES = ("canvas", "full")
FALLBACK_REASON = "inpaint-fallback"
# A downscaled pixel holds colour from about two output pixels around it (bicubic support), so the
# working mask is grown by that much: no object colour survives at the hole's rim to be copied.
RIM_PIXELS = 2
_CANVAS_HW = (PARTS_CANVAS_SIZE, PARTS_CANVAS_SIZE)


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
    # the library's pyramid only where at least this much of the working image is left to copy from
    min_source_fraction: float = from_setting("patchmatch_min_source", 0.05)
    # the band fill where the library cannot fill, down to this much known; Telea under it
    band_min_source: float = 0.01
    telea_radius: int = from_setting("telea_radius", 3)  # the fallback's radius
    # patchmatch-cython's quality knobs (see `inpaint_pyramid`), chosen from the fill-quality table
    # of benchmarks/fill_quality.py (docs/backends.md)
    em_loops: int = 1
    hole_refine: int = 0
    edge_weighted: bool = False
    poisson_blend: bool = True
    mask_feather: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", parse_scale(self.scale))
        if not (isinstance(self.patch_size, int) and self.patch_size >= 3 and self.patch_size % 2 == 1):
            raise ConfigError(
                f"--patchmatch-patch-size must be an odd number of pixels, 3 or more, got {self.patch_size!r}"
            )
        for name, least in (("em_loops", 1), ("hole_refine", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ConfigError(f"patchmatch {name} must be a whole number, {least} or more, got {value!r}")
        if not (isinstance(self.mask_feather, (int, float)) and 0 <= self.mask_feather < 64):
            raise ConfigError(
                f"patchmatch mask_feather must be a width in pixels from 0 to below 64, got {self.mask_feather!r}"
            )
        if not 0 <= self.min_source_fraction < 1:
            raise ConfigError(
                f"--patchmatch-min-source must be a fraction from 0 to below 1, got {self.min_source_fraction!r}"
            )
        if not (isinstance(self.band_min_source, (int, float)) and 0 < self.band_min_source < 1):
            raise ConfigError(
                f"patchmatch band_min_source must be a fraction above 0 and below 1, got {self.band_min_source!r}"
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
                "band_fill": {"min_source": self.config.band_min_source, "min_source_patches": MIN_SOURCE_PATCHES},
                "em_loops": self.config.em_loops,
                "hole_refine": self.config.hole_refine,
                "edge_weighted": self.config.edge_weighted,
                "poisson_blend": self.config.poisson_blend,
                "mask_feather": self.config.mask_feather,
                "kept": "the whole fill (fill.png)",
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

    def fill_one(self, image: np.ndarray, mask: np.ndarray, seed: int) -> FilledImage | str:
        """The filled image, or why PatchMatch cannot fill it (the detail of a fallback row).

        The whole fill is kept: every pixel the library synthesised (the working mask, grown by
        `RIM_PIXELS` when the fill runs downscaled) is pasted, so no band of original pixels the
        fill was never made to match is put back at the border. At canvas scale the canvas is the
        fill as made, never round-tripped through full resolution."""
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
        c = self.config
        filled = None
        if source < c.min_source_fraction:
            refused = (
                f"{source:.1%} of the {work_w}x{work_h} working image is left outside the mask, "
                f"under the {c.min_source_fraction:.0%} the library's pyramid needs"
            )
        else:
            try:
                filled = inpaint_pyramid(
                    work_image,
                    work_mask,
                    patch_size=c.patch_size,
                    solver_class=CythonSolver,
                    seed=seed,
                    em_loops=c.em_loops,
                    edge_weighted=c.edge_weighted,
                    poisson_blend=c.poisson_blend,
                    hole_refine=c.hole_refine,
                    mask_feather=c.mask_feather,
                )
            except ValueError as exc:
                if "mask covers the entire image" not in str(exc):
                    raise
                refused = f"patchmatch: {exc} ({source:.1%} of the {work_w}x{work_h} working image is outside the mask)"
        if filled is None:
            if resized and source < c.band_min_source:
                work_mask = area  # a band the grown rim would eat: the rim is left as it is
                source = 1.0 - float(work_mask.mean())
            if source < c.band_min_source:
                return f"{refused}; under the {c.band_min_source:.0%} the band fill needs"
            filled = fill_from_band(work_image, work_mask, c.patch_size, seed, c.telea_radius, c.poisson_blend)
            assert filled is not None  # some pixel is known
        # what the library wrote: its mask (it leaves the rest as given; compared, not assumed)
        work_replaced = work_mask | (filled != work_image).any(axis=-1)
        if not resized:
            return FilledImage(filled, work_replaced)  # extract resizes it to the canvas, as compose would
        replaced = cv2.resize(work_replaced.astype(np.uint8), (width, height), interpolation=cv2.INTER_NEAREST) > 0
        replaced |= mask
        upscaled = resize_rgb(filled, width, height, PARTS_CANVAS_FILTER)
        if self.config.scale != "canvas":
            return FilledImage(np.where(replaced[..., None], upscaled, image), replaced)
        canvas, canvas_replaced = filled, work_replaced
        if (work_h, work_w) != _CANVAS_HW:  # a side under 224: stretched as compose stretches it
            canvas = resize_rgb(filled, PARTS_CANVAS_SIZE, PARTS_CANVAS_SIZE, PARTS_CANVAS_FILTER)
            canvas_replaced = canvas_mask(work_replaced, PARTS_CANVAS_SIZE)
        return FilledImage(np.where(replaced[..., None], upscaled, image), replaced, canvas, None, canvas_replaced)

    def fill_images(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> list[FilledImage]:
        results: list[FilledImage] = []
        for i, (image, mask) in enumerate(zip(images, masks, strict=True)):
            if not mask.any():
                results.append(FilledImage(image.copy(), mask.copy()))
                continue
            seed = image_seed(ids[i]) if ids is not None else pixels_seed(image)
            filled = self.fill_one(image, mask, seed)
            if isinstance(filled, str):
                fallback = InpaintFallback(FALLBACK_REASON, f"filled by telea: {filled}", self.fallback.info())
                results.append(
                    FilledImage(self.fallback.inpaint_batch([image], [mask])[0], mask.copy(), None, fallback)
                )
            else:
                results.append(filled)
        return results

    def inpaint_with_fallbacks(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> tuple[list[np.ndarray], list[InpaintFallback | None]]:
        filled = self.fill_images(images, masks, ids)
        return [f.background for f in filled], [f.fallback for f in filled]

    def inpaint_batch(
        self, images: Sequence[np.ndarray], masks: Sequence[np.ndarray], ids: Sequence[str] | None = None
    ) -> list[np.ndarray]:
        """The fills alone; the fallbacks are reported by `inpaint_with_fallbacks` (what extract calls)."""
        return self.inpaint_with_fallbacks(images, masks, ids)[0]


@register_backend("inpainter", "patchmatch", config_class=PatchMatchConfig)
def make_patchmatch_inpainter(config: PatchMatchConfig) -> PatchMatchInpainter:
    return PatchMatchInpainter(config)
