"""Parts with no background of their own (#46: `background_status` "none", the erase mask covered
the whole photo): by default compose gives no image such a part's background as its random one,
keeps their own-background composites and pastes their objects on others' backgrounds; the
paper-exact choice (`no_background_donors`, set by --paper-exact) keeps every part as a donor as the
paper did. The choice is in the spec (its fingerprint) only when asked for, and a bad status is a
one-line unreadable-parts row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from parts_factory import compose_quietly, fake_images, rewrite_parts, write_parts

from builder.compose.spec import PAPER_EXACT, load_variant
from builder.core.config import ConfigError
from builder.core.manifest import MANIFEST_NAME
from builder.core.shard_read import iter_shard

WNIDS = ["n01443537", "n02437312", "n02134084"]  # goldfish, Arabian camel, ice bear
IMAGES = fake_images(WNIDS, per_class=3)
NONE = {IMAGES[0].source_id, IMAGES[4].source_id}  # one goldfish, one camel


def samples_of(dataset: Path) -> tuple[dict, list[dict]]:
    manifest = json.loads((dataset / MANIFEST_NAME).read_text())
    found = []
    for entry in manifest["splits"].values():
        for name in entry["filenames"]:
            found += [json.loads(m["json"]) for _, m in iter_shard(dataset / name)]
    return manifest, found


def mark(statuses: dict[str, object]):
    def change(key: str, meta: dict, members: dict) -> tuple[dict, dict]:
        if key in statuses:
            meta["background_status"] = statuses[key]
        return meta, members

    return change


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> Path:
    parts = tmp_path_factory.mktemp("nobg") / "parts"
    write_parts(parts, {"val": IMAGES}, shard_size=4)
    rewrite_parts(parts, mark(dict.fromkeys(NONE, "none")), summary="recompute")
    return parts


def test_by_default_no_part_without_a_background_is_a_donor_and_its_own_composites_stay(parts, tmp_path):
    manifest, samples = samples_of(compose_quietly(parts, "hard-spurious-imagenet", tmp_path).dataset_dir)
    random = [meta for meta in samples if meta["background"] == "random"]
    original = [meta for meta in samples if meta["background"] == "original"]
    assert len(random) == len(original) == 9 * 6  # every image still gets both kinds
    assert not {meta["background_source_id"] for meta in random} & NONE
    assert NONE <= {meta["source_id"] for meta in original}  # their own-background composites are kept
    assert NONE <= {meta["source_id"] for meta in random}  # their objects on others' backgrounds
    assert "no_background_donors" not in manifest["spec"]


def test_paper_exact_keeps_every_part_as_a_donor_as_the_paper_did(parts, tmp_path):
    summary = compose_quietly(parts, "hard-spurious-imagenet", tmp_path, overrides={"no_background_donors": True})
    manifest, samples = samples_of(summary.dataset_dir)
    donors = {meta["background_source_id"] for meta in samples if meta["background"] == "random"}
    assert NONE <= donors  # per-image/balanced draws over all nine parts: both are used
    assert manifest["spec"]["no_background_donors"] is True
    assert PAPER_EXACT["no_background_donors"] is True


def test_without_parts_lacking_a_background_the_choice_changes_no_byte(tmp_path):
    parts = tmp_path / "parts"
    write_parts(parts, {"val": IMAGES}, shard_size=4)
    plain = compose_quietly(parts, "hard-spurious-imagenet", tmp_path / "a").dataset_dir
    paper = compose_quietly(parts, "hard-spurious-imagenet", tmp_path / "b", overrides={"no_background_donors": True})

    def composites(dataset: Path) -> list:  # every member, the json without the variant's name
        found = []
        for shard in sorted(dataset.glob("*.tar")):
            for key, members in iter_shard(shard):
                meta = json.loads(members.pop("json"))
                found.append((key, members, {k: v for k, v in meta.items() if k != "variant"}))
        return found

    assert composites(plain) == composites(paper.dataset_dir) != []


def test_a_bad_status_is_an_unreadable_parts_row_and_a_bad_choice_one_line(tmp_path):
    parts = tmp_path / "parts"
    write_parts(parts, {"val": IMAGES}, shard_size=4)
    rewrite_parts(parts, mark({IMAGES[1].source_id: "maybe"}), summary="recompute")
    summary = compose_quietly(parts, "hard-spurious-imagenet", tmp_path / "out")
    rows = [json.loads(line) for line in (summary.dataset_dir / "errors.jsonl").read_text().splitlines()]
    (row,) = [r for r in rows if r["reason"] == "unreadable-parts"]
    assert row["image_id"] == IMAGES[1].source_id and "background_status must be one of own, none" in row["detail"]
    with pytest.raises(ConfigError, match="no_background_donors.*true or false"):
        load_variant("hard-spurious-imagenet", {"no_background_donors": "yes"})


# --- each composite records its background's status (composite schema 4) --------------------------


def statuses(samples: list[dict]) -> dict[tuple[str, str], set]:
    """{(background kind, whether its background part lacks one): the statuses recorded}."""
    found: dict[tuple[str, str], set] = {}
    for meta in samples:
        lacking = "no-background part" if meta["background_source_id"] in NONE else "part with one"
        found.setdefault((meta["background"], lacking), set()).add(meta["background_status"])
    return found


def test_by_default_own_background_composites_of_a_part_without_one_say_none(parts, tmp_path):
    _, samples = samples_of(compose_quietly(parts, "hard-spurious-imagenet", tmp_path).dataset_dir)
    assert all(meta["schema_version"] == 4 for meta in samples)
    assert statuses(samples) == {
        ("original", "no-background part"): {"none"},  # its own O composites: a fill made from nothing
        ("original", "part with one"): {"own"},
        ("random", "part with one"): {"own"},  # no such part is a donor by default
    }
    own_none = [m for m in samples if m["background"] == "original" and m["background_status"] == "none"]
    assert len(own_none) == len(NONE) * 6  # 3 sizes x 2 positions per image


@pytest.mark.parametrize(
    "overrides", [{"no_background_donors": True}, PAPER_EXACT], ids=["no_background_donors", "paper-exact"]
)
def test_paper_exact_composites_on_a_donor_without_a_background_say_none(parts, tmp_path, overrides):
    summary = compose_quietly(parts, "hard-spurious-imagenet", tmp_path, overrides=dict(overrides))
    _, samples = samples_of(summary.dataset_dir)
    found = statuses(samples)
    assert found[("random", "no-background part")] == {"none"}  # R composites on such a donor
    assert found[("random", "part with one")] == {"own"}
    assert found[("original", "no-background part")] == {"none"}
    assert found[("original", "part with one")] == {"own"}


def test_gray_and_noise_backgrounds_have_no_status(parts, tmp_path):
    summary = compose_quietly(
        parts, "hard-spurious-imagenet", tmp_path, overrides={"name": "neutral", "backgrounds": ["gray", "noise"]}
    )
    _, samples = samples_of(summary.dataset_dir)
    assert samples and {(m["background"], m["background_status"]) for m in samples} == {
        ("gray", None),
        ("noise", None),
    }


def test_stream_and_load_dataset_expose_the_status(parts, tmp_path, monkeypatch):
    from datasets import load_dataset

    from builder.formats.stream import stream
    from cards.release import build_release
    from validation import report

    dataset = compose_quietly(parts, "hard-spurious-imagenet", tmp_path / "out").dataset_dir
    assert report.validate_dataset(dataset, parts_dir=parts).ok
    _, samples = samples_of(dataset)
    expected = {(m["source_id"], m["background"], m["size"], m["position"]): m["background_status"] for m in samples}
    assert sorted(set(expected.values())) == ["none", "own"]

    def key(meta: dict) -> tuple:
        return meta["source_id"], meta["background"], meta["size"], meta["position"]

    streamed = {key(s["json"]): s["background_status"] for s in stream(dataset, split="val", keep_json=True)}
    assert streamed == expected
    folder = build_release(tmp_path / "rel" / "hard-spurious-imagenet", [dataset])
    monkeypatch.chdir(folder.parent)
    loaded = load_dataset("hard-spurious-imagenet", split="val", cache_dir=str(tmp_path / "cache"))
    assert "background_status" in loaded.features["json"]
    assert {key(row["json"]): row["json"]["background_status"] for row in loaded} == expected
    kept = loaded.filter(lambda row: row["json"]["background_status"] != "none")
    assert kept.num_rows == len(expected) - len(NONE) * 6
