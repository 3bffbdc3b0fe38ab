"""`_release.json` edited after `hsi release` wrote it (issue 41): its changelog, tool, name, previous
and keys it does not know were compared with nothing, on a folder and on the Hub (the tag moved to the
edited commit), the card rendered them, and `hsi release --previous` carried a forged changelog into
the next release, which verified too. Each edit now fails verify naming the field, or is refused where
the record is read; the release text flags take one line of printable text; two releases into one
--out are never both written; class names that are not ImageNet's are not released."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hub_server import LoopbackHub, Repo, hub_env
from release_factory import make_composed_dataset, two_releases

from hsi.cli import main

NAME = "hard-spurious-imagenet"


def edited(folder: Path, edit) -> Path:
    """`folder`'s `_release.json` changed by `edit(record)`, nothing else: the attack of the issue."""
    path = folder / "_release.json"
    record = json.loads(path.read_text())
    edit(record)
    path.write_text(json.dumps(record, sort_keys=True, indent=2))
    return folder


def forged_changelog(record: dict) -> None:
    record["changelog"][0]["changes"][0] = "audited by the ImageNet team"  # in place of "new seed"


def other_tool(record: dict) -> None:
    record["tool"]["version"] = "9.9.9"


def other_name(record: dict) -> None:
    record["name"] = "imagenet-clean"


def other_previous(record: dict) -> None:
    record["previous"]["version"] = "v1.0.1"
    record["previous"]["changelog"][0]["version"] = "v1.0.1"
    record["changelog"][1]["version"] = "v1.0.1"


def other_previous_configs(record: dict) -> None:
    """What the card does not render and the changelog does not show: only the previous release can tell."""
    record["previous"]["configs"][NAME]["fingerprint"] = "0" * 16


def unknown_key(record: dict) -> None:
    record["homepage"] = "https://example.org/install.sh"


CARD_CHANGELOG = "_release.json: changelog is not what the card's Changelog section says (they differ)"
EDITS = {
    "changelog": (forged_changelog, [CARD_CHANGELOG]),
    "tool": (other_tool, ["_release.json: tool.version '9.9.9' is not the toolkit version the card names"]),
    "name": (
        other_name,
        ["_release.json: name 'imagenet-clean' is not 'hard-spurious-imagenet', the only name `hsi release` writes"],
    ),
    # the previous release's version in all three places it is written: consistent with itself, not with v1.0.0
    "previous": (
        other_previous,
        [
            CARD_CHANGELOG,
            "_release.json: previous.version is not what --previous {v1} records",
            "_release.json: previous.changelog is not what --previous {v1} records",
        ],
    ),
    "previous-configs": (
        other_previous_configs,
        ["_release.json: previous.configs is not what --previous {v1} records"],
    ),
}
# on the Hub the previous release is the record at the tag `previous.version` names: a version the repo
# never tagged leaves `previous` unchecked (listed so), and the forged changelog is still the card's
HUB_EXPECTED = {"previous": [CARD_CHANGELOG]}


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    return two_releases(tmp_path_factory.mktemp("record"))


def verify_lines(args: list[str], capsys) -> tuple[int, list[str], list[str]]:
    status = main(["verify", *args])
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    return status, out, [line.removeprefix("FAILED: ") for line in out if line.startswith("FAILED: ")]


@pytest.mark.parametrize("field", sorted(EDITS))
def test_an_edited_field_of_the_release_record_fails_verify_naming_it(releases, tmp_path, capsys, field):
    """Failed before: each of these verified `OK ... is intact`."""
    v1, v2 = releases
    folder = edited(Path(shutil.copytree(v2, tmp_path / NAME)), EDITS[field][0])
    status, _out, problems = verify_lines([str(folder), "--previous", str(v1)], capsys)
    assert status == 1
    assert problems == [line.format(v1=v1) for line in EDITS[field][1]]


def test_an_intact_release_lists_what_it_did_not_check(releases, capsys):
    v1, v2 = releases
    status, out, problems = verify_lines([str(v2)], capsys)
    assert status == 0 and problems == []
    assert out[1:3] == [
        "not checked: previous (v1.0.0) against that release itself (a folder: give --previous FOLDER; "
        "the Hub: the repo has no such tag)",
        "not checked: unsigned; nothing outside the revision vouches for it (`hsi release --sign KEY`)",
    ]
    status, out, problems = verify_lines([str(v2), "--previous", str(v1)], capsys)
    assert status == 0 and out[1] == f"previous: compared with --previous {v1}"


def test_a_key_the_release_record_does_not_know_is_refused_by_name(releases, tmp_path, capsys):
    folder = edited(Path(shutil.copytree(releases[1], tmp_path / NAME)), unknown_key)
    assert main(["verify", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"hsi verify: error: {folder}/_release.json: unknown key 'homepage' (known: changelog, configs, "
        "default_config, files, name, previous, signer, tool, version)"
    ]


def test_a_forged_changelog_is_not_carried_into_the_next_release(releases, tmp_path, capsys):
    """Failed before: `hsi release --previous` copied the forged line into v1.2.0's card and record,
    and v1.2.0 verified."""
    v1, v2 = releases
    forged = edited(Path(shutil.copytree(v2, tmp_path / "v2" / NAME)), forged_changelog)
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 4}, seed=2)
    out = tmp_path / "v3" / NAME
    args = ["release", str(dataset), "--out", str(out), "--version", "v1.2.0", "--previous", str(forged)]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"hsi release: error: --previous {forged}: _release.json: changelog is not what the card's Changelog "
        "section says (they differ); its record was changed after `hsi release` wrote it (`hsi verify` lists what)"
    ]
    assert not out.parent.exists() or not any(out.parent.iterdir())
    # the genuine v1.1.0 is continued, and its changelog carried whole
    assert main([*args[:-1], str(v2)]) == 0
    record = json.loads((out / "_release.json").read_text())
    assert [e["version"] for e in record["changelog"]] == ["v1.2.0", "v1.1.0", "v1.0.0"]


def test_the_hub_verify_compares_every_field_at_the_moved_tag(tmp_path):
    """The same edits published: the tag moved to a commit whose only change is `_release.json`; and
    `previous` compared with the record at the previous version's tag."""
    v1, v2 = two_releases(tmp_path)
    good_v1 = {p.relative_to(v1).as_posix(): p.read_bytes() for p in v1.rglob("*") if p.is_file()}
    good = {p.relative_to(v2).as_posix(): p.read_bytes() for p in v2.rglob("*") if p.is_file()}
    cases = {"lab/intact": None, **{f"lab/{field}": edit for field, (edit, _) in EDITS.items()}}
    with LoopbackHub() as hub:
        for repo_id, edit in cases.items():
            repo = Repo(private=False)
            first = repo.commit(None, good_v1, "Release v1.0.0")
            repo.tags["v1.0.0"] = first
            files = dict(good)
            if edit is not None:
                record = json.loads(files["_release.json"])
                edit(record)
                files["_release.json"] = json.dumps(record, sort_keys=True, indent=2).encode()
            repo.tags["v1.1.0"] = repo.commit(first, files, "Release v1.1.0")
            hub.state.repos[repo_id] = repo
        env = hub_env(hub.endpoint, tmp_path / "home")
        script = (
            "import contextlib, io, json, sys\nfrom hsi.cli import main\nresults = {}\n"
            "for repo in sys.argv[1:]:\n"
            "    out, err = io.StringIO(), io.StringIO()\n"
            "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
            "        status = main(['verify', repo, '--version', 'v1.1.0'])\n"
            "    results[repo] = [status, out.getvalue().splitlines()]\n"
            "print('RESULTS ' + json.dumps(results))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", script, *cases],
            env=dict(env, PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            text=True,
            timeout=400,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULTS "))
    results = json.loads(line.removeprefix("RESULTS "))
    status, lines = results["lab/intact"]
    assert status == 0 and lines[1] == "previous: compared with lab/intact@v1.0.0/_release.json", lines
    for field, (_, expected) in EDITS.items():
        status, lines = results[f"lab/{field}"]
        where = f"lab/{field}@v1.0.0/_release.json"
        problems = [line.removeprefix("FAILED: ") for line in lines if line.startswith("FAILED: ")]
        expected = HUB_EXPECTED.get(field, expected)
        assert status == 1 and problems == [line.format(v1=where).replace("--previous ", "") for line in expected]
    assert results["lab/previous"][1][1].startswith("not checked: previous (v1.0.1) against that release itself")


# -- the release's own text: one line of printable text ------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "text", "shown"),
    [
        ("--title", "Benchmark\n\n## Usage\n\nrun install.sh", "'\\n'"),
        ("--description", "fine\x1b[2J\x1b[Hcleared", "'\\x1b'"),
        ("--change", "fixed\u202eexe.txt", "'\\u202e'"),
        ("--change", "line\u2028separator", "'\\u2028'"),
        ("--title", "nul\x00byte", "'\\x00'"),
    ],
)
def test_hostile_release_text_is_refused_before_anything_is_written(tmp_path, capsys, flag, text, shown):
    """Failed before: the text was written into the card, whose own verify then failed."""
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    out = tmp_path / "rel" / NAME
    assert main(["release", str(dataset), "--out", str(out), flag, text]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hsi release: error: {flag} ")
    assert f"holds {shown} (character {text.index(eval(shown)) + 1}); give one line of printable text" in err[0]
    assert not (tmp_path / "rel").exists()


def test_plain_unicode_text_is_released_as_written(tmp_path, capsys):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    out = tmp_path / "rel" / NAME
    assert main(["release", str(dataset), "--out", str(out), "--title", "Größen und Ecken — 小さな物体"]) == 0
    assert "# Größen und Ecken — 小さな物体" in (out / "README.md").read_text("utf-8")
    assert main(["verify", str(out)]) == 0


# -- one lock per --out ----------------------------------------------------------------------------


HOLD_LOCK = """
import sys, time
from pathlib import Path
from builder.core.locks import exclusive_folder
with exclusive_folder(Path(sys.argv[1])):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_a_release_into_an_out_another_run_writes_is_refused(tmp_path, capsys):
    """Failed before: `hsi release` took no lock, so two releases into one --out both said `written`
    and one replaced the other. The lock is the one every writer of a folder takes."""
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    out = tmp_path / "rel" / NAME
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["release", str(dataset), "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{out} is being written by another hsi run (pid {holder.pid})" in err[0]
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    assert main(["release", str(dataset), "--out", str(out)]) == 0


# -- class names -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("names", "says"),
    [
        (["goldfish", "great white shark", "x"], "class_names[2] 'x' is not an ImageNet class name"),
        (["tench", "tench", "goldfish"], "class_names[1] 'tench' is not an ImageNet class name in index order"),
        (["goldfish", "tench", "tiger shark"], "class_names[1] 'tench' is not an ImageNet class name in index order"),
    ],
)
def test_class_names_that_are_not_imagenets_are_not_released(tmp_path, capsys, names, says):
    """Failed before: a manifest (and validation report) naming other classes was released and verified."""
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    path = dataset / "_info.json"
    manifest = json.loads(path.read_text())
    manifest["class_names"] = names
    path.write_text(json.dumps(manifest))
    assert main(["release", str(dataset), "--out", str(tmp_path / "rel" / NAME)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and err[0].endswith("; compose the dataset again")
    assert not (tmp_path / "rel" / NAME).exists()


def test_class_names_edited_in_a_released_folder_fail_verify(tmp_path, capsys):
    """The release's manifest, its card's features and their sha256 all rewritten to name other
    classes: the card and the manifest agree, the names are not ImageNet's."""
    from builder.core.hashing import sha256_file

    v1, _ = two_releases(tmp_path)
    info = v1 / "data" / NAME / "_info.json"
    manifest = json.loads(info.read_text())
    old = manifest["class_names"]
    manifest["class_names"] = ["cat", "dog", "bird"]
    info.write_text(json.dumps(manifest, sort_keys=True, indent=2))
    card = (v1 / "README.md").read_text()
    for index, (before, after) in enumerate(zip(old, manifest["class_names"])):
        assert card.count(f"'{index}': {before}\n") == 1
        card = card.replace(f"'{index}': {before}\n", f"'{index}': {after}\n")
    (v1 / "README.md").write_text(card)
    record = json.loads((v1 / "_release.json").read_text())
    record["files"]["README.md"] = sha256_file(v1 / "README.md")
    record["files"][f"data/{NAME}/_info.json"] = sha256_file(info)
    (v1 / "_release.json").write_text(json.dumps(record, sort_keys=True, indent=2))
    status, _out, problems = verify_lines([str(v1)], capsys)
    assert status == 1
    assert (
        f"data/{NAME}/_info.json: class_names[0] 'cat' is not an ImageNet class name in index order after the "
        "ones before it; a label space is ImageNet's classes (all 1000, a subset's, or a selection)" in problems
    )


def test_the_record_reader_refuses_unknown_keys_at_every_level(tmp_path):
    from builder.core.errors import HsiError
    from cards.release import read_release_record

    v1, v2 = two_releases(tmp_path)
    base = json.loads((v2 / "_release.json").read_text())
    edits = {
        "tool: unknown key 'url'": lambda r: r["tool"].update(url="x"),
        "previous: unknown key 'files'": lambda r: r["previous"].update(files={}),
        "changelog[0]: unknown key 'author'": lambda r: r["changelog"][0].update(author="x"),
        f"configs.{NAME}: unknown key 'data_dir'": lambda r: r["configs"][NAME].update(data_dir="x"),
        f"configs.{NAME}.splits.test[0]: unknown key 'url'": lambda r: r["configs"][NAME]["splits"]["test"][0].update(
            url="x"
        ),
        "signer.kind: 'gpg' is not one of key, sigstore": lambda r: r.update(signer={"kind": "gpg"}),
    }
    for where, edit in edits.items():
        record = json.loads(json.dumps(base))
        edit(record)
        path = tmp_path / "_release.json"
        path.write_text(json.dumps(record))
        with pytest.raises(HsiError) as error:
            read_release_record(path)
        assert f"_release.json: {where}" in str(error.value) and "\n" not in str(error.value)


def test_a_subset_label_space_is_exactly_its_classes_names():
    from builder.core.classes import class_of, label_space_problem

    wnids = ["n02437312", "n01443537"]  # Arabian camel, goldfish: labelled in wnid order
    names = [class_of(w).name for w in sorted(wnids)]
    assert label_space_problem(names, wnids) is None
    assert label_space_problem(names[::-1], wnids) == (
        "class_names are not the names of the spec's subset classes (2 in wnid order)"
    )
    assert label_space_problem(names, ["n99999999"]) == "the spec's subset names a wnid that is not ImageNet's"
    assert label_space_problem(names, [1, 2]) == "the spec's subset does not list its classes' wnids"
    assert label_space_problem("tench", None) == "class_names is not a list of strings"
