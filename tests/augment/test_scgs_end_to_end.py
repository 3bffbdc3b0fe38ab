"""`hsi scgs` through the CLI on a small planted -10-style config with the tiny inpainting pipeline:
the variant and its three controls, what the shards and manifests hold, determinism and resume,
validation, and the refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from scgs_factory import generated, scgs_command

from builder.core.manifest import MANIFEST_NAME, Manifest
from builder.core.shard_read import iter_shard
from builder.formats.augmented import AUGMENT_FIELDS, decode_augment_json, decode_keep_mask
from builder.formats.composites import check_composite_json, decode_composite_json, decode_composite_pixels
from hsi.cli import main

pytest.importorskip("diffusers")
MASKS = ("cam", "random", "shifted", "none")


def config_dir(out: Path, mask: str) -> Path:
    return out / ("planted-spurious-scgs" + ("" if mask == "cam" else f"-{mask}"))


@pytest.fixture(scope="module")
def built(planted_source, erm_checkpoint, tiny_pipeline, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scgs-out")
    for mask in MASKS:
        assert main(scgs_command(planted_source, out, erm_checkpoint, tiny_pipeline, "--mask", mask)) == 0
    return out


def test_variant_and_controls_share_sampled_images_prompts_and_seeds(built, planted_source):
    source = Manifest.read(planted_source)
    blocks = {
        mask: {k: decode_augment_json(m) for k, m in generated(config_dir(built, mask)).items()} for mask in MASKS
    }
    keys = set(blocks["cam"])
    assert keys and all(set(b) == keys for b in blocks.values())
    for key in keys:
        for field in ("source_key", "prompt", "generation_seed", "true_label", "predicted_label", "cluster"):
            assert len({blocks[mask][key][field] for mask in MASKS}) == 1, field
    for mask in MASKS:
        manifest = Manifest.read(config_dir(built, mask))
        assert manifest.stage == "scgs" and manifest.config == config_dir(built, mask).name
        train = manifest.split("train")
        assert train.num_samples == source.split("train").num_samples + len(keys)
        summary = manifest.augment
        assert summary["mask"] == mask and summary["generated_images"] == len(keys) == summary["kept_images"]
        assert summary["train_samples"] == source.split("train").num_samples
        assert sum(row["sampled"] for row in summary["per_class"].values()) == summary["sampled_images"]
        assert summary["label_check"]["overall"]["generated"] == len(keys)
        assert manifest.backends["generator"]["weights_sha256"] and manifest.backends["classifier"]["checkpoint_sha256"]


def test_val_and_test_are_the_source_shards_byte_for_byte(built, planted_source):
    source = Manifest.read(planted_source)
    folder = config_dir(built, "cam")
    manifest = Manifest.read(folder)
    for split in ("val", "test"):
        assert manifest.split(split).shards == source.split(split).shards
        for name in source.split(split).filenames:
            assert (folder / name).read_bytes() == (planted_source / name).read_bytes()
    n = len(source.split("train").shards)
    assert manifest.split("train").shards[:n] == source.split("train").shards


def test_generated_samples_carry_schema_provenance_and_masks(built, planted_source):
    sources = {}
    for path in Manifest.read(planted_source).shard_paths(planted_source, "train"):
        sources.update(iter_shard(path))
    cam, random, shifted, none = (generated(config_dir(built, mask)) for mask in MASKS)
    for key, members in cam.items():
        meta, block = decode_composite_json(members), decode_augment_json(members)
        assert check_composite_json(meta) == [] and set(block) == set(AUGMENT_FIELDS)
        assert meta["variant"] == "planted-spurious-scgs" and key == f"{block['source_key']}_scgs{block['index']}"
        source_meta = decode_composite_json(sources[block["source_key"]])
        assert {k: v for k, v in meta.items() if k != "variant"} == {
            k: v for k, v in source_meta.items() if k != "variant"
        }
        assert block["true_label"] == meta["label"] != block["predicted_label"]
        assert block["prompt"] == f"a photo of a {meta['class_name']}"
        assert block["sd_model"] and len(block["sd_weights_sha256"]) == 64 and block["threshold"] == 0.7
        keep = decode_keep_mask(members["mask.png"])
        assert keep.shape == (64, 64) and block["mask_area_fraction"] == pytest.approx(keep.mean(), abs=1e-6)
        # polarity: with paste-back the kept source pixels survive (within JPEG noise), the rest is repainted
        if keep.any() and (~keep).any():
            out = decode_composite_pixels(members["jpg"]).astype(int)
            src = decode_composite_pixels(sources[block["source_key"]]["jpg"]).astype(int)
            assert np.abs(out - src)[keep].mean() < 12 < np.abs(out - src)[~keep].mean()
        # the controls: exactly the CAM mask's area; the CAM mask rolled; nothing kept
        assert decode_keep_mask(random[key]["mask.png"]).sum() == keep.sum()
        rolled = decode_keep_mask(shifted[key]["mask.png"])
        assert rolled.sum() == keep.sum()
        assert any(
            np.array_equal(np.roll(keep, (dy, dx), (0, 1)), rolled) for dy in range(16, 49) for dx in range(16, 49)
        )
        assert not decode_keep_mask(none[key]["mask.png"]).any()
        assert decode_augment_json(none[key])["mask_area_fraction"] == 0.0


def test_the_outputs_validate_and_release_with_their_card_section(built, planted_source, tmp_path):
    for folder in (planted_source, config_dir(built, "cam"), config_dir(built, "random")):
        assert main(["validate", str(folder), "--no-previews"]) == 0
        assert json.loads((folder / "validation.json").read_text())["ok"] is True
    release = tmp_path / "release"
    configs = [str(planted_source), str(config_dir(built, "cam")), str(config_dir(built, "random"))]
    assert main(["release", *configs, "--out", str(release)]) == 0
    card = (release / "README.md").read_text()
    assert card.count("### SCGS augmentation") == 2
    assert "a control: random low-passed blobs with exactly the CAM mask's pixel count" in card
    for name in ("scgs_preview.png", "scgs_label_check.png"):
        assert f"(previews/planted-spurious-scgs/{name})" in card
        assert (release / "previews" / "planted-spurious-scgs" / name).stat().st_size > 1000
    generated_count = len(generated(config_dir(built, "cam")))
    assert f"plus {generated_count} generated images; val and test are the source's shards" in card
    assert "| all | " in card


def test_same_seed_is_byte_identical_resume_after_a_kill_and_another_seed_differs(
    built, planted_source, erm_checkpoint, tiny_pipeline, tmp_path
):
    reference = config_dir(built, "cam")
    command = scgs_command(planted_source, tmp_path / "again", erm_checkpoint, tiny_pipeline)
    assert main(command) == 0
    again = config_dir(tmp_path / "again", "cam")
    names = Manifest.read(reference).split("train").filenames
    assert all((again / n).read_bytes() == (reference / n).read_bytes() for n in names)
    # what a kill leaves: no manifest, a half-written temporary, the last generated shard missing
    (again / MANIFEST_NAME).unlink()
    (again / names[-1]).unlink()
    (again / f"{names[-1]}.999.tmp").write_bytes(b"half")
    assert main(command) == 0
    assert all((again / n).read_bytes() == (reference / n).read_bytes() for n in names)
    assert (again / MANIFEST_NAME).read_text() == (reference / MANIFEST_NAME).read_text()
    assert not list(again.glob("*.tmp"))
    other = scgs_command(planted_source, tmp_path / "other", erm_checkpoint, tiny_pipeline, "--seed", "1")
    assert main(other) == 0
    assert generated(config_dir(tmp_path / "other", "cam")).keys() != generated(reference).keys() or any(
        a["jpg"] != b["jpg"]
        for a, b in zip(generated(config_dir(tmp_path / "other", "cam")).values(), generated(reference).values())
    )
    # other settings in the same folder are refused
    assert main([*command, "--threshold", "0.5"]) != 0


def test_refusals(planted_source, erm_checkpoint, tiny_pipeline, tmp_path, capsys):
    # a config without a train split
    no_train = tmp_path / "no-train"
    shutil.copytree(planted_source, no_train)
    info = json.loads((no_train / MANIFEST_NAME).read_text())
    del info["splits"]["train"]
    (no_train / MANIFEST_NAME).write_text(json.dumps(info))
    assert main(scgs_command(no_train, tmp_path / "o1", erm_checkpoint, tiny_pipeline)) != 0
    assert "has no train split" in capsys.readouterr().err
    # a missing pipeline folder names the flag
    assert main(scgs_command(planted_source, tmp_path / "o2", erm_checkpoint, tmp_path / "no-such-sd")) != 0
    assert "--sd-model" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()
    # workers, each on a GPU of its own, with a --device that names one GPU
    o3 = scgs_command(planted_source, tmp_path / "o3", erm_checkpoint, tiny_pipeline)
    assert main([*o3, "--device", "cuda:0", "--workers", "2"]) == 2
    assert "--device cuda:0 names one GPU" in capsys.readouterr().err
    assert not (tmp_path / "o3").exists()


def test_predictions_table_of_another_split_is_refused(planted_source, erm_checkpoint, tiny_pipeline, tmp_path, capsys):
    from builder.augment.misclassified import PredictedRow, PredictionsMismatch, misclassified_from_predictions
    from builder.augment.source import open_source

    source = open_source(planted_source)
    train = list(source.samples())
    rows = [PredictedRow(s.key, s.label, (s.label + 1) % 4 if i % 3 == 0 else s.label) for i, s in enumerate(train)]
    got = misclassified_from_predictions(source, rows)
    assert len(got.misclassified) == len(range(0, len(train), 3)) and got.train_samples == len(train)
    with pytest.raises(PredictionsMismatch, match=r"1 of its \d+ samples have no row"):
        misclassified_from_predictions(source, rows[1:])
    with pytest.raises(PredictionsMismatch, match="other labels"):
        misclassified_from_predictions(source, [PredictedRow(r.key, (r.label + 1) % 4, r.predicted) for r in rows])


def test_validation_catches_a_broken_augment_block_and_a_wrong_key(built, tmp_path):
    from builder.core.shard_write import write_shard
    from validation.integrity import check_dataset

    folder = tmp_path / "broken"
    shutil.copytree(config_dir(built, "cam"), folder)
    manifest = Manifest.read(folder)
    last = manifest.split("train").filenames[-1]
    samples = list(iter_shard(folder / last))
    key, members = samples[0]
    block = json.loads(members["augment.json"])
    del block["prompt"]
    samples[0] = (key, {**members, "augment.json": json.dumps(block).encode()})
    assert len(samples) >= 2
    other_key, other = samples[1]
    samples[1] = (other_key.replace("_scgs", "_gen"), other)
    stats = write_shard(folder / last, samples)
    shards = manifest.split("train").shards
    shards[-1] = stats
    manifest.write(folder)
    reasons = {f.reason for f in check_dataset(folder).failures}
    assert {"augment-schema", "key"} <= reasons
