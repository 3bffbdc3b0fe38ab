"""The contact sheet shows every split, each as its own labelled block: on the -10 subset the spurious
train split (90% of objects on their own class's background) is the point, not only the balanced test
split (issue 25)."""

from __future__ import annotations

import numpy as np
import pytest
from parts_factory import compose_quietly, fake_images, write_parts
from PIL import Image, ImageDraw, ImageFont
from test_validation_meaning import TEN

from validation import previews


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    """-10 from 20 flat-colour images per class: 10 per class in train (9 own background, 1 paired),
    10 in test (both backgrounds)."""
    root = tmp_path_factory.mktemp("ten-sheet")
    write_parts(root / "parts", {"val": fake_images(TEN, per_class=20)}, shard_size=50)
    return compose_quietly(root / "parts", "hard-spurious-imagenet-10", root / "composed").dataset_dir


def rows_showing(sheet: Image.Image, text: str) -> list[int]:
    """The y positions where `text`, drawn in the sheet's font at the sheet's left margin, appears
    pixel for pixel."""
    font = ImageFont.load_default()
    probe = Image.new("RGB", sheet.size, previews.BACKGROUND_COLOUR)
    draw = ImageDraw.Draw(probe)
    draw.text((previews.MARGIN, 0), text, fill=previews.TEXT_COLOUR, font=font)
    left, top, right, bottom = draw.textbbox((previews.MARGIN, 0), text, font=font)
    template = np.asarray(probe)[top:bottom, left:right]
    pixels = np.asarray(sheet.convert("RGB"))
    height = bottom - top
    return [
        y - top for y in range(pixels.shape[0] - height) if np.array_equal(pixels[y : y + height, left:right], template)
    ]


def test_both_splits_are_blocks_labelled_with_their_background_mix(ten, tmp_path):
    blocks = previews.contact_sheet_blocks(ten, per_cell=3)
    assert [b.split for b in blocks] == ["train", "test"]
    train, test = blocks
    assert (train.samples, test.samples) == (600, 1200)  # 100 images x 3 sizes x 2 positions; test on 2 backgrounds
    assert train.heading == "split train: 600 samples, 90% on their own class's background"
    assert test.heading == "split test: 1200 samples, 50% on their own class's background"
    assert any(group.endswith("paired") for group, _ in train.cells)  # the 10% minority is shown too

    path = previews.contact_sheet(ten, tmp_path / "contact_sheet.png")
    with Image.open(path) as sheet:
        train_rows, test_rows = rows_showing(sheet, train.heading), rows_showing(sheet, test.heading)
        assert len(train_rows) == len(test_rows) == 1 and train_rows[0] < test_rows[0]  # drawn, train first
        one = previews.contact_sheet(ten, tmp_path / "test_only.png", split="test")
        with Image.open(one) as test_only:
            assert rows_showing(test_only, train.heading) == [] and len(rows_showing(test_only, test.heading)) == 1
            assert sheet.height > test_only.height and sheet.width == test_only.width
