"""#10.3: a -10 build made with --allow-missing says so on its card, with what is missing, instead of
promising a balanced test split it does not have."""

from __future__ import annotations

from parts_factory import compose_args, fake_images, write_parts

from hsi.cli import main


def test_an_incomplete_subset_build_says_so_on_its_card(tmp_path, capsys):
    write_parts(tmp_path / "parts", {"val": fake_images(["n01443537", "n02134084"], per_class=4)})
    args = compose_args(
        tmp_path / "parts",
        tmp_path / "out",
        "--variant",
        "hard-spurious-imagenet-10",
        "--no-progress",
        "--allow-missing",
    )
    assert main(args) == 0
    dataset = tmp_path / "out" / "hard-spurious-imagenet-10"
    assert main(["validate", str(dataset), "--no-previews"]) == 0
    assert main(["release", str(dataset), "--out", str(tmp_path / "rel" / "hard-spurious-imagenet")]) == 0
    card = (tmp_path / "rel" / "hard-spurious-imagenet" / "README.md").read_text()
    assert "**Incomplete by request** (built with `--allow-missing`)" in card
    assert "n02437312 (Arabian camel) has no image in train" in card
