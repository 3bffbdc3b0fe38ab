"""croissant.json (cards.croissant) on the demo's release and on a 3-config release (the paper's set,
the aspect-ratio set and the parts), built once for the module: mlcroissant validates each and loads
every config's records from the shards' members, its fields map the sample json, its sha256 and
counts are the manifests', it is the same bytes when built again, and `hsi verify` names the field
of one whose size or count was changed."""

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builder.core.shard_read import iter_shard
from builder.formats.composites import COMPOSITE_FIELDS
from cards.croissant import CROISSANT_NAME
from cards.release import RELEASE_META, build_release
from hsi.cli import main

CONFIG = "hard-spurious-imagenet"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("croissant") / "demo-output"
    assert main(["demo", "--out", str(out), "--no-progress"]) == 0
    return out


@pytest.fixture(scope="module")
def release(demo):
    return demo / CONFIG


@pytest.fixture(scope="module")
def three_configs(demo):
    """A versioned release of three configs: the demo's composites, the aspect-ratio variant composed
    from the same parts, and the parts themselves."""
    datasets, ar = demo / "datasets", "hard-spurious-imagenet-ar"
    assert (
        main(["compose", "--parts", str(demo / "parts"), "--variant", ar, "--out", str(datasets), "--no-progress"]) == 0
    )
    assert main(["validate", str(datasets / ar), "--parts", str(demo / "parts")]) == 0
    out = demo.parent / "three-configs"
    args = [str(datasets / CONFIG), str(datasets / ar), "--parts", str(demo / "parts"), "--version", "v1.0.0"]
    assert main(["release", "--out", str(out), *args]) == 0
    return out


RELEASES = {
    "demo": [CONFIG, "parts"],
    "three-configs": [CONFIG, "hard-spurious-imagenet-ar", "parts"],
}


@pytest.fixture(scope="module")
def releases(release, three_configs):
    return {"demo": release, "three-configs": three_configs}


@pytest.fixture(scope="module")
def document(release):
    return json.loads((release / CROISSANT_NAME).read_text("utf-8"))


@pytest.fixture(scope="module")
def croissant_cache(tmp_path_factory):
    """mlcroissant extracts a tar into CROISSANT_CACHE/extract/<sha256 of its contentUrl>, read once at
    import: every release's `data/<config>/val-00000.tar` would share one folder, so each test run
    gets its own (the module constants are what the extract operation reads)."""
    cache = tmp_path_factory.mktemp("croissant-cache")
    patch = pytest.MonkeyPatch()
    patch.setenv("CROISSANT_CACHE", str(cache))
    from etils import epath
    from mlcroissant._src.core import constants
    from mlcroissant._src.operation_graph.operations import extract

    patch.setattr(constants, "EXTRACT_PATH", epath.Path(cache) / "extract")
    patch.setattr(extract, "EXTRACT_PATH", constants.EXTRACT_PATH)
    yield cache
    patch.undo()


def manifest(release: Path, config: str) -> dict:
    return json.loads((release / "data" / config / "_info.json").read_text())


def shard_samples(release: Path, config: str) -> dict[str, bytes]:
    """{key: cls member} of every sample of a config, read from its shards."""
    found = {}
    for shard in sorted((release / "data" / config).glob("*.tar")):
        for key, members in iter_shard(shard):
            found[key] = members["cls"]
    return found


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_mlcroissant_validate_reports_no_error(releases, croissant_cache, name):
    cli = Path(sys.executable).with_name("mlcroissant")
    done = subprocess.run(
        [str(cli), "validate", "--jsonld", str(releases[name] / CROISSANT_NAME)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"CROISSANT_CACHE": str(croissant_cache), "PATH": "/usr/bin:/bin", "HOME": str(croissant_cache)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "error(s)" not in done.stderr and "Done." in done.stderr
    # the one warning left, as docs/publish.md says: no date is recorded (the bytes are deterministic);
    # both releases are versioned (the demo is `hsi build --version v1.0.0`), so none about `version`
    warnings = [line for line in done.stderr.splitlines() if line.startswith("  -  ")]
    assert len(warnings) == 1 and "datePublished" in warnings[0], warnings


def test_an_unversioned_release_warns_about_its_version_only(demo, croissant_cache, tmp_path):
    out = tmp_path / "unversioned"
    assert main(["release", "--out", str(out), str(demo / "datasets" / CONFIG)]) == 0
    cli = Path(sys.executable).with_name("mlcroissant")
    done = subprocess.run(
        [str(cli), "validate", "--jsonld", str(out / CROISSANT_NAME)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"CROISSANT_CACHE": str(croissant_cache), "PATH": "/usr/bin:/bin", "HOME": str(croissant_cache)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("  -  ")]
    assert sorted("datePublished" in line for line in warnings) == [False, True]
    assert any("schema.org/version" in line for line in warnings), warnings


@pytest.mark.parametrize(
    ("name", "config"), [(name, config) for name, configs in sorted(RELEASES.items()) for config in configs]
)
def test_mlcroissant_loads_every_sample_with_its_key_image_and_label(releases, croissant_cache, name, config, caplog):
    import mlcroissant as mlc

    release = releases[name]
    image, size = ("background", None) if config == "parts" else ("image", (224, 224))
    document = json.loads((release / CROISSANT_NAME).read_text("utf-8"))
    assert sorted(rs["@id"] for rs in document["recordSet"] if "/" not in rs["@id"]) == sorted(RELEASES[name])
    with caplog.at_level(logging.WARNING):
        records = list(mlc.Dataset(jsonld=str(release / CROISSANT_NAME)).records(record_set=config))
    # failed before: "Could not match re.compile('^(.*)\\.jpg$') in KEY", once per sample
    assert not [r.getMessage() for r in caplog.records if "Could not match" in r.getMessage()]
    wanted = shard_samples(release, config)
    assert len(records) == sum(s["num_samples"] for s in manifest(release, config)["splits"].values()) == len(wanted)
    loaded = {r[f"{config}/key"].decode(): r for r in records}
    assert sorted(loaded) == sorted(wanted)
    for key, record in loaded.items():
        assert record[f"{config}/label"] == int(wanted[key])
        if size:
            assert record[f"{config}/{image}"].size == size
        else:
            assert record[f"{config}/{image}"].mode in ("RGB", "L")


def test_fields_map_the_sample_json_and_files_carry_the_manifests_sha256(release, document):
    fields = {rs["@id"]: rs["field"] for rs in document["recordSet"]}
    metadata = fields[f"{CONFIG}/metadata"]
    assert [f["name"] for f in metadata] == ["key", *COMPOSITE_FIELDS]
    kinds = {str: "sc:Text", int: "sc:Integer", float: "sc:Float"}
    for field in metadata[1:]:
        kind, _, _ = COMPOSITE_FIELDS[field["name"]]
        assert field["dataType"] == kinds[kind]
        assert field["source"] == {
            "fileSet": {"@id": f"{CONFIG}/json-members"},
            "extract": {"jsonPath": f"$.{field['name']}"},
        }
    assert [f["name"] for f in fields[CONFIG]] == ["key", "image", "label"]
    assert {rs["@id"] for rs in document["recordSet"]} >= {"parts", "parts/labels", "parts/metadata"}
    files = {f["@id"]: f for f in document["distribution"] if f["@type"] == "cr:FileObject"}
    for config in (CONFIG, "parts"):
        for split in manifest(release, config)["splits"].values():
            for shard in split["shards"]:
                entry = files.pop(f"data/{config}/{shard['filename']}")
                assert (entry["sha256"], entry["contentSize"]) == (shard["sha256"], f"{shard['bytes']} B")
                assert entry["encodingFormat"] == "application/x-tar"
    assert files == {}
    recorded = json.loads((release / RELEASE_META).read_text())["files"]
    assert CROISSANT_NAME in recorded  # hashed like every file, so publish and verify carry it


def json_path(document: dict, path: str):
    """The value a `$.a.b` jsonPath names in a json document (None where a step is absent or null)."""
    value = document
    for step in path.removeprefix("$.").split("."):
        value = value.get(step) if isinstance(value, dict) else None
    return value


@pytest.mark.parametrize("config", [CONFIG, "parts"])
def test_every_metadata_field_reads_a_value_of_its_type_from_every_json_member(release, document, config):
    """mlcroissant cannot parse json members inside a tar (mlcommons/croissant#1010), so each field's
    jsonPath is applied here to every sample's json, and its value checked against the declared type."""
    fields = {rs["@id"]: rs["field"] for rs in document["recordSet"]}[f"{config}/metadata"]
    types = {"sc:Text": str, "sc:Integer": int, "sc:Float": (float, int)}
    seen = {field["name"]: 0 for field in fields[1:]}
    for shard in sorted((release / "data" / config).glob("*.tar")):
        for _, members in iter_shard(shard):
            sample = json.loads(members["json"])
            for field in fields[1:]:
                value = json_path(sample, field["source"]["extract"]["jsonPath"])
                if value is None:
                    assert "(may be null)" in field["description"], field["name"]
                    continue
                assert isinstance(value, types[field["dataType"]]) and not isinstance(value, bool), field["name"]
                seen[field["name"]] += 1
    # every field reads a value from some sample of the demo, but the -10 subset's pairing fields
    never = sorted(name for name, count in seen.items() if count == 0)
    assert never == ([] if config == "parts" else ["paired_wnid"]), never


def test_rai_fields_say_what_the_data_is(release, document):
    fills = manifest(release, CONFIG)["splits"]["val"]["fill_scores"]
    parts = manifest(release, "parts")
    assert document["conformsTo"] == "http://mlcommons.org/croissant/1.1"
    assert document["rai:hasSyntheticData"] is True
    assert document["license"] == "https://image-net.org/download.php"
    collection = document["rai:dataCollection"]
    assert "48 in all" in collection and "ImageNet (ILSVRC2012) val photographs" in collection
    assert f"inpainter {parts['backends']['inpainter']['name']}" in collection and "sizes 56, 84, 112" in collection
    limitations = document["rai:dataLimitations"]
    median, share = fills["score"]["median"], fills["share_below_poor_score"]
    assert f"{CONFIG}/val: median fill score {median}, {round(100 * share, 1)}% of 48 scored fills under 0.5" in (
        limitations
    )
    assert "no attempt to blur or remove faces" in document["rai:personalSensitiveInformation"]
    for key in ("rai:dataBiases", "rai:dataUseCases"):
        assert len(document[key]) > 100


def test_built_again_it_is_the_same_bytes(demo, release, tmp_path):
    again = build_release(tmp_path / CONFIG, [demo / "datasets" / CONFIG], parts_dir=demo / "parts", version="v1.0.0")
    assert (again / CROISSANT_NAME).read_bytes() == (release / CROISSANT_NAME).read_bytes()


def test_verify_names_the_field_of_a_changed_count(release, tmp_path, capsys):
    copy = tmp_path / CONFIG
    shutil.copytree(release, copy)
    text = (copy / CROISSANT_NAME).read_text()
    shard = manifest(release, CONFIG)["splits"]["val"]["shards"][0]
    changed = text.replace(f'"contentSize": "{shard["bytes"]} B"', f'"contentSize": "{shard["bytes"] + 1} B"', 1)
    assert changed != text
    (copy / CROISSANT_NAME).write_text(changed)
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert (
        f"FAILED: croissant.json: distribution[data/{CONFIG}/{shard['filename']}].contentSize differs from the "
        "release's manifests; rebuild it with `hsi release`"
    ) in out
    assert main(["verify", str(release)]) == 0


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("Synthetic composites, 72 in all", "Synthetic composites, 71 in all", "rai:dataCollection"),
        (
            "hard-spurious-imagenet-ar: 24 composites (val 24)",
            "hard-spurious-imagenet-ar: 25 composites (val 25)",
            "description",
        ),
    ],
    ids=["rai-count", "config-count"],
)
def test_verify_fails_a_three_config_release_whose_count_was_changed(three_configs, tmp_path, capsys, old, new, field):
    copy = tmp_path / "three-configs"
    shutil.copytree(three_configs, copy)
    text = (copy / CROISSANT_NAME).read_text()
    assert text.count(old) == 1
    (copy / CROISSANT_NAME).write_text(text.replace(old, new))
    assert main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert f"FAILED: croissant.json: {field} differs from the release's manifests; rebuild it with `hsi release`" in out
    assert main(["verify", str(three_configs)]) == 0
