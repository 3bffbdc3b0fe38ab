"""`hsi scgs` attacked as a hostile user would: an --out at or inside the source, sources that are not
composed configs or whose `_info.json` was tampered with, predictions tables of something else,
flag values out of range, unusable pipelines, CAM layers and checkpoints, degenerate CAMs, a killed
run resumed with other flags, two runs on one folder, and files of the user's in the output folder.

Each test says which attacks failed before their fix (the rest were already refused and stay as
guards). The rules: nothing written outside the output folder (nor into the source), no file the
toolkit did not write deleted or overwritten, one run per folder, a killed run resumable, and bad
input refused with one HsiError saying what is wrong and what to pass, before the first write."""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from planted_spurious import compose_planted
from scgs_factory import generated, scgs_command, write_erm_checkpoint
from tiny_sd import cached_tiny_inpaint_pipeline

from builder.core.config import CONFIG_NAME
from builder.core.locks import exclusive_folder
from builder.core.manifest import MANIFEST_NAME, Manifest
from builder.core.shard_read import iter_shard
from builder.core.shard_write import write_shard
from builder.formats.augmented import decode_augment_json, decode_cam, decode_keep_mask
from builder.formats.composites import decode_composite_pixels
from hsi.cli import main

pytest.importorskip("diffusers")
CONFIG = "planted-spurious-scgs"


@dataclass(frozen=True)
class World:
    root: Path
    source: Path
    checkpoint: Path
    pipeline: Path


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    root = tmp_path_factory.mktemp("adv-scgs")
    source = compose_planted(root / "planted", per_class=16, holdout=0.34)
    checkpoint = write_erm_checkpoint(root / "erm" / "best.pt")
    return World(root, source, checkpoint, cached_tiny_inpaint_pipeline(tmp_path_factory))


@pytest.fixture(scope="module")
def built(world) -> Path:
    """A finished `hsi scgs` config folder (default flags of the tests)."""
    out = world.root / "built"
    assert scgs(world, out) == 0
    return out / CONFIG


def scgs(world: World, out: Path, *extra: str, source: Path | None = None, checkpoint: Path | None = None) -> int:
    command = scgs_command(source or world.source, out, checkpoint or world.checkpoint, world.pipeline, *extra)
    return main(command)


def tree(folder: Path) -> dict[str, str]:
    """{relative path: sha256 (or "dir")} of everything under `folder`, hidden files included."""
    return {
        str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(folder).rglob("*"))
    }


def refused(code: int, capsys, *needles: str) -> str:
    """The run was refused as a usage/input error whose one message holds every needle."""
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def tampered(world: World, folder: Path, edit) -> Path:
    """A copy of the source whose `_info.json` went through `edit(dict)`."""
    shutil.copytree(world.source, folder)
    info = json.loads((folder / MANIFEST_NAME).read_text())
    edit(info)
    (folder / MANIFEST_NAME).write_text(json.dumps(info))
    return folder


# --- where it writes ------------------------------------------------------------------------


def test_an_out_at_or_inside_the_source_or_a_file_is_refused_before_any_write(world, tmp_path, capsys):
    """Failed before: --out SOURCE wrote SOURCE/planted-spurious-scgs/ and a lock file into the
    source dataset, and so did --out SOURCE/sub; --out a-file ended in a FileExistsError traceback.
    A source inside the config folder was already refused (as a folder of someone else's)."""
    before = tree(world.source)
    refused(scgs(world, world.source), capsys, "is itself a dataset folder", "pass the folder beside it")
    refused(scgs(world, world.source / "sub"), capsys, "into (or over) its source folder")
    assert tree(world.source) == before
    a_file = tmp_path / "a-file"
    a_file.write_text("mine")
    refused(scgs(world, a_file), capsys, "is a file, not a folder")
    assert a_file.read_text() == "mine"
    # the source inside the folder the config would be written to (--overwrite would delete it)
    nested = tmp_path / "out" / CONFIG / "source"
    shutil.copytree(world.source, nested)
    refused(scgs(world, tmp_path / "out", "--overwrite", source=nested), capsys, "into (or over) its source folder")
    assert tree(nested) == before


def test_a_source_that_is_not_a_composed_config_is_refused(world, built, tmp_path, capsys):
    """Failed before: a release folder was called "not a finished dataset (re-run the command that
    builds it)", which misleads; an `hsi scgs` output and an empty folder were already refused."""
    release = tmp_path / "release"
    release.mkdir()
    (release / "_release.json").write_text("{}")
    refused(scgs(world, tmp_path / "o", source=release), capsys, "is a release folder", "data/<config>")
    refused(scgs(world, tmp_path / "o", source=built), capsys, "written by `hsi scgs`, not `hsi compose`")
    (tmp_path / "empty").mkdir()
    refused(scgs(world, tmp_path / "o", source=tmp_path / "empty"), capsys, "is not a finished dataset")
    assert not (tmp_path / "o").exists()


def test_a_tampered_source_manifest_is_refused_before_any_write(world, tmp_path, capsys):
    """Failed before: a wrong sha256 was found only while copying (the output folder, its settings
    and the first copies already written); a split named `../../escape` made hsi write
    `escape-00000.tar` two folders above the config, outside --out; class names cut to two (with
    the spec's classes or without) ended in an IndexError traceback; a train shard listed with more
    samples than it holds was copied into a config whose manifest repeated the wrong count. Shard
    names like `../x.tar` and a missing train split were already refused."""
    out = tmp_path / "deep" / "out"

    def zero_sha(info):
        info["splits"]["test"]["shards"][0]["sha256"] = "0" * 64

    def escape(info):
        entry = info["splits"].pop("test")
        entry["shards"][0]["filename"] = "../../escape-00000.tar"
        entry["filenames"] = ["../../escape-00000.tar"]
        info["splits"]["../../escape"] = entry

    def hostile_shard(info):
        info["splits"]["train"]["shards"][0]["filename"] = "../x.tar"

    def no_train(info):
        del info["splits"]["train"]

    def two_classes(info):
        info["class_names"] = info["class_names"][:2]

    def labels_beyond_the_class_names(info):
        info["class_names"] = info["class_names"][:2]
        pairs = info["spec"]["subset"]["pairs"]
        info["spec"]["subset"]["pairs"] = {wnid: pairs[wnid] for wnid in sorted(pairs)[:2]}

    def inflated(info):
        train = info["splits"]["train"]
        train["shards"][0]["num_samples"] += 5
        train["num_samples"] += 5
        train["shard_lengths"][0] += 5

    cases = [
        (zero_sha, ("test-00000.tar does not match the sha256", "rebuild it with `hsi compose`")),
        (escape, ("'../../escape' is not a safe split name",)),
        (hostile_shard, ("'../x.tar' is not of the form <split>-NNNNN.tar",)),
        (no_train, ("has no train split",)),
        (two_classes, ("names 2 classes but its spec has 4",)),
        (labels_beyond_the_class_names, ("its spec is not one this tool composes", "subset.pairs")),
        (inflated, ("holds 40 samples, its manifest lists 45",)),
    ]
    for n, (edit, needles) in enumerate(cases):
        source = tampered(world, tmp_path / "deep" / f"source-{n}", edit)
        refused(scgs(world, out, source=source), capsys, *needles)
        assert not out.exists(), edit.__name__
    assert not list(tmp_path.rglob("escape-*")), "a shard was written outside --out"


def test_a_key_twice_in_the_train_split_is_refused(world, tmp_path, capsys):
    """Failed before: a second train shard repeating samples of the first (its sha256 listed
    correctly) put the same keys twice into M; the run stopped midway ("duplicate sample keys in
    train-00002.tar") after the source's shards had been copied."""
    source = tmp_path / "source"
    shutil.copytree(world.source, source)
    manifest = Manifest.read(source)
    samples = list(iter_shard(source / "train-00000.tar"))
    stats = write_shard(source / "train-00001.tar", samples[:3])
    manifest.splits["train"].shards.append(stats)
    manifest.write(source)
    refused(scgs(world, tmp_path / "out", source=source), capsys, "occurs twice in the train split")
    assert not (tmp_path / "out").exists()


# --- predictions tables ---------------------------------------------------------------------


def predictions_table(world: World, path: Path, data: dict | None = None) -> Path:
    """An `hsi eval`-style predictions table of the train split, every third sample wrong."""
    from builder.augment.source import open_source
    from builder.core.classes import class_of
    from evaluation.model_formats.labels import config_wnids
    from evaluation.model_formats.models import sha256_of
    from evaluation.predicting.predictions import write_predictions

    source = open_source(world.source)
    wnids = config_wnids(source.manifest.to_json())
    rows = [
        {
            "key": sample.key,
            "status": "ok",
            "label_class": class_of(wnids[sample.label]).index,
            "pred_class": class_of(wnids[(sample.label + (i % 3 == 0)) % len(wnids)]).index,
            "meta": sample.meta,
        }
        for i, sample in enumerate(source.samples())
    ]
    metadata = {"model": {"checkpoint_sha256": sha256_of(world.checkpoint)}, "data": data or {}}
    return write_predictions(path, rows, [], metadata)


def test_predictions_tables_of_something_else_are_refused(world, tmp_path, capsys):
    """Failed before: a table without a key/status/pred_class column ended in a KeyError traceback, a
    null pred_class in a ValueError traceback; a table with two rows for one sample (the second
    overriding the first) and one made on another build of the config (same keys, other
    fingerprint) were accepted, and so was a table whose metadata says it is of the val split.
    Rows of other samples were already refused."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from builder.augment.misclassified import PredictionsMismatch, misclassified_from_predictions
    from builder.augment.source import open_source
    from evaluation.model_formats.labels import config_wnids
    from training.scgs_classifier import read_train_predictions

    source = open_source(world.source)
    wnids = config_wnids(source.manifest.to_json())
    fingerprint = source.manifest.fingerprint
    good = predictions_table(world, tmp_path / "good.parquet")
    table = pq.read_table(good)
    rows, _ = read_train_predictions(good, wnids, None, fingerprint)
    assert len(misclassified_from_predictions(source, rows).misclassified) == len(range(0, len(rows), 3))

    def variant(name: str, changed) -> Path:
        path = tmp_path / f"{name}.parquet"
        pq.write_table(changed, path)
        return path

    records = table.to_pylist()
    null_pred = [dict(r, pred_class=None) if i == 0 else r for i, r in enumerate(records)]
    twice = [*records, dict(records[1], pred_class=records[0]["label_class"])]
    elsewhere = [dict(r, key=f"{r['key']}x") if i == 0 else r for i, r in enumerate(records)]
    cases = {
        "no-pred-class": (table.drop(["pred_class"]), "has no column pred_class"),
        "no-key": (table.drop(["key", "status"]), "has no column key, status"),
        "null-pred": (pa.Table.from_pylist(null_pred, schema=table.schema), "has no key, label_class or pred_class"),
        "twice": (pa.Table.from_pylist(twice, schema=table.schema), "has two rows for sample"),
        "elsewhere": (pa.Table.from_pylist(elsewhere, schema=table.schema), "1 rows are of other samples"),
    }
    for name, (changed, message) in cases.items():
        with pytest.raises(PredictionsMismatch, match=message.replace("(", r"\(")):
            rows, _ = read_train_predictions(variant(name, changed), wnids, None, fingerprint)
            misclassified_from_predictions(source, rows)
    val = predictions_table(world, tmp_path / "val.parquet", {"split": "val"})
    with pytest.raises(PredictionsMismatch, match="are of the val split"):
        read_train_predictions(val, wnids, None, fingerprint)
    # through the CLI: a table of another build of the config, refused before any write
    other_build = {"config": "planted-spurious", "fingerprint": "f" * 64}
    other = predictions_table(world, tmp_path / "other.parquet", other_build)
    code = scgs(world, tmp_path / "out", "--predictions", str(other))
    refused(code, capsys, "were made on another build of planted-spurious", "run `hsi eval` on this source folder")
    assert not (tmp_path / "out").exists()


# --- flag values ----------------------------------------------------------------------------

BAD_FLAGS = [
    # already refused (guards)
    (("--fraction", "0"), "--fraction must be in (0, 1]"),
    (("--fraction", "1.5"), "--fraction must be in (0, 1]"),
    (("--fraction", "nan"), "--fraction must be in (0, 1]"),
    (("--clusters", "0"), "--clusters must be at least 1"),
    (("--threshold", "-0.1"), "--threshold must be in (0, 1]"),
    (("--threshold", "1.5"), "--threshold must be in (0, 1]"),
    (("--threshold", "nan"), "--threshold must be in (0, 1]"),
    (("--per-image", "0"), "--per-image must be at least 1"),
    (("--batch-size", "0"), "--batch-size and --shard-size must be at least 1"),
    (("--prompt-template", "a photo of a {class_name} {"), "--prompt-template may hold only"),
    (("--prompt-template", "a {animal} like {class_name}"), "--prompt-template may hold only"),
    (("--prompt-template", "a photo"), "--prompt-template must contain {class_name}"),
    (("--strength", "nan"), "--strength must be within (0, 1]"),
    # failed before: accepted, and made NaN guidance images / prompts with a memory address in them
    (("--guidance", "nan"), "--guidance must be a finite number"),
    (("--guidance", "inf"), "--guidance must be a finite number"),
    (("--prompt-template", "{class_name} {class_name.upper}"), "got {class_name.upper}"),
    (("--prompt-template", "{class_name!r} {class_name}"), "got {class_name!r} in"),
]


@pytest.mark.parametrize(("flags", "message"), BAD_FLAGS, ids=[" ".join(f) for f, _ in BAD_FLAGS])
def test_out_of_range_flags_are_refused_before_any_write(world, tmp_path, capsys, flags, message):
    refused(scgs(world, tmp_path / "out", *flags), capsys, message)
    assert not (tmp_path / "out").exists()


# --- unusable models ------------------------------------------------------------------------


def test_unusable_pipelines_are_refused_naming_the_flag(world, tmp_path, capsys):
    """Failed before: a file given as --sd-model was called "the folder does not exist". A missing
    folder and a 4-channel (text-to-image) UNet were already refused."""
    from diffusers import UNet2DConditionModel

    a_file = tmp_path / "model.safetensors"
    a_file.write_bytes(b"weights")
    refused(scgs(world, tmp_path / "out", "--sd-model", str(a_file)), capsys, "--sd-model", "is a file")
    refused(scgs(world, tmp_path / "out", "--sd-model", str(tmp_path / "none")), capsys, "--sd-model", "does not exist")
    four = tmp_path / "four-channel"
    shutil.copytree(world.pipeline, four)
    config = {k: v for k, v in UNet2DConditionModel.load_config(four / "unet").items() if not k.startswith("_")}
    shutil.rmtree(four / "unet")
    UNet2DConditionModel(**{**config, "in_channels": 4}).save_pretrained(four / "unet")
    refused(scgs(world, tmp_path / "out", "--sd-model", str(four)), capsys, "takes 4 input channels")
    assert not (tmp_path / "out").exists()


def test_a_cam_layer_without_a_map_is_refused_before_any_write(world, tmp_path, capsys):
    """Failed before: `--cam-layer fc` (a Linear layer) was refused only when the first generated
    shard was built, after the source's shards had been copied into the output folder."""
    refused(scgs(world, tmp_path / "out", "--cam-layer", "fc"), capsys, "'fc' cannot give a Grad-CAM++ map")
    assert not (tmp_path / "out").exists()


def broken_checkpoint(world: World, path: Path, value: float, bias: int | None = None) -> Path:
    """The ERM checkpoint with every float weight set to `value` (and, optionally, a classifier
    bias that makes one class win everywhere: constant logits)."""
    import torch

    payload = torch.load(world.checkpoint, weights_only=True)
    state = {k: torch.full_like(v, value) if v.is_floating_point() else v for k, v in payload["model"].items()}
    if bias is not None:
        state["fc.bias"] = torch.nn.functional.one_hot(torch.tensor(bias), state["fc.bias"].numel()).float()
    torch.save({**payload, "model": state}, path)
    return path


def test_a_diverged_checkpoint_is_refused_before_any_write(world, tmp_path, capsys):
    """Failed before: NaN weights gave NaN features, and scikit-learn's KMeans ended the run in a
    ValueError traceback."""
    nan = broken_checkpoint(world, tmp_path / "nan.pt", float("nan"))
    refused(scgs(world, tmp_path / "out", checkpoint=nan), capsys, "non-finite logits", "pass a checkpoint")
    assert not (tmp_path / "out").exists()


# --- degenerate CAMs ------------------------------------------------------------------------


def fake_cams(value: float):
    def maps(model, images, target_classes, layer=None, batch_size=32):
        return np.full((images.shape[0], images.shape[2], images.shape[3]), value, dtype=np.float32)

    return maps


@pytest.mark.parametrize(
    ("cam", "mask", "area"),
    [("constant-logits", "random", 0.0), ("nan", "shifted", 0.0), ("ones", "random", 1.0)],
)
def test_degenerate_cams_give_recorded_samples_of_area_0_or_1(world, tmp_path, monkeypatch, cam, mask, area):
    """Constant logits (a real model: all-zero weights, one class's bias) give an all-zero CAM: the
    CAM mask and its controls keep nothing (area 0), recorded as ordinary samples (already fine). A
    NaN map (failed before: cast to uint8 with a RuntimeWarning, its stored value up to the
    platform) now counts as no evidence. A map that is 1 everywhere keeps the whole canvas, the
    control too, and the kept pixels are the source's (already fine)."""
    checkpoint = None
    if cam == "constant-logits":
        checkpoint = broken_checkpoint(world, tmp_path / "zero.pt", 0.0, bias=1)
    else:
        monkeypatch.setattr("builder.backends.gradcam_pp.gradcam_pp_maps", fake_cams(np.nan if cam == "nan" else 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert scgs(world, tmp_path, "--mask", mask, checkpoint=checkpoint) == 0
    folder = tmp_path / f"{CONFIG}-{mask}"
    samples = generated(folder)
    sources = {k: m for p in Manifest.read(world.source).shard_paths(world.source, "train") for k, m in iter_shard(p)}
    assert samples and Manifest.read(folder).augment["generated_images"] == len(samples)
    for members in samples.values():
        block = decode_augment_json(members)
        keep = decode_keep_mask(members["mask.png"])
        assert block["mask"] == mask and block["cam_area_fraction"] == area == block["mask_area_fraction"]
        assert keep.mean() == area and decode_cam(members["cam.png"]).mean() == area
        if area == 1.0:  # everything kept and pasted back: the source, within JPEG noise
            source = decode_composite_pixels(sources[block["source_key"]]["jpg"]).astype(int)
            assert np.abs(decode_composite_pixels(members["jpg"]).astype(int) - source).mean() < 3


# --- killed runs, concurrent runs, the user's files -----------------------------------------


def killed_copy(built: Path, folder: Path) -> list[str]:
    """A copy of a finished run as a kill leaves it: no manifest, the last shard missing."""
    shutil.copytree(built, folder)
    names = Manifest.read(built).split("train").filenames
    (folder / MANIFEST_NAME).unlink()
    (folder / names[-1]).unlink()
    (folder / f"{names[-1]}.4242.tmp").write_bytes(b"half")
    return names


def test_a_killed_run_resumed_with_other_flags_is_refused_naming_the_difference(world, built, tmp_path, capsys):
    """Failed before: a resume with --sd-dtype bfloat16 (other images than float32's) was accepted
    and mixed the two in one config. Another --threshold was already refused by name, and the same
    flags resume to the same bytes."""
    folder = tmp_path / CONFIG
    names = killed_copy(built, folder)
    refused(scgs(world, tmp_path, "--sd-dtype", "bfloat16"), capsys, "generator.dtype: 'float32' -> 'bfloat16'")
    refused(scgs(world, tmp_path, "--threshold", "0.5"), capsys, "options.threshold: 0.7 -> 0.5")
    assert not (folder / MANIFEST_NAME).exists() and not (folder / names[-1]).exists()
    assert scgs(world, tmp_path) == 0
    assert tree(folder) == tree(built)


def test_a_killed_run_begun_under_another_thread_count_is_refused_before_any_write(world, built, tmp_path, capsys):
    """Failed before: every process used its own intra-op thread count (a lone process torch's
    default, a worker one), so a run resumed under another worker count mixed images whose floats
    were rounded two ways. The count is now the run's and in its settings: a folder begun with
    another one (here 2) is refused by name, untouched."""
    folder = tmp_path / CONFIG
    killed_copy(built, folder)
    settings = yaml.safe_load((folder / CONFIG_NAME).read_text("utf-8"))
    assert settings["torch"] == {"intra_op_threads": 1, "device_type": "cpu", "precision": "fp32"}
    settings["torch"]["intra_op_threads"] = 2
    (folder / CONFIG_NAME).write_text(yaml.safe_dump(settings, sort_keys=True), "utf-8")
    before = tree(folder)
    refused(scgs(world, tmp_path), capsys, "torch.intra_op_threads: 2 -> 1")
    assert tree(folder) == before


def test_two_runs_never_write_one_folder(world, built, tmp_path, capsys, monkeypatch):
    """A run on a folder another run holds is refused before writing (already fine). Failed before:
    the previews were written after the run had let go of the folder's lock, so they were written
    even while another run held it."""
    with exclusive_folder(tmp_path / CONFIG):
        refused(scgs(world, tmp_path), capsys, "is being written by another hsi run")
    assert not (tmp_path / CONFIG).exists()

    import builder.augment.stage as stage_module

    real_run_stage, others = stage_module.run_stage, contextlib.ExitStack()

    def run_then_another_run_starts(stage, options):
        result = real_run_stage(stage, options)
        others.enter_context(exclusive_folder(stage.out_dir))
        return result

    monkeypatch.setattr(stage_module, "run_stage", run_then_another_run_starts)
    with others:
        refused(scgs(world, tmp_path), capsys, "is being written by another hsi run")
        assert not (tmp_path / CONFIG / "previews").exists()
    monkeypatch.setattr(stage_module, "run_stage", real_run_stage)
    assert scgs(world, tmp_path) == 0
    assert tree(tmp_path / CONFIG) == tree(built)


def test_files_of_the_user_in_the_output_folder_are_never_deleted(world, built, tmp_path, capsys):
    """A foreign file in a folder the toolkit did not write is refused (already fine). Failed before:
    --overwrite on a config folder of ours that also held a user's notes deleted them."""
    fresh = tmp_path / "fresh" / CONFIG
    fresh.mkdir(parents=True)
    (fresh / "notes.txt").write_text("mine")
    refused(scgs(world, tmp_path / "fresh"), capsys, "holds no dataset of this toolkit")
    assert tree(fresh) == {"notes.txt": hashlib.sha256(b"mine").hexdigest()}
    ours = tmp_path / "ours" / CONFIG
    shutil.copytree(built, ours)
    (ours / "notes.txt").write_text("mine")
    before = tree(ours)
    refused(scgs(world, tmp_path / "ours", "--overwrite"), capsys, "--overwrite would delete notes.txt in")
    assert tree(ours) == before
