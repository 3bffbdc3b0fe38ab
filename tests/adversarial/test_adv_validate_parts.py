"""A corrupted parts shard must not vouch for (or against) a composed dataset: `validate --parts`
checks every parts shard against the parts manifest before comparing pixels."""

from __future__ import annotations

from parts_factory import compose_args, fake_images, write_parts

from hsi.cli import main


def test_validate_refuses_parts_whose_shards_changed_after_extract(tmp_path, capsys):
    parts = tmp_path / "parts"
    write_parts(parts, {"val": fake_images(["n01443537", "n02437312"], per_class=2)}, shard_size=2)
    assert main(compose_args(parts, tmp_path / "out", "--no-progress")) == 0
    dataset = tmp_path / "out" / "hard-spurious-imagenet"
    assert main(["validate", str(dataset), "--parts", str(parts), "--no-previews"]) == 0
    report = (dataset / "validation.json").read_bytes()
    shard = parts / "val-00001.tar"
    data = bytearray(shard.read_bytes())
    data[1024] ^= 0xFF  # one flipped byte inside a member
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["validate", str(dataset), "--parts", str(parts), "--no-previews"]) == 2
    err = capsys.readouterr().err
    assert "parts shard val-00001.tar" in err and "does not match the parts manifest" in err
    assert (dataset / "validation.json").read_bytes() == report  # refused before anything was written
