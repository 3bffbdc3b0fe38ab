"""Preview sheets for the card and the README.

- Contact sheet of a composed config: a labelled block per split (the -10 subset's spurious train
  split and its balanced test split), in each rows = groups, columns = sizes, a few samples per cell.
- Parts grid: for a handful of source images, the object crop, its mask, the erase mask and the
  inpainted background (with the object box drawn), side by side.

Contact-sheet samples are drawn per cell across classes by a rank seeded with the spec's seed, so
the same dataset gives the same sheet; the parts grid shows the first source images by key (of the
dataset's own sources when it previews a composed dataset).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from builder.compose.spec import spec_from_json
from builder.core.manifest import Manifest
from builder.core.rng import stable_rank
from builder.core.shard_read import iter_shard
from builder.core.taxonomy import sorted_groups
from builder.formats.composites import decode_composite_image, decode_composite_json
from builder.formats.parts import decode_parts, iter_parts_samples

LABEL_HEIGHT = 18
MARGIN = 4
BACKGROUND_COLOUR = (255, 255, 255)
TEXT_COLOUR = (0, 0, 0)
TILE_COLOUR = (200, 200, 200)  # grey, so an all-white mask still shows its extent


def _font() -> ImageFont.ImageFont:
    return ImageFont.load_default()


def _save_png(image: Image.Image, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=6)
    path.write_bytes(buffer.getvalue())
    return path


@dataclass(frozen=True)
class Pick:
    """One thumbnail of a contact sheet: the sample, its class and its tier."""

    rank: str
    key: str
    wnid: str
    class_name: str
    tier: str | None
    jpg: bytes


def _offer(cell: dict[str, Pick], pick: Pick, per_cell: int) -> None:
    """Keep, per cell, the best-ranked sample of each of the `per_cell` classes whose best rank is
    lowest: one pass, at most `per_cell` images held per cell."""
    held = cell.get(pick.wnid)
    if held is not None:
        if pick.rank < held.rank:
            cell[pick.wnid] = pick
        return
    if len(cell) < per_cell:
        cell[pick.wnid] = pick
        return
    worst = max(cell.values(), key=lambda p: p.rank)
    if pick.rank < worst.rank:
        del cell[worst.wnid]
        cell[pick.wnid] = pick


@dataclass
class SplitBlock:
    """One split's rows of the contact sheet: its cells and what the whole split holds."""

    split: str
    cells: dict[tuple[str, int], list[Pick]]
    samples: int = 0
    own_background: int = 0  # samples on their own class's background

    @property
    def heading(self) -> str:
        # the background mix is what tells -10's spurious train split from its balanced test split
        share = f"{self.own_background / self.samples:.0%}" if self.samples else "none"
        return f"split {self.split}: {self.samples} samples, {share} on their own class's background"


def collect_block(dataset_dir: Path, split: str, per_cell: int, seed: int = 0) -> SplitBlock:
    """(group, size) -> up to `per_cell` samples of distinct classes, drawn by a seeded rank of the
    key (so the same dataset and seed give the same sheet, and not always the first source ids),
    and the split's sample and own-background counts."""
    cells: dict[tuple[str, int], dict[str, Pick]] = {}
    block = SplitBlock(split, {})
    for path in Manifest.read(dataset_dir).shard_paths(dataset_dir, split):
        for key, members in iter_shard(path):
            meta = decode_composite_json(members)
            block.samples += 1
            block.own_background += meta.get("background") == "original"
            pick = Pick(
                stable_rank(seed, "contact-sheet", key),
                key,
                meta["wnid"],
                meta.get("class_name") or meta["wnid"],
                meta.get("tier"),
                members["jpg"],
            )
            _offer(cells.setdefault((meta["group"], int(meta["size"])), {}), pick, per_cell)
    block.cells = {cell: sorted(picks.values(), key=lambda p: p.rank) for cell, picks in cells.items()}
    return block


def collect_cells(dataset_dir: Path, split: str, per_cell: int, seed: int = 0) -> dict[tuple[str, int], list[Pick]]:
    """The cells of one split (collect_block)."""
    return collect_block(dataset_dir, split, per_cell, seed).cells


def fit_text(draw: ImageDraw.ImageDraw, text: str, width: float, font) -> str:
    """`text`, shortened with an ellipsis only when it is wider than `width` pixels."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."


def row_label_width(groups, font) -> int:
    """Wide enough for the longest group name, whole."""
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    return int(max([probe.textlength(g, font=font) for g in groups] + [40])) + 3 * MARGIN


def contact_sheet_blocks(
    dataset_dir: Path, split: str | None = None, per_cell: int = 3, seed: int | None = None
) -> list[SplitBlock]:
    """The blocks a contact sheet draws: `split`, or every split of the manifest, train first (the
    -10 subset's point is its spurious train split, not only its balanced test split)."""
    manifest = Manifest.read(dataset_dir)
    seed = spec_from_json(manifest.spec or {"name": dataset_dir.name}).seed if seed is None else seed
    names = [split] if split else sorted(manifest.splits, key=lambda name: (name != "train", name))
    return [collect_block(dataset_dir, name, per_cell, seed) for name in names]


def contact_sheet(
    dataset_dir: Path,
    out_path: Path,
    split: str | None = None,
    per_cell: int = 3,
    thumb: int = 112,
    seed: int | None = None,
) -> Path:
    """A block of rows per split (`split`, or all), labelled with the split's sample count and
    background mix; in each block rows = groups, columns = sizes, `per_cell` thumbnails of distinct
    classes per cell (seeded by the spec's seed), each with its class name under it and the cell's
    tier above."""
    manifest = Manifest.read(dataset_dir)
    seed = spec_from_json(manifest.spec or {"name": dataset_dir.name}).seed if seed is None else seed
    blocks = contact_sheet_blocks(dataset_dir, split, per_cell, seed)
    groups_of = {b.split: sorted_groups(g for g, _ in b.cells) for b in blocks}
    sizes = sorted({s for b in blocks for _, s in b.cells})
    font = _font()
    label_width = row_label_width([g for groups in groups_of.values() for g in groups], font)
    cell_width = per_cell * (thumb + MARGIN) + MARGIN
    row_height = LABEL_HEIGHT + thumb + LABEL_HEIGHT + MARGIN  # tier, thumbnails, class names
    width = label_width + len(sizes) * cell_width
    height = LABEL_HEIGHT * 2 + sum(LABEL_HEIGHT + MARGIN + len(groups_of[b.split]) * row_height for b in blocks)
    sheet = Image.new("RGB", (max(width, 1), max(height, 1)), BACKGROUND_COLOUR)
    draw = ImageDraw.Draw(sheet)
    title = f"{manifest.config or dataset_dir.name}: {per_cell} samples of distinct classes per cell (seed {seed})"
    draw.text((MARGIN, 2), fit_text(draw, title, width - 2 * MARGIN, font), fill=TEXT_COLOUR, font=font)
    for column, size in enumerate(sizes):
        draw.text(
            (label_width + column * cell_width + MARGIN, LABEL_HEIGHT + 2),
            f"size {size} px",
            fill=TEXT_COLOUR,
            font=font,
        )
    top = LABEL_HEIGHT * 2
    for block in blocks:
        draw.line((0, top, width, top), fill=TEXT_COLOUR)  # a rule between blocks: one split ends here
        draw.text(
            (MARGIN, top + 3), fit_text(draw, block.heading, width - 2 * MARGIN, font), fill=TEXT_COLOUR, font=font
        )
        top += LABEL_HEIGHT + MARGIN
        for group in groups_of[block.split]:
            draw_row(sheet, draw, font, block.cells, group, sizes, top, label_width, cell_width, thumb)
            top += row_height
    return _save_png(sheet, out_path)


def draw_row(sheet, draw, font, cells, group: str, sizes, top: int, label_width: int, cell_width: int, thumb: int):
    """One group's row of a block: its label, then per size the cell's tier and thumbnails."""
    draw.text((MARGIN, top + LABEL_HEIGHT + thumb // 2 - 6), group, fill=TEXT_COLOUR, font=font)
    for column, size in enumerate(sizes):
        left = label_width + column * cell_width + MARGIN
        picks = cells.get((group, size), [])
        if picks:
            draw.text((left, top + 3), f"tier {picks[0].tier or 'none'}", fill=TEXT_COLOUR, font=font)
        for n, pick in enumerate(picks):
            small = decode_composite_image(pick.jpg).resize((thumb, thumb), Image.BICUBIC)
            x = left + n * (thumb + MARGIN)
            sheet.paste(small, (x, top + LABEL_HEIGHT))
            draw.text(
                (x, top + LABEL_HEIGHT + thumb + 2),
                fit_text(draw, pick.class_name, thumb, font),
                fill=TEXT_COLOUR,
                font=font,
            )


def _fit(array: np.ndarray, side: int) -> Image.Image:
    """The array as an RGB image scaled to fit a side x side tile (aspect kept), centred."""
    image = Image.fromarray(array.astype(np.uint8) * 255 if array.dtype == bool else array).convert("RGB")
    scale = side / max(image.size)
    image = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.BICUBIC)
    tile = Image.new("RGB", (side, side), TILE_COLOUR)
    tile.paste(image, ((side - image.width) // 2, (side - image.height) // 2))
    ImageDraw.Draw(tile).rectangle((0, 0, side - 1, side - 1), outline=(128, 128, 128))
    return tile


PARTS_COLUMNS = ("object crop", "object mask", "erase mask", "inpainted background")


def parts_grid(parts_dir: Path, out_path: Path, count: int = 6, tile: int = 160, only: set[str] | None = None) -> Path:
    """A row per source image (the first `count` by key, of those in `only` when given: a
    dataset's own sources): crop, mask, erase mask, background."""
    rows = []
    for key, members in iter_parts_samples(parts_dir):
        if only is not None and key not in only:
            continue
        rows.append(decode_parts(key, members))
        if len(rows) >= count:
            break
    label_width = 170
    width = label_width + len(PARTS_COLUMNS) * (tile + MARGIN) + MARGIN
    height = LABEL_HEIGHT + len(rows) * (tile + MARGIN) + MARGIN
    sheet = Image.new("RGB", (width, height), BACKGROUND_COLOUR)
    draw = ImageDraw.Draw(sheet)
    font = _font()
    for column, name in enumerate(PARTS_COLUMNS):
        draw.text((label_width + column * (tile + MARGIN) + MARGIN, 3), name, fill=TEXT_COLOUR, font=font)
    for row, parts in enumerate(rows):
        top = LABEL_HEIGHT + row * (tile + MARGIN)
        room = label_width - 2 * MARGIN
        draw.text((MARGIN, top + tile // 2 - 12), fit_text(draw, parts.key, room, font), fill=TEXT_COLOUR, font=font)
        draw.text(
            (MARGIN, top + tile // 2 + 2),
            fit_text(draw, parts.meta.get("class_name", ""), room, font),
            fill=TEXT_COLOUR,
            font=font,
        )
        background = Image.fromarray(parts.background).convert("RGB")
        x0, y0, x1, y1 = parts.meta["object_box"]
        ImageDraw.Draw(background).rectangle(
            (x0, y0, x1, y1), outline=(255, 0, 0), width=max(1, background.width // 120)
        )
        tiles = [
            _fit(parts.crop, tile),
            _fit(parts.mask, tile),
            _fit(parts.erase, tile),
            _fit(np.asarray(background), tile),
        ]
        for column, image in enumerate(tiles):
            sheet.paste(image, (label_width + column * (tile + MARGIN) + MARGIN, top))
    return _save_png(sheet, out_path)


OUTLINE_COLOUR = (255, 0, 255)  # magenta: rare in photos, so the fill's edge shows on any ground
POOR_COLOUR = (200, 0, 0)


def _sized_font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    """Pillow's bundled font at `size` px (the same glyphs on every machine with FreeType)."""
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # a Pillow without FreeType: its fixed bitmap font
        return ImageFont.load_default()


def _wrap(draw: ImageDraw.ImageDraw, text: str, width: float, font) -> list[str]:
    """`text` in lines no wider than `width` pixels, broken at spaces."""
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        trial = f"{line} {word}" if line else word
        if line and draw.textlength(trial, font=font) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    return [*lines, line] if line else lines


def outline_fill(canvas: np.ndarray, mask: np.ndarray | None) -> Image.Image:
    """The canvas with the border of its filled pixels drawn on it (2 px inside the fill, so the
    photo's pixels just outside stay visible)."""
    import cv2

    image = np.array(canvas, dtype=np.uint8)
    if mask is not None and mask.any():
        inner = cv2.erode(mask.astype(np.uint8), np.ones((5, 5), np.uint8), borderValue=1) > 0
        image[mask & ~inner] = OUTLINE_COLOUR
    return Image.fromarray(image)


def _draw_scores(draw, xy, scores: dict, names, font) -> None:
    """`name value` pairs of `names` on one line, each value past its threshold in red."""
    from validation.fill_quality import is_poor

    x, y = xy
    for name in names:
        label, value = f"{name} ", f"{scores[name]:.3f}"
        draw.text((x, y), label, fill=TEXT_COLOUR, font=font)
        x += draw.textlength(label, font=font)
        poor = is_poor(name, scores[name])
        draw.text((x, y), value, fill=POOR_COLOUR if poor else TEXT_COLOUR, font=font)
        x += draw.textlength(value + "  ", font=font)


def worst_fills_sheet(shown, title: str, out_path: Path, columns: int = 4, tile: int = 224) -> Path:
    """The worst fills, worst first, `columns` to a row: each part's 224 px canvas with the border of
    its fill in magenta and, under it, its rank, source id, class name and four scores (those past
    their thresholds in red). `shown`: (part, canvas or None, canvas-scale mask or None) as
    `validation.fill_quality.worst_pixels` reads them; `title` names what the sheet is."""
    from validation.fill_quality import POOR_SCORE, SCORE_FORMULA, SEAM_HIGH, TEXTURE_LOW

    font, title_font = _sized_font(14), _sized_font(20)
    gap, line = 12, 18
    caption = 4 * line + 6
    width = gap + columns * (tile + gap)
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    key_lines = [
        f"{SCORE_FORMULA}, in [0, 1], higher is better (1: these measures cannot tell the fill from the photo).",
        "texture: the fill's detail over the surrounding photo's (low: a smooth slab); seam: the edge strength on "
        "the fill's border over the photo's (high: a visible edge); step: the colour jump across the border.",
        f"Magenta: the border of the filled pixels. Red: texture < {TEXTURE_LOW}, seam > {SEAM_HIGH}, "
        f"score < {POOR_SCORE}.",
    ]
    title_lines = _wrap(probe, title, width - 2 * gap, title_font)
    text_lines = [wrapped for text in key_lines for wrapped in _wrap(probe, text, width - 2 * gap, font)]
    header = gap + 26 * len(title_lines) + line * len(text_lines) + gap + 4
    rows = -(-len(shown) // columns)
    height = header + rows * (tile + caption + gap)
    sheet = Image.new("RGB", (width, height), BACKGROUND_COLOUR)
    draw = ImageDraw.Draw(sheet)
    y = gap
    for text in title_lines:
        draw.text((gap, y), text, fill=TEXT_COLOUR, font=title_font)
        y += 26
    for text in text_lines:
        draw.text((gap, y), text, fill=TEXT_COLOUR, font=font)
        y += line
    for n, (part, canvas, mask) in enumerate(shown):
        x = gap + (n % columns) * (tile + gap)
        top = header + (n // columns) * (tile + caption + gap)
        if canvas is None:
            sheet.paste(Image.new("RGB", (tile, tile), TILE_COLOUR), (x, top))
            draw.text((x + 8, top + tile // 2 - 8), "canvas.npy does not read", fill=TEXT_COLOUR, font=font)
        else:
            image = outline_fill(canvas, mask)
            if image.size != (tile, tile):
                image = image.resize((tile, tile), Image.BICUBIC)
            sheet.paste(image, (x, top))
        y = top + tile + 4
        name = f"{n + 1}. {part.key}"
        draw.text((x, y), fit_text(draw, name, tile, font), fill=TEXT_COLOUR, font=font)
        label = part.class_name if part.has_background else f"{part.class_name} (no background)"
        draw.text((x, y + line), fit_text(draw, label, tile, font), fill=TEXT_COLOUR, font=font)
        _draw_scores(draw, (x, y + 2 * line), part.scores, ("score", "texture"), font)
        _draw_scores(draw, (x, y + 3 * line), part.scores, ("seam", "step"), font)
    return _save_png(sheet, out_path)
