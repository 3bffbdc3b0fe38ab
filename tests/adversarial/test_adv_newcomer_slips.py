"""The slips a new user makes first (issue 44), each answered in one line that names what is wrong:
a mistyped path is "no such folder", a bad --sizes or --positions item is named with its flag, a
size of 0 is not "too big for the canvas", and `hsi validate --parts` takes a release folder as
`hsi compose --parts` does. Nothing is written before a refusal."""

import json

import pytest
from release_factory import release_with_parts

from hsi.cli import main


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return release_with_parts(tmp_path_factory.mktemp("slips"))


def refusal(capsys, argv) -> str:
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--sizes", "5O"], "variant field `sizes` (--sizes): '5O' is not a whole number"),
        (["--sizes", "56,8.5"], "variant field `sizes` (--sizes): '8.5' is not a whole number"),
        (["--sizes", "0"], "(--sizes): 0 is not a size: each must be a positive number of pixels"),
        (["--sizes", "56,-4"], "(--sizes): -4 is not a size"),
        (["--sizes", "300"], "(--sizes): 300 does not fit a 224 px canvas"),
        (["--positions", "center,centre"], "variant field `positions` (--positions): unknown position 'centre'"),
        (["--positions", "xy:a,b"], "(--positions): unknown position 'xy:a,b'"),
    ],
)
def test_a_bad_spec_item_is_named_with_its_flag(built, tmp_path, capsys, flags, expected):
    out = tmp_path / "out"
    line = refusal(capsys, ["compose", "--parts", str(built["parts"]), "--out", str(out), "--no-progress", *flags])
    assert expected in line and "invalid literal" not in line
    assert not out.exists()


def test_a_yaml_size_that_is_a_boolean_or_fraction_is_refused_by_name(tmp_path):
    from builder.compose.spec import load_variant
    from builder.core.config import ConfigError

    for bad in (True, 5.5):
        with pytest.raises(ConfigError, match=r"variant field `sizes` \(--sizes\): .* is not a whole number"):
            load_variant("hard-spurious-imagenet", {"sizes": [56, bad]})


def test_a_mistyped_path_says_no_such_folder(built, tmp_path, capsys):
    missing = tmp_path / "bulid" / "parts"
    dataset, out = str(built["dataset"]), str(tmp_path / "x")
    cases = {
        ("compose", "--parts", str(missing), "--out", out, "--no-progress"): f"no such folder: {missing}",
        ("validate", str(missing)): f"no such folder: {missing}",
        ("validate", dataset, "--parts", str(missing), "--out", out): f"--parts: no such folder: {missing}",
        ("release", str(missing), "--out", out): f"no such folder: {missing}",
    }
    for argv, expected in cases.items():
        line = refusal(capsys, list(argv))
        assert expected in line and "re-run the command" not in line, argv
    assert not (tmp_path / "x").exists()


def test_validate_takes_a_release_folder_for_parts_as_compose_does(built, tmp_path, capsys):
    reports = {}
    for name, parts in (("release", built["release"]), ("folder", built["parts"])):
        out = tmp_path / name
        assert main(["validate", str(built["dataset"]), "--parts", str(parts), "--out", str(out), "--no-previews"]) == 0
        reports[name] = json.loads((out / "validation.json").read_text())
    # the release's data/parts is the parts folder byte for byte: the same checks, the same figures
    assert reports["release"]["ok"] is True
    assert reports["release"]["integrity"] == reports["folder"]["integrity"]
    assert reports["release"]["fill_quality"] == reports["folder"]["fill_quality"]
    capsys.readouterr()
    # a composed folder is not parts: the refusal says what --parts takes
    dataset = str(built["dataset"])
    line = refusal(capsys, ["validate", dataset, "--parts", dataset, "--out", str(tmp_path / "y")])
    assert "a release folder made with --parts" in line
