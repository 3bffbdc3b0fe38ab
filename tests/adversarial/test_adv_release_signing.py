"""An anchor outside the revision (issue 41): a complete re-signing (every hash rewritten, the tag
moved) verified, because nothing outside the release vouched for it. `hsi release --sign KEY` signs
the folder with OpenSSF Model Signing (model-signing: `release.sig`, a Sigstore bundle over every
file's sha256), and `hsi verify --signer PUBKEY` checks it: any changed file, or a re-signing by
another key, fails; a verify without --signer says who signed, or that the release is unsigned.
Keys are made here with `cryptography`; everything runs offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from hub_server import LoopbackHub, Repo, hub_env
from release_factory import make_composed_dataset

from builder.core.hashing import sha256_file
from hsi.cli import main

NAME = "hard-spurious-imagenet"
VALIDATION_MD = f"data/{NAME}/validation.md"


def key_pair(folder: Path, name: str, curve=None) -> tuple[Path, Path, str]:
    """(private key PEM, public key PEM, the public key's fingerprint as model-signing records it)."""
    folder.mkdir(parents=True, exist_ok=True)
    private = (
        ec.generate_private_key(curve or ec.SECP256R1())
        if curve is not ed25519
        else ed25519.Ed25519PrivateKey.generate()
    )
    key, pub = folder / f"{name}.pem", folder / f"{name}.pub"
    key.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pub.write_bytes(public_pem)
    import hashlib

    return key, pub, hashlib.sha256(public_pem).hexdigest()


@pytest.fixture(scope="module")
def signed(tmp_path_factory):
    """A release signed with key "alice", and the key pairs of alice and mallory."""
    root = tmp_path_factory.mktemp("signed")
    alice, mallory = key_pair(root / "keys", "alice"), key_pair(root / "keys", "mallory")
    dataset = make_composed_dataset(root / "ds", splits={"test": 5}, shard_size=2)
    release = root / "release" / NAME
    assert main(["release", str(dataset), "--out", str(release), "--version", "v1.0.0", "--sign", str(alice[0])]) == 0
    return {"release": release, "alice": alice, "mallory": mallory, "dataset": dataset, "root": root}


def verify(args: list[str], capsys) -> tuple[int, list[str], list[str], list[str]]:
    status = main(["verify", *map(str, args)])
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    return status, out, [x.removeprefix("FAILED: ") for x in out if x.startswith("FAILED: ")], captured.err.splitlines()


def copy(release: Path, where: Path) -> Path:
    return Path(shutil.copytree(release, where / NAME))


def rehash(folder: Path, *paths: str) -> None:
    """Rewrite `_release.json`'s sha256 of `paths`: a forger's complete re-signing of the record."""
    record = json.loads((folder / "_release.json").read_text())
    for path in paths:
        record["files"][path] = sha256_file(folder / path)
    (folder / "_release.json").write_text(json.dumps(record, sort_keys=True, indent=2))


def test_a_signed_release_names_its_signer_in_record_card_and_verify(signed, capsys):
    release, (_, pub, fingerprint) = signed["release"], signed["alice"]
    bundle = json.loads((release / "release.sig").read_text())
    assert bundle["verificationMaterial"]["publicKey"]["hint"] == fingerprint
    assert json.loads((release / "_release.json").read_text())["signer"] == {"kind": "key", "fingerprint": fingerprint}
    card = (release / "README.md").read_text()
    assert f"made with the key whose public key's sha256 is `{fingerprint}`" in card
    # without --signer: who signed, not checked; with it: checked
    status, out, problems, _ = verify([release], capsys)
    assert status == 0 and problems == []
    assert out[1] == (
        f"signed by the key whose public key's sha256 is {fingerprint}; not checked: give --signer PUBKEY "
        "(or --signer-identity) to check it"
    )
    status, out, problems, _ = verify([release, "--signer", pub], capsys)
    assert status == 0 and problems == []
    assert (
        out[1]
        == f"signature: release.sig checks: every file signed by the key whose public key's sha256 is {fingerprint}"
    )
    assert out[-1] == f"OK: {release} is intact"


def test_a_changed_file_with_every_hash_rewritten_fails_the_signature(signed, tmp_path, capsys):
    """Failed before (nothing to check it against): the record rewritten to the changed file verified."""
    folder = copy(signed["release"], tmp_path)
    (folder / VALIDATION_MD).write_text("# Validation\n\nall checks passed (we promise)\n")
    rehash(folder, VALIDATION_MD)
    assert verify([folder], capsys)[0] == 0  # what the revision alone says: intact
    status, _, problems, _ = verify([folder, "--signer", signed["alice"][1]], capsys)
    assert status == 1 and len(problems) == 1
    assert problems == [
        f"release.sig: the signature does not check: changed since it was signed: _release.json, {VALIDATION_MD}"
    ]


def test_an_added_file_fails_the_signature_and_the_files_record(signed, tmp_path, capsys):
    folder = copy(signed["release"], tmp_path)
    (folder / "NOTES.md").write_text("see install.sh\n")
    status, _, problems, _ = verify([folder, "--signer", signed["alice"][1]], capsys)
    assert status == 1
    assert problems == [
        "NOTES.md: in the revision but not part of the release (_release.json does not list it)",
        "release.sig: the signature does not check: not signed: NOTES.md",
    ]


def test_a_re_signing_by_another_key_fails(signed, tmp_path, capsys):
    """The forger's whole job: change a file, rewrite every hash, the card's and the record's signer,
    and sign again with their own key. Only the key the user brings tells."""
    from cards.signature import key_signer, sign_folder

    folder = copy(signed["release"], tmp_path)
    alice_fp, (mallory_key, _, mallory_fp) = signed["alice"][2], signed["mallory"]
    (folder / VALIDATION_MD).write_text("# Validation\n\nall checks passed (we promise)\n")
    card = (folder / "README.md").read_text().replace(alice_fp, mallory_fp)
    (folder / "README.md").write_text(card)
    rehash(folder, VALIDATION_MD, "README.md")
    record = json.loads((folder / "_release.json").read_text())
    record["signer"]["fingerprint"] = mallory_fp
    (folder / "_release.json").write_text(json.dumps(record, sort_keys=True, indent=2))
    (folder / "release.sig").unlink()
    sign_folder(folder, NAME, key_signer(mallory_key))
    status, out, problems, _ = verify([folder], capsys)
    assert status == 0 and out[1].startswith(f"signed by the key whose public key's sha256 is {mallory_fp}")
    status, _, problems, _ = verify([folder, "--signer", signed["alice"][1]], capsys)
    assert status == 1 and len(problems) == 1
    assert problems[0].startswith("release.sig: the signature does not check: ValueError: Key mismatch: The public key")


def test_a_signature_the_record_does_not_name_fails(signed, tmp_path, capsys):
    """A signature swapped for another key's, the record and card left naming alice."""
    from cards.signature import key_signer, sign_folder

    folder = copy(signed["release"], tmp_path)
    (folder / "release.sig").unlink()
    sign_folder(folder, NAME, key_signer(signed["mallory"][0]))
    status, _, problems, _ = verify([folder], capsys)
    assert status == 1
    assert problems == [
        f"signer: _release.json records a signature made with the key whose public key's sha256 is "
        f"`{signed['alice'][2]}`; release.sig was made by the key whose public key's sha256 is {signed['mallory'][2]}"
    ]


def test_a_removed_signature_fails_when_one_is_asked_for(signed, tmp_path, capsys):
    folder = copy(signed["release"], tmp_path)
    (folder / "release.sig").unlink()
    status, _, problems, _ = verify([folder], capsys)
    assert status == 1 and problems == ["release.sig: _release.json records a signer, the revision holds no signature"]
    unsigned = signed["root"] / "unsigned" / NAME
    assert main(["release", str(signed["dataset"]), "--out", str(unsigned), "--version", "v1.0.0"]) == 0
    capsys.readouterr()
    status, out, problems, _ = verify([unsigned, "--signer", signed["alice"][1]], capsys)
    assert status == 1 and problems == ["release.sig: the release is unsigned; --signer asks for a signature"]


def test_a_signed_release_is_overwritten_and_published_with_its_signature(signed, tmp_path, capsys):
    from cards.release import read_release_meta
    from hf_scripts.publish import release_files

    folder = copy(signed["release"], tmp_path)
    assert "release.sig" in {path for path, _ in release_files(folder, read_release_meta(folder))}
    args = ["release", str(signed["dataset"]), "--out", str(folder), "--version", "v1.0.0", "--overwrite"]
    assert main([*args, "--sign", str(signed["mallory"][0])]) == 0
    assert (
        json.loads((folder / "release.sig").read_text())["verificationMaterial"]["publicKey"]["hint"]
        == (signed["mallory"][2])
    )
    assert main(args) == 0  # rebuilt unsigned: no signature left behind
    assert not (folder / "release.sig").exists() and "## Signature" not in (folder / "README.md").read_text()
    capsys.readouterr()


@pytest.mark.parametrize(
    ("key", "says"),
    [
        (
            "ed25519",
            "is a key of type Ed25519; OpenSSF Model Signing signs with an elliptic-curve key on P-256, P-384 or P-521",
        ),
        ("secp256k1", "is a key of type secp256k1; OpenSSF Model Signing signs with an elliptic-curve key"),
        ("public", "is not a PEM private key this password opens; give the private key file (PEM)"),
        ("missing", "absent.pem: --sign not found"),
    ],
)
def test_a_key_model_signing_cannot_sign_with_is_refused_in_one_line(tmp_path, capsys, key, says):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    if key == "ed25519":
        path = key_pair(tmp_path / "keys", "k", ed25519)[0]
    elif key == "secp256k1":
        path = key_pair(tmp_path / "keys", "k", ec.SECP256K1())[0]
    elif key == "public":
        path = key_pair(tmp_path / "keys", "k")[1]
    else:
        path = tmp_path / "keys" / "absent.pem"
    out = tmp_path / "rel" / NAME
    assert main(["release", str(dataset), "--out", str(out), "--sign", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("hsi release: error: ") and says in err[0], err
    assert not (tmp_path / "rel").exists()


def test_keyless_signing_offline_is_refused_in_one_line(tmp_path):
    dataset = make_composed_dataset(tmp_path / "ds", splits={"test": 3})
    out = tmp_path / "rel" / NAME
    result = subprocess.run(
        [sys.executable, "-m", "hsi.cli", "release", str(dataset), "--out", str(out), "--sign", "sigstore"],
        env=dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "hsi release: error: --sign sigstore signs through Sigstore's online services and HF_HUB_OFFLINE is set; "
        "sign with a key pair instead (--sign KEY.pem), or run online"
    ]
    assert not (tmp_path / "rel").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--signer", "{pub}", "--signer-identity", "me@example.org"],
            "give --signer (a public key) or --signer-identity",
        ),
        (["--signer-identity", "me@example.org"], "--signer-identity needs --signer-issuer"),
        (["--signer", "{key}"], "is not a PEM public key; give the signer's public key"),
    ],
)
def test_a_signer_request_that_cannot_be_checked_is_one_line(signed, capsys, args, says):
    key, pub, _ = signed["alice"]
    status = main(["verify", str(signed["release"]), *(a.format(key=key, pub=pub) for a in args)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and says in err[0]


VERIFY_EACH = """
import contextlib, io, json, sys
from hsi.cli import main
results = {}
for repo in sys.argv[2:]:
    out = io.StringIO()
    err = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(["verify", repo, "--version", "v1.0.0", "--signer", sys.argv[1]])
    results[repo] = [status, out.getvalue().splitlines() + err.getvalue().splitlines()]
print("RESULTS " + json.dumps(results))
"""


def test_the_hub_verify_checks_the_signature_at_the_tag(signed, tmp_path):
    """The signed release published, and a copy whose tag was moved to a commit with a changed file and
    every hash rewritten: only the signature tells them apart."""
    release = signed["release"]
    good = {p.relative_to(release).as_posix(): p.read_bytes() for p in release.rglob("*") if p.is_file()}
    forged_folder = copy(release, tmp_path)
    (forged_folder / VALIDATION_MD).write_text("# Validation\n\nall checks passed (we promise)\n")
    rehash(forged_folder, VALIDATION_MD)
    forged = {p.relative_to(forged_folder).as_posix(): p.read_bytes() for p in forged_folder.rglob("*") if p.is_file()}
    with LoopbackHub() as hub:
        for repo_id, files in {"lab/signed": good, "lab/moved": forged}.items():
            repo = Repo(private=False)
            first = repo.commit(None, good, "Release v1.0.0")
            repo.tags["v1.0.0"] = first if files is good else repo.commit(first, files, "fix")
            hub.state.repos[repo_id] = repo
        result = subprocess.run(
            [sys.executable, "-c", VERIFY_EACH, str(signed["alice"][1]), "lab/signed", "lab/moved"],
            env=dict(hub_env(hub.endpoint, tmp_path / "home"), PYTHONPATH=os.pathsep.join(sys.path)),
            capture_output=True,
            text=True,
            timeout=400,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("RESULTS "))
    results = json.loads(line.removeprefix("RESULTS "))
    status, lines = results["lab/signed"]
    assert status == 0 and lines[1].startswith("signature: release.sig checks: every file signed by the key"), lines
    status, lines = results["lab/moved"]
    problems = [x.removeprefix("FAILED: ") for x in lines if x.startswith("FAILED: ")]
    assert status == 1 and len(problems) == 1, lines
    assert problems == [
        f"release.sig: the signature does not check: changed since it was signed: _release.json, {VALIDATION_MD}"
    ]
