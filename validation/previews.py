"""Preview sheets for the card and the README.

- Contact sheet of a composed config: rows = groups, columns = sizes, a few samples per cell, labelled.
- Parts grid: for a handful of source images, the object crop, its mask, the erase mask and the
  inpainted background (with the object box drawn), side by side.

Samples are the first keys (sorted) of each cell, so the same dataset gives the same sheet.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from builder.core.taxonomy import sorted_groups
from builder.formats.composites import decode_composite_image, decode_composite_json
from builder.formats.parts import decode_parts, iter_parts_samples
from builder.core.shards import iter_shard, manifest_shard_paths, read_manifest

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


def collect_cells(dataset_dir: Path, split: str, per_cell: int) -> dict[tuple[str, int], list[tuple[str, bytes]]]:
    """(group, size) -> up to `per_cell` (key, jpg bytes), the smallest keys of each cell."""
    manifest = read_manifest(dataset_dir)
    cells: dict[tuple[str, int], list[tuple[str, bytes]]] = {}
    for path in manifest_shard_paths(dataset_dir, manifest, split):
        for key, members in iter_shard(path):
            meta = decode_composite_json(members)
            cell = cells.setdefault((meta["group"], int(meta["size"])), [])
            cell.append((key, members["jpg"]))
            cell.sort()
            del cell[per_cell:]
    return cells


def contact_sheet(dataset_dir: Path, out_path: Path, split: str | None = None, per_cell: int = 3,
                  thumb: int = 112) -> Path:
    """Rows = groups, columns = sizes, `per_cell` thumbnails per cell, with row and column labels."""
    manifest = read_manifest(dataset_dir)
    split = split or sorted(manifest["splits"])[0]
    cells = collect_cells(dataset_dir, split, per_cell)
    groups = sorted_groups(g for g, _ in cells)
    sizes = sorted({s for _, s in cells})
    row_label_width = 60
    cell_width = per_cell * (thumb + MARGIN) + MARGIN
    width = row_label_width + len(sizes) * cell_width
    height = LABEL_HEIGHT * 2 + len(groups) * (thumb + 2 * MARGIN)
    sheet = Image.new("RGB", (max(width, 1), max(height, 1)), BACKGROUND_COLOUR)
    draw = ImageDraw.Draw(sheet)
    font = _font()
    draw.text((MARGIN, 2), f"{manifest.get('config', dataset_dir.name)} / {split}", fill=TEXT_COLOUR, font=font)
    for column, size in enumerate(sizes):
        draw.text((row_label_width + column * cell_width + MARGIN, LABEL_HEIGHT + 2), f"size {size}px", fill=TEXT_COLOUR, font=font)
    for row, group in enumerate(groups):
        top = LABEL_HEIGHT * 2 + row * (thumb + 2 * MARGIN) + MARGIN
        draw.text((MARGIN, top + thumb // 2 - 6), group, fill=TEXT_COLOUR, font=font)
        for column, size in enumerate(sizes):
            for n, (_, jpg) in enumerate(cells.get((group, size), [])):
                small = decode_composite_image(jpg).resize((thumb, thumb), Image.BICUBIC)
                left = row_label_width + column * cell_width + MARGIN + n * (thumb + MARGIN)
                sheet.paste(small, (left, top))
    return _save_png(sheet, out_path)


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


def parts_grid(parts_dir: Path, out_path: Path, count: int = 6, tile: int = 160) -> Path:
    """A row per source image (the first `count` by key): crop, mask, erase mask, background."""
    rows = []
    for key, members in iter_parts_samples(parts_dir):
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
        draw.text((MARGIN, top + tile // 2 - 12), parts.key[-26:], fill=TEXT_COLOUR, font=font)
        draw.text((MARGIN, top + tile // 2 + 2), parts.meta.get("class_name", "")[:26], fill=TEXT_COLOUR, font=font)
        background = Image.fromarray(parts.background).convert("RGB")
        x0, y0, x1, y1 = parts.meta["object_box"]
        ImageDraw.Draw(background).rectangle((x0, y0, x1, y1), outline=(255, 0, 0), width=max(1, background.width // 120))
        tiles = [_fit(parts.crop, tile), _fit(parts.mask, tile), _fit(parts.erase, tile),
                 _fit(np.asarray(background), tile)]
        for column, image in enumerate(tiles):
            sheet.paste(image, (label_width + column * (tile + MARGIN) + MARGIN, top))
    return _save_png(sheet, out_path)
