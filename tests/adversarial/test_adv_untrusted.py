"""The reading layer for untrusted files (builder.core.untrusted) and the model half's output folder
(builder.core.owned): links, syntax errors, wrong types, pickles and user files are one-line refusals."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from builder.core.locks import FolderLocked
from builder.core.owned import RECORD_NAME, OwnedFolder, OwnedFolderError
from builder.core.untrusted import Fields, UntrustedInput, load_torch, read_json, read_parquet, read_yaml


def one_line(error) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_json_syntax_link_and_folder_are_one_line(tmp_path):
    bad = tmp_path / "eval.json"
    bad.write_text('{"a": 1,\n "b": }')
    assert "not valid JSON" in one_line(pytest.raises(UntrustedInput, read_json, bad))
    (tmp_path / "nan.json").write_text('{"a": NaN}')
    assert "NaN is not a JSON number" in one_line(pytest.raises(UntrustedInput, read_json, tmp_path / "nan.json"))
    os.symlink(bad, tmp_path / "link.json")
    assert "is a link" in one_line(pytest.raises(UntrustedInput, read_json, tmp_path / "link.json"))
    assert "not a regular file" in one_line(pytest.raises(UntrustedInput, read_json, tmp_path))
    assert "not found" in one_line(pytest.raises(UntrustedInput, read_json, tmp_path / "missing.json"))


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "models.yaml"
    path.write_text("- model: a\n- model: [b\n")
    assert "line 3" in one_line(pytest.raises(UntrustedInput, read_yaml, path))


def test_fields_name_file_and_field():
    data = {"model": {"spec": 5}, "n": "abc", "p": float("inf"), "flag": 1, "extra": 0}
    fields = Fields(data, "eval.json")
    assert one_line(pytest.raises(UntrustedInput, fields.object("model").string, "spec")) == (
        "eval.json: model.spec: expected a string, got 5"
    )
    assert "n: expected an integer, got 'abc'" in one_line(pytest.raises(UntrustedInput, fields.integer, "n"))
    assert "finite" in one_line(pytest.raises(UntrustedInput, fields.number, "p"))
    assert "true or false" in one_line(pytest.raises(UntrustedInput, fields.boolean, "flag"))
    assert "missing" in one_line(pytest.raises(UntrustedInput, fields.string, "absent"))
    assert fields.string("absent", None) is None
    assert "unknown key 'extra'" in one_line(pytest.raises(UntrustedInput, fields.only, ["model", "n", "p", "flag"]))
    assert "expected an object, got a list" in one_line(pytest.raises(UntrustedInput, Fields, [1], "x.json"))
    assert "above the largest" in one_line(
        pytest.raises(UntrustedInput, Fields({"label": 5000}, "t").integer, "label", high=999)
    )


def test_torch_load_never_unpickles(tmp_path):
    torch = pytest.importorskip("torch")

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    crafted = tmp_path / "last.pt"
    torch.save({"model": Boom()}, crafted)
    assert "never unpickled" in one_line(pytest.raises(UntrustedInput, load_torch, crafted, "training state"))
    assert not (tmp_path / "ran").exists()
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(2), "epoch": 3, "rng": (3, (1, 2), None)}, good)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:100])
    assert "truncated or not a torch file" in one_line(pytest.raises(UntrustedInput, load_torch, truncated))
    (tmp_path / "pickle.pt").write_bytes(pickle.dumps({"a": 1}, protocol=2))
    with pytest.raises(UntrustedInput):
        load_torch(tmp_path / "pickle.pt")
    assert load_torch(good)["epoch"] == 3


def test_parquet_junk_is_one_line(tmp_path):
    pytest.importorskip("pyarrow")
    junk = tmp_path / "predictions.parquet"
    junk.write_bytes(b"PAR1 not really parquet PAR1")
    assert "not a readable parquet file" in one_line(pytest.raises(UntrustedInput, read_parquet, junk))


def test_owned_folder_writes_records_and_refuses_user_files(tmp_path):
    out = tmp_path / "eval"
    with OwnedFolder(out, "eval") as folder:
        folder.write_text("model/eval.md", "# ours\n")
        with folder.writing("model/plots/a.png") as tmp:
            tmp.write_bytes(b"png")
        assert folder.listed("model/") == ["model/eval.md", "model/plots/a.png"]
        (out / "model" / "user.csv").write_text("mine")
        with pytest.raises(OwnedFolderError, match="not written by this command"):
            folder.write_text("model/user.csv", "x")
        (out / "model" / "eval.md").write_text("edited by the user")
        with pytest.raises(OwnedFolderError, match="not written by this command"):
            folder.remove("model/eval.md")
        assert folder.remove_listed("model/plots/") == ["model/plots/a.png"]
        assert not (out / "model" / "plots" / "a.png").exists()
    record = json.loads((out / RECORD_NAME).read_text())
    assert record["kind"] == "eval" and "model/eval.md" in record["files"]
    assert (out / "model" / "user.csv").read_text() == "mine"


def test_owned_folder_refuses_links_foreign_folders_and_a_second_run(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "eval.md").write_text("user")
    out = tmp_path / "out"
    with OwnedFolder(out, "eval") as folder:
        folder.write_text("leaderboard.csv", "model\n")
        os.symlink(outside, out / "model")
        with pytest.raises(OwnedFolderError, match="is a link"):
            folder.write_text("model/eval.md", "x")
        os.symlink(outside / "eval.md", out / "leaderboard.md")
        with pytest.raises(OwnedFolderError, match="is a link"):
            folder.write_text("leaderboard.md", "x")
        with pytest.raises(FolderLocked):
            OwnedFolder(out, "eval").__enter__()
        os.symlink(out, tmp_path / "alias")
        with pytest.raises(OwnedFolderError, match="is a link"):
            OwnedFolder(tmp_path / "alias", "eval").__enter__()
    assert (outside / "eval.md").read_text() == "user"
    with pytest.raises(OwnedFolderError, match="not `hsi train`"):
        OwnedFolder(out, "train").__enter__()
    with pytest.raises(OwnedFolderError, match="holds no _written.json"):
        OwnedFolder(outside, "eval").__enter__()
    with pytest.raises(Exception, match="not a safe path"):
        with OwnedFolder(out, "eval") as folder:
            folder.write_text("../escape.md", "x")
    assert not (tmp_path / "escape.md").exists()
