"""Fill quality and speed of the patchmatch inpainter, side by side in one run, on real photos.

The photos are the public-domain photographs bundled with scikit-image (`skimage.data`: astronaut,
camera, chelsea, coffee, rocket, stereo_motorcycle, clock, coins, moon, brick, grass, gravel), each
with four boxes drawn by hand in this file (`BOXES`), plus the demo photos' own ImageNet-style boxes.
Every box is erased on its own as `hsi extract --masker box` erases it (the box, dilated 15 px), and
every method fills the same hole. Each fill is scored as extract scores a part
(`builder.formats.fill_scores`: texture, seam, colour step and score on the 224 canvas, against
the pixels the method replaced). Printed per method: medians, the shares past the thresholds
(texture < 0.3, seam > 1.5, score < 0.5), images/s on one core, and the verdict of the issue's rule
(median seam and step no worse than the library's own `inpaint_pyramid` at the same scale, texture
no lower). The methods:

  before #31     the pipeline extract ran before: the fill made for the mask grown 2 px at canvas
                 scale, upscaled, only the ungrown mask pasted at full resolution, the canvas
                 resized down again from that
  library        patchmatch-cython's `inpaint_pyramid` called directly on the 224 canvas with the
                 same patch size, seed and 2-px grown mask, the whole fill kept
  default        `hsi extract`'s patchmatch inpainter as configured now (`PatchMatchConfig()`)
  the knobs      the default with one of patchmatch-cython's options changed (em_loops, patch_size,
                 hole_refine, edge_weighted, poisson_blend off, mask_feather), to choose the default
  telea          OpenCV's Telea, for reference

A second set, printed beside the first, holds the frame-filling holes (#46): on the same twelve
photos, everything erased but a band along one, two, three or all four sides that leaves 2, 5, 10
or 20% of the photo known (the case of ImageNet's large objects). Its methods: `today` (before #46:
the library where it accepts the hole, Telea where it refuses or under 5% is left), `default` (the
band fill where the library cannot) and `telea`; the library's own fills are shown on the few it
accepts.

Sheets (`--out`/fill_before_after.png: the canvas with the hole outlined | before #31 | default;
fill_frame_before_after.png: the frame-filling holes, today | default; one row per photo region)
are written for a person to look at.

    .venv/bin/python benchmarks/fill_quality.py --out /tmp/fills [--rounds 1] [--limit 12]

scikit-image is in the `dev` extra.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from builder.backends.base import FilledImage  # noqa: E402
from builder.backends.classical import BoxMasker, TeleaInpainter  # noqa: E402
from builder.backends.patchmatch import RIM_PIXELS, PatchMatchConfig, PatchMatchInpainter, image_seed  # noqa: E402
from builder.core.imaging import canvas_background, resize_rgb  # noqa: E402
from builder.core.records import Box  # noqa: E402
from builder.extract.images import decode_image  # noqa: E402
from builder.extract.shard_builder import clip_boxes, dilate  # noqa: E402
from builder.extract.sources import load_sources  # noqa: E402
from builder.formats.fill_scores import (  # noqa: E402
    POOR_SCORE,
    SEAM_HIGH,
    TEXTURE_LOW,
    FillScores,
    canvas_mask,
    score_fill,
)
from builder.formats.parts import PARTS_CANVAS_FILTER, PARTS_CANVAS_SIZE  # noqa: E402

CANVAS = PARTS_CANVAS_SIZE
# Hand-drawn boxes (x0, y0, x1, y1, inclusive, native pixels) on objects and object-sized regions.
BOXES: dict[str, list[tuple[int, int, int, int]]] = {
    "astronaut": [(170, 20, 300, 200), (350, 40, 480, 260), (50, 380, 190, 500), (120, 250, 400, 511)],
    "camera": [(190, 60, 340, 400), (250, 300, 420, 480), (200, 60, 300, 180), (400, 160, 500, 330)],
    "chelsea": [(140, 40, 330, 230), (60, 20, 400, 299), (140, 10, 220, 100), (300, 180, 420, 290)],
    "coffee": [(160, 40, 470, 330), (380, 240, 590, 330), (50, 220, 560, 399), (0, 0, 150, 120)],
    "rocket": [(290, 40, 370, 400), (180, 0, 300, 420), (0, 330, 250, 426), (400, 150, 600, 330)],
    "stereo_motorcycle": [(140, 80, 600, 470), (60, 60, 180, 200), (450, 250, 640, 470), (280, 100, 450, 230)],
    "clock": [(100, 40, 300, 260), (280, 0, 399, 120), (0, 200, 200, 299), (150, 100, 250, 200)],
    "coins": [(30, 20, 370, 90), (150, 120, 230, 200), (40, 100, 360, 290), (300, 200, 383, 302)],
    "moon": [(200, 200, 320, 320), (50, 50, 300, 300), (380, 0, 511, 160), (100, 380, 260, 511)],
    "brick": [(100, 100, 260, 260), (300, 50, 480, 200), (50, 300, 200, 480), (280, 300, 460, 460)],
    "grass": [(100, 100, 260, 260), (300, 50, 480, 200), (50, 300, 200, 480), (280, 300, 460, 460)],
    "gravel": [(100, 100, 260, 260), (300, 50, 480, 200), (50, 300, 200, 480), (280, 300, 460, 460)],
}
DILATION = 15
# the frame-filling holes: the sides a known band runs along, and the share of the photo it leaves
BAND_SIDES = (("left",), ("top", "left"), ("top", "left", "right"), ("top", "bottom", "left", "right"))
BAND_KNOWN = (0.02, 0.05, 0.10, 0.20)
KNOBS = {
    "em_loops=2": {"em_loops": 2},
    "em_loops=3": {"em_loops": 3},
    "patch_size=7": {"patch_size": 7},
    "patch_size=9": {"patch_size": 9},
    "hole_refine=2": {"hole_refine": 2},
    "edge_weighted": {"edge_weighted": True},
    "poisson_blend off": {"poisson_blend": False},
    "mask_feather=4": {"mask_feather": 4.0},
}


@dataclass
class Region:
    name: str  # photo:box
    image: np.ndarray
    erase: np.ndarray


def skimage_photo(name: str) -> np.ndarray:
    import skimage.data

    picture = getattr(skimage.data, name)()
    picture = picture[0] if isinstance(picture, tuple) else picture  # stereo pairs: the left view
    return np.ascontiguousarray(np.stack([picture] * 3, axis=-1) if picture.ndim == 2 else picture[..., :3])


def erase_mask(image: np.ndarray, boxes: list[Box]) -> np.ndarray:
    union = np.zeros(image.shape[:2], bool)
    for mask in BoxMasker().masks_batch([image], [boxes])[0]:
        union |= mask
    return dilate(union, DILATION)


def load_regions(limit: int | None, demo_photos: bool = True) -> list[Region]:
    regions = []
    for name, boxes in list(BOXES.items())[:limit]:
        image = skimage_photo(name)
        for i, (x0, y0, x1, y1) in enumerate(boxes):
            regions.append(Region(f"{name}:{i}", image, erase_mask(image, [Box(x0, y0, x1, y1, "n00000000")])))
    demo = ROOT / "builder" / "demo_data" / "imagenet"
    for record in [] if not demo_photos else load_sources(demo, "val", announce=lambda _: None).records:
        image = decode_image(Path(record.path)).rgb
        boxes, _ = clip_boxes(record, image.shape[1], image.shape[0])
        regions.append(Region(f"demo:{record.image_id}", image, erase_mask(image, boxes)))
    return regions


def band_erase(height: int, width: int, sides: tuple[str, ...], known: float) -> np.ndarray:
    """Everything erased but a band of equal width along `sides`: the widest band that leaves at
    most `known` of the photo unerased (at least one pixel)."""

    def erase_for(band: int) -> np.ndarray:
        erase = np.ones((height, width), bool)
        for side in sides:
            target = {"top": (slice(0, band), slice(None)), "bottom": (slice(height - band, height), slice(None))}.get(
                side, (slice(None), slice(0, band) if side == "left" else slice(width - band, width))
            )
            erase[target] = False
        return erase

    band = 1
    while band < min(height, width) // 2 and (~erase_for(band + 1)).mean() <= known:
        band += 1
    return erase_for(band)


def load_frame_regions(limit: int | None) -> list[Region]:
    regions = []
    for name in list(BOXES)[:limit]:
        image = skimage_photo(name)
        for sides in BAND_SIDES:
            for known in BAND_KNOWN:
                erase = band_erase(*image.shape[:2], sides, known)
                regions.append(Region(f"{name}:{len(sides)}side:{known:.0%}", image, erase))
    return regions


def today(config: PatchMatchConfig) -> Callable[[Region], tuple[np.ndarray, np.ndarray]]:
    """The default before #46: the library where it accepts the hole (and at least
    `min_source_fraction` is left), Telea on the photo where not."""
    library_fill, telea_fill = library(config), extract_fill(TeleaInpainter(radius=config.telea_radius))

    def fill(region: Region) -> tuple[np.ndarray, np.ndarray]:
        if (~grown_canvas_mask(region.erase)).mean() >= config.min_source_fraction:
            try:
                return library_fill(region)
            except ValueError:
                pass
        return telea_fill(region)

    return fill


def grown_canvas_mask(erase: np.ndarray) -> np.ndarray:
    """The working mask patchmatch fills at canvas scale: area-resized, grown by RIM_PIXELS."""
    area = cv2.resize(erase.astype(np.float32), (CANVAS, CANVAS), interpolation=cv2.INTER_AREA) > 0
    side = 2 * RIM_PIXELS + 1
    return cv2.dilate(area.astype(np.uint8), np.ones((side, side), np.uint8)) > 0


def before_31(config: PatchMatchConfig) -> Callable[[Region], tuple[np.ndarray, np.ndarray]]:
    """The pipeline before #31, rebuilt here to be measured: (canvas, pixels replaced)."""
    from patchmatch_cython import CythonSolver, inpaint_pyramid

    def fill(region: Region) -> tuple[np.ndarray, np.ndarray]:
        height, width = region.image.shape[:2]
        work = resize_rgb(region.image, CANVAS, CANVAS, PARTS_CANVAS_FILTER)
        filled = inpaint_pyramid(
            work, grown_canvas_mask(region.erase), patch_size=config.patch_size, solver_class=CythonSolver,
            seed=image_seed(region.name),
        )  # fmt: skip
        background = np.where(
            region.erase[..., None], resize_rgb(filled, width, height, PARTS_CANVAS_FILTER), region.image
        )
        return canvas_background(background, CANVAS, PARTS_CANVAS_FILTER), region.erase

    return fill


def library(config: PatchMatchConfig) -> Callable[[Region], tuple[np.ndarray, np.ndarray]]:
    from patchmatch_cython import CythonSolver, inpaint_pyramid

    def fill(region: Region) -> tuple[np.ndarray, np.ndarray]:
        work = resize_rgb(region.image, CANVAS, CANVAS, PARTS_CANVAS_FILTER)
        mask = grown_canvas_mask(region.erase)
        canvas = inpaint_pyramid(
            work, mask, patch_size=config.patch_size, solver_class=CythonSolver, seed=image_seed(region.name)
        )
        return canvas, mask

    return fill


def extract_fill(inpainter) -> Callable[[Region], tuple[np.ndarray, np.ndarray]]:
    """A backend's fill as extract stores it: its canvas (or the background resized) and fill mask."""

    def fill(region: Region) -> tuple[np.ndarray, np.ndarray]:
        (made,) = inpainter.fill_images([region.image], [region.erase], [region.name])
        assert isinstance(made, FilledImage)
        if made.canvas is not None and made.canvas_replaced is not None:
            return made.canvas, made.canvas_replaced
        return canvas_background(made.background, CANVAS, PARTS_CANVAS_FILTER), made.replaced

    return fill


@dataclass
class Measured:
    scores: list[FillScores]
    canvases: list[np.ndarray]
    images_per_s: float
    seconds: list[float]  # per region, the fastest of the rounds

    def median(self, name: str) -> float:
        return statistics.median(getattr(s, name) for s in self.scores)

    def share(self, test: Callable[[FillScores], bool]) -> float:
        return sum(test(s) for s in self.scores) / len(self.scores)


def measure(fill: Callable[[Region], tuple[np.ndarray, np.ndarray]], regions: list[Region], rounds: int) -> Measured:
    """Scores of every region's fill; images/s from each region's fastest of `rounds` fills."""
    fill(regions[0])  # warm the libraries outside the timer
    scores, canvases, seconds = [], [], []
    for region in regions:
        best = float("inf")
        for _ in range(rounds):
            start = time.perf_counter()
            canvas, replaced = fill(region)
            best = min(best, time.perf_counter() - start)
        seconds.append(best)
        scored = score_fill(canvas, canvas_mask(replaced, CANVAS))
        assert scored is not None, region.name
        scores.append(scored)
        canvases.append(canvas)
    return Measured(scores, canvases, len(regions) / sum(seconds), seconds)


def fillable(regions: list[Region], fill) -> tuple[list[Region], list[str]]:
    """The regions the library can fill (it refuses a hole that covers a coarse pyramid level: the
    default then falls back to Telea, which is not what is compared here), and the names of the rest."""
    kept, refused = [], []
    for region in regions:
        try:
            fill(region)
            kept.append(region)
        except ValueError:
            refused.append(region.name)
    return kept, refused


def outlined(canvas: np.ndarray, erase: np.ndarray) -> np.ndarray:
    small = canvas_mask(erase, CANVAS).astype(np.uint8)
    contours, _ = cv2.findContours(small, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    pixels = canvas.copy()
    cv2.drawContours(pixels, contours, -1, (255, 255, 0), 1)
    return pixels


def write_sheet(path: Path, regions: list[Region], columns: dict[str, Measured], rows: int) -> None:
    """One row per region (every len/rows-th, worst `before #31` scores first): original with the
    hole outlined, then each method's canvas captioned with its score."""
    first = next(iter(columns.values()))
    order = sorted(range(len(regions)), key=lambda i: (first.scores[i].score, regions[i].name))
    picked = order[:: max(1, len(order) // rows)][:rows]
    tile, caption, gap, head = CANVAS, 30, 6, 44
    font = ImageFont.load_default(size=14)
    small = ImageFont.load_default(size=12)
    width = (1 + len(columns)) * (tile + gap) + gap
    sheet = Image.new("RGB", (width, head + len(picked) * (tile + caption + gap)), "white")
    draw = ImageDraw.Draw(sheet)
    draw.text((gap, 4), "Fills on the 224 canvas: score = min(1, texture) x min(1, 1/seam) / (1 + step)", "black", font)
    titles = ["photo, hole outlined", *columns]
    for c, title in enumerate(titles):
        draw.text((gap + c * (tile + gap), 24), title, "black", font)
    for r, i in enumerate(picked):
        top = head + r * (tile + caption + gap)
        region = regions[i]
        original = canvas_background(region.image, CANVAS, PARTS_CANVAS_FILTER)
        sheet.paste(Image.fromarray(outlined(original, region.erase)), (gap, top))
        draw.text((gap, top + tile + 2), region.name, "black", small)
        for c, measured in enumerate(columns.values(), start=1):
            left = gap + c * (tile + gap)
            sheet.paste(Image.fromarray(measured.canvases[i]), (left, top))
            s = measured.scores[i]
            text = f"score {s.score:.2f}  tex {s.texture:.2f}\nseam {s.seam:.2f}  step {s.step:.2f}"
            draw.multiline_text((left, top + tile + 1), text, "black", small, spacing=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path, optimize=True)


def print_table(measured: dict[str, Measured]) -> dict[str, dict[str, float]]:
    """The table of one set (medians, shares past the thresholds, ms per image) and its figures."""
    head = f"{'method':<18}{'texture':>8}{'tex<' + str(TEXTURE_LOW):>9}{'seam':>7}{'seam>' + str(SEAM_HIGH):>10}"
    print(head + f"{'step':>7}{'score':>7}{'score<' + str(POOR_SCORE):>11}{'img/s/core':>12}{'ms/img':>8}")
    figures = {}
    for name, m in measured.items():
        figures[name] = {
            "regions": len(m.scores),
            "texture": m.median("texture"),
            "texture_low": m.share(lambda s: s.texture < TEXTURE_LOW),
            "seam": m.median("seam"),
            "seam_high": m.share(lambda s: s.seam > SEAM_HIGH),
            "step": m.median("step"),
            "score": m.median("score"),
            "poor": m.share(lambda s: s.score < POOR_SCORE),
            "images_per_s": m.images_per_s,
        }
        f = figures[name]
        print(
            f"{name:<18}{f['texture']:>8.2f}{f['texture_low']:>9.0%}{f['seam']:>7.2f}{f['seam_high']:>10.0%}"
            f"{f['step']:>7.2f}{f['score']:>7.2f}{f['poor']:>11.0%}{f['images_per_s']:>12.1f}"
            f"{1000 / f['images_per_s']:>8.0f}"
        )
    return figures


def frame_set(args, default: PatchMatchConfig) -> dict[str, dict[str, float]]:
    """The frame-filling holes' table, per known share and over all, and their sheet."""
    regions = load_frame_regions(args.limit)
    methods = {
        "today": today(default),
        "default": extract_fill(PatchMatchInpainter(default)),
        "telea": extract_fill(TeleaInpainter(radius=default.telea_radius)),
    }
    measured = {name: measure(fill, regions, args.rounds) for name, fill in methods.items()}
    accepted, _ = fillable(regions, library(default))
    shares = ", ".join(f"{k:.0%}" for k in BAND_KNOWN)
    print(f"\nframe-filling holes: {len(regions)} regions (the photos with all erased but a band along 1-4 sides, "
          f"leaving {shares} known); the library accepts {len(accepted)}")  # fmt: skip
    figures = {"all": print_table(measured)}
    for known in BAND_KNOWN:
        picked = [i for i, region in enumerate(regions) if region.name.endswith(f":{known:.0%}")]
        print(f"{known:.0%} known ({len(picked)} regions):")
        figures[f"{known:.0%}"] = print_table({name: subset(m, picked) for name, m in measured.items()})
    if accepted:
        names = {region.name for region in accepted}
        picked = [i for i, region in enumerate(regions) if region.name in names]
        print(f"the {len(accepted)} the library accepts:")
        library_measured = measure(library(default), accepted, args.rounds)
        figures["library-accepted"] = print_table(
            {"library": library_measured, **{name: subset(m, picked) for name, m in measured.items()}}
        )
    all_new, all_telea = figures["all"]["default"], figures["all"]["telea"]
    print(f"default vs telea on frame-filling holes: median score {all_new['score']:.2f} vs {all_telea['score']:.2f}: "
          f"{'better' if all_new['score'] > all_telea['score'] else 'NOT BETTER'}")  # fmt: skip
    sheet = args.out / "fill_frame_before_after.png"
    write_sheet(sheet, regions, {k: measured[k] for k in ("today", "default")}, args.sheet_rows)
    print(f"sheet: {sheet}")
    return figures


def subset(measured: Measured, picked: list[int]) -> Measured:
    """The regions `picked` of a measurement; images/s over them (from the per-region times)."""
    seconds = sum(measured.seconds[i] for i in picked)
    return Measured(
        [measured.scores[i] for i in picked],
        [measured.canvases[i] for i in picked],
        len(picked) / seconds,
        [measured.seconds[i] for i in picked],
    )


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="the first N scikit-image photos (default: all 12)")
    parser.add_argument("--rounds", type=int, default=2, help="fills per region; the fastest is timed (default 2)")
    parser.add_argument("--sheet-rows", type=int, default=8)
    parser.add_argument("--no-demo", action="store_true", help="leave the demo photos out")
    parser.add_argument("--no-knobs", action="store_true", help="skip the knob variants (a quick run)")
    parser.add_argument("--no-frame", action="store_true", help="leave the frame-filling holes' set out")
    parser.add_argument("--out", type=Path, required=True, help="folder for fill_before_after.png")
    args = parser.parse_args(argv)
    cv2.setNumThreads(1)  # per core

    default = PatchMatchConfig()
    regions, refused = fillable(load_regions(args.limit, not args.no_demo), library(default))
    methods: dict[str, Callable[[Region], tuple[np.ndarray, np.ndarray]]] = {
        "before #31": before_31(default),
        "library": library(default),
        "default": extract_fill(PatchMatchInpainter(default)),
    }
    if not args.no_knobs:
        for name, change in KNOBS.items():
            methods[name] = extract_fill(PatchMatchInpainter(replace(default, **change)))
    methods["telea"] = extract_fill(TeleaInpainter(radius=default.telea_radius))
    measured = {name: measure(fill, regions, args.rounds) for name, fill in methods.items()}

    left_out = ", ".join(refused) or "none"
    print(f"{len(regions)} regions (hand-boxed on scikit-image photos, and the demo's), boxes dilated {DILATION} px, "
          f"scored on the {CANVAS} canvas; left out, the library refuses them: {left_out}")  # fmt: skip
    figures = print_table(measured)
    lib, new = figures["library"], figures["default"]
    ok = (
        new["seam"] <= lib["seam"] + 1e-9
        and new["step"] <= lib["step"] + 1e-9
        and new["texture"] >= lib["texture"] - 1e-9
    )
    print(f"default vs library: seam {new['seam']:.2f} vs {lib['seam']:.2f}, step {new['step']:.2f} vs "
          f"{lib['step']:.2f}, texture {new['texture']:.2f} vs {lib['texture']:.2f}: "
          f"{'no worse' if ok else 'WORSE'}; {new['images_per_s']:.1f} img/s/core (target 5)")  # fmt: skip
    sheet = args.out / "fill_before_after.png"
    write_sheet(sheet, regions, {k: measured[k] for k in ("before #31", "default")}, args.sheet_rows)
    print(f"sheet: {sheet}")
    if not args.no_frame:
        figures = {"holes": figures, "frame-filling holes": frame_set(args, default)}
    return figures


if __name__ == "__main__":
    main()
