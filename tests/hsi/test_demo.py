"""`hsi demo`: the whole pipeline on the embedded sample, as `make demo` runs it."""

import json
import re

from hsi.cli import main


def test_demo_runs_every_stage_and_loads_the_release_back(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative --out, as `make demo` passes it
    out = tmp_path / "demo-output"
    assert main(["demo", "--out", "demo-output", "--no-progress"]) == 0
    # datasets' cache sits beside the release; it used to land in demo-output/demo-output/
    assert (out / ".hf-cache").is_dir() and not (out / "demo-output").exists()
    printed = capsys.readouterr().out
    parts = json.loads((out / "parts" / "_info.json").read_text())
    assert parts["splits"]["val"]["num_samples"] == 4
    rows = [json.loads(line) for line in (out / "parts" / "errors.jsonl").read_text().splitlines()]
    # the camera photo is grayscale; the cat's box leaves a band of its photo: band filled, no fallback
    assert [(row["image_id"], row["reason"]) for row in rows] == [("hsi_demo_camera", "grayscale-converted")]
    dataset = out / "datasets" / "hard-spurious-imagenet"
    manifest = json.loads((dataset / "_info.json").read_text())
    assert manifest["splits"]["val"]["num_samples"] == 48  # 4 images x 3 sizes x 2 placements x 2 backgrounds
    assert manifest["splits"]["val"]["counts"]["group"] == {"CeO": 12, "CeR": 12, "CoO": 12, "CoR": 12}
    assert json.loads((dataset / "validation.json").read_text())["ok"] is True
    assert (dataset / "previews" / "contact_sheet.png").stat().st_size > 10_000
    assert (out / "hard-spurious-imagenet" / "README.md").is_file()
    release = out / "hard-spurious-imagenet"
    for shard in parts["splits"]["val"]["shards"]:  # the parts config: extract's shards byte for byte
        copied = release / "data" / "parts" / shard["filename"]
        assert copied.read_bytes() == (out / "parts" / shard["filename"]).read_bytes()
    assert "\n## parts\n" in (release / "README.md").read_text() and "MB per 1,000 parts" in printed
    assert 'load_dataset("hard-spurious-imagenet", "parts", split="val"): 4 parts' in printed
    assert "CoR" in printed and "total" in printed  # the group x size table
    assert 'load_dataset("hard-spurious-imagenet", split="val"): 48 rows' in printed
    sample_rows = re.findall(
        r"^  hsi_demo_\w+ .* group (CeO|CoO|CeR|CoR) +size +\d+ tier (Easy|Medium|Hard) at", printed, re.M
    )
    assert len(sample_rows) == 4


def test_demo_replaces_its_own_output_but_never_a_foreign_folder(tmp_path, capsys):
    out = tmp_path / "demo-output"
    assert main(["demo", "--out", str(out), "--no-progress"]) == 0
    assert main(["demo", "--out", str(out), "--no-progress"]) == 0  # its own output: replaced
    foreign = tmp_path / "my-files"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    capsys.readouterr()
    assert main(["demo", "--out", str(foreign), "--no-progress"]) == 2
    assert "not written by `hsi demo`" in capsys.readouterr().err
    assert (foreign / "thesis.tex").read_text() == "precious" and len(list(foreign.iterdir())) == 1
