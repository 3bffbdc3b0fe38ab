"""Release signatures: OpenSSF Model Signing (the `model-signing` library) over a release folder.

`hsi release --sign KEY` writes `release.sig` into the folder: a Sigstore bundle (DSSE envelope, an
in-toto statement) signing the sha256 of every other file of the folder, made with an elliptic-curve
key pair (P-256, P-384 or P-521: what model-signing's key signer takes) or, online, with Sigstore's
keyless identities. The signature file is the one file the signed manifest leaves out (its own
`ignore_paths`), so a change of any other file, or a re-signing with another key, fails the check.
Nothing in the revision vouches for itself: only the public key (or identity) a user brings does.

A release record names its signer (`signer`: `{"kind": "key", "fingerprint": HEX}`, the sha256 of
the public key's PEM as the bundle's key hint records it, or `{"kind": "sigstore"}`), the card
renders it, and `hsi verify` compares the two with the signature file it reads.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import HsiError, printable
from builder.core.hashing import sha256_file
from builder.core.untrusted import Fields, UntrustedInput, read_json, regular_file

SIGNATURE = "release.sig"
KEY, SIGSTORE = "key", "sigstore"
PASSWORD_VARIABLE = "HSI_SIGNING_KEY_PASSWORD"  # an encrypted private key's password, never a flag
KEY_CURVES = ("secp256r1", "secp384r1", "secp521r1")  # model-signing's key signer takes these only
MAX_KEY_BYTES = 64 * 1024
FINGERPRINT = re.compile(r"[0-9a-f]{64}")
GIT_PATHS = (".git", ".gitattributes", ".github", ".gitignore")  # model-signing's hashing leaves these out
INSTALL_HINT = "pip install 'hard-spurious-imagenet[sign]'"


class SignatureError(HsiError):
    """A release cannot be signed, or its signature does not check; the message says why."""


@dataclass(frozen=True)
class ReleaseSigner:
    """Who signs a release: a private key file (with the fingerprint of its public key) or Sigstore."""

    kind: str
    key: Path | None = None
    fingerprint: str | None = None

    def record(self) -> dict:
        """The release record's `signer`, which the card renders and `hsi verify` compares."""
        return {"kind": self.kind, "fingerprint": self.fingerprint} if self.kind == KEY else {"kind": SIGSTORE}


def signer_words(signer: dict) -> str:
    """How the card and verify name a signer record."""
    if signer.get("kind") == KEY:
        return f"with the key whose public key's sha256 is `{signer.get('fingerprint')}`"
    return "with Sigstore's keyless signing (the signer's identity is in the signature's certificate)"


SIGNATURE_HEADING = "## Signature\n\n"


def signature_section(signer: dict) -> str:
    """The card's Signature section for the release record's `signer` (cards.signature)."""
    return (
        f"{SIGNATURE_HEADING}The release is signed with "
        "[OpenSSF Model Signing](https://github.com/sigstore/model-transparency): "
        f"`{SIGNATURE}` holds a signature over the sha256 of every other file, made {signer_words(signer)}. Check it "
        "with `hsi verify` and `--signer` (the signer's public key) or `--signer-identity` (a Sigstore identity)."
    )


def public_key_fingerprint(public_key) -> str:
    """The sha256 of the public key's PEM (SubjectPublicKeyInfo): the key hint model-signing records."""
    from cryptography.hazmat.primitives import serialization

    pem = public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


def _key_bytes(path: Path, what: str) -> bytes:
    path = regular_file(Path(path), what)  # a link is refused, never followed
    if path.stat().st_size > MAX_KEY_BYTES:
        raise SignatureError(f"{what} {path} is larger than {MAX_KEY_BYTES} bytes; give a PEM key file")
    return path.read_bytes()


def _check_curve(public_key, where: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    if not isinstance(public_key, ec.EllipticCurvePublicKey) or public_key.curve.name not in KEY_CURVES:
        kind = getattr(getattr(public_key, "curve", None), "name", None) or type(public_key).__name__
        raise SignatureError(
            f"{where} is a key of type {kind.removesuffix('PublicKey')}; OpenSSF Model Signing signs with an "
            "elliptic-curve key on P-256, P-384 or "
            "P-521 (e.g. `openssl ecparam -name prime256v1 -genkey -noout -out key.pem`)"
        )


def key_signer(path: Path) -> ReleaseSigner:
    """The signer of `hsi release --sign KEY`: a PEM private key (encrypted: its password in
    HSI_SIGNING_KEY_PASSWORD), checked before anything is written."""
    from cryptography.hazmat.primitives import serialization

    data = _key_bytes(Path(path), "--sign")
    password = os.environ.get(PASSWORD_VARIABLE)
    try:
        private_key = serialization.load_pem_private_key(data, password.encode() if password else None)
    except TypeError:
        raise SignatureError(
            f"--sign {path} is an encrypted key and {PASSWORD_VARIABLE} is not set (or it is not encrypted and "
            f"{PASSWORD_VARIABLE} is); set it to the key's password"
        ) from None
    except ValueError:
        raise SignatureError(
            f"--sign {path} is not a PEM private key this password opens; give the private key file (PEM)"
        ) from None
    _check_curve(private_key.public_key(), f"--sign {path}")
    return ReleaseSigner(KEY, Path(path), public_key_fingerprint(private_key.public_key()))


def sigstore_signer() -> ReleaseSigner:
    """The signer of `hsi release --sign sigstore`: keyless, through Sigstore's services (online)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        raise SignatureError(
            "--sign sigstore signs through Sigstore's online services and HF_HUB_OFFLINE is set; sign with a key "
            "pair instead (--sign KEY.pem), or run online"
        )
    _model_signing()
    return ReleaseSigner(SIGSTORE)


def signer_from_option(value: str) -> ReleaseSigner:
    """`--sign sigstore` or `--sign KEY.pem`."""
    return sigstore_signer() if value == SIGSTORE else key_signer(Path(value))


def _model_signing():
    try:
        import model_signing.hashing
        import model_signing.signing
        import model_signing.verifying
    except ImportError as exc:
        raise SignatureError(f"signing needs the `sign` extra ({exc.name} is missing): {INSTALL_HINT}") from None
    return model_signing


class _NamedHashing:
    """model-signing's hashing of a folder, the manifest named `name`: the release is signed in its
    staging folder, whose name is not the release's (the name is informative only)."""

    def __init__(self, config, name: str) -> None:
        self.config, self.name = config, name

    def hash(self, path, **kwargs):
        from model_signing import manifest

        hashed = self.config.hash(path, **kwargs)
        kind = manifest.SerializationType.from_args(hashed.serialization_type)
        items = [kind.new_item(str(r.identifier), r.digest) for r in hashed.resource_descriptors()]
        return manifest.Manifest(self.name, items, kind)


def sign_folder(folder: Path, name: str, signer: ReleaseSigner) -> Path:
    """Write `folder/release.sig`: the signature over the sha256 of every other file of `folder`."""
    ms = _model_signing()
    hashing = ms.hashing.Config().set_ignored_paths(paths=[SIGNATURE], ignore_git_paths=True)
    config = ms.signing.Config().set_hashing_config(_NamedHashing(hashing, name))
    try:
        if signer.kind == KEY:
            password = os.environ.get(PASSWORD_VARIABLE)
            config.use_elliptic_key_signer(private_key=signer.key, password=password.encode() if password else None)
        else:
            config.use_sigstore_signer(use_ambient_credentials=True)
        config.sign(folder, folder / SIGNATURE)
    except (OSError, ValueError) as exc:
        raise SignatureError(f"signing the release failed: {_one_line(exc)}") from None
    except Exception as exc:  # sigstore's network and identity errors have no common base
        raise SignatureError(f"signing the release failed ({type(exc).__name__}): {_one_line(exc)}") from None
    return folder / SIGNATURE


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip()) or type(exc).__name__
    return printable(text)[:limit]


# -- reading and checking ----------------------------------------------------------------------------


def signature_signer(path: Path, label: str) -> dict:
    """Who the signature file says signed it, read without checking it: `{"kind": "key", "fingerprint":
    HEX}` (the bundle's key hint) or `{"kind": "sigstore", "identity": ..., "issuer": ...}` (its
    certificate's). A file that is not a bundle of either kind is refused in one line."""
    try:
        bundle = Fields(read_json(path, SIGNATURE), label)
        material = bundle.object("verificationMaterial")
        bundle.object("dsseEnvelope").string("payload")
    except UntrustedInput as exc:
        raise UntrustedInput(str(exc).replace(str(path), label, 1)) from None
    if material.has("publicKey"):
        hint = material.object("publicKey").string("hint", pattern=FINGERPRINT)
        return {"kind": KEY, "fingerprint": hint}
    raw = None
    if material.has("certificate"):
        raw = material.object("certificate").string("rawBytes")
    elif material.has("x509CertificateChain"):
        chain = material.object("x509CertificateChain").objects("certificates")
        raw = chain[0].string("rawBytes") if chain else None
    if raw is None:
        raise material.error("names neither a public key nor a certificate")
    identity, issuer = _certificate_identity(raw)
    return {"kind": SIGSTORE, "identity": identity, "issuer": issuer}


FULCIO_ISSUER_OIDS = ("1.3.6.1.4.1.57264.1.8", "1.3.6.1.4.1.57264.1.1")  # Fulcio's OIDC issuer extensions


def _certificate_identity(raw: str) -> tuple[str | None, str | None]:
    from cryptography import x509

    try:
        certificate = x509.load_der_x509_certificate(base64.b64decode(raw, validate=True))
    except ValueError:
        return None, None
    identity = issuer = None
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found = names.get_values_for_type(x509.RFC822Name) or names.get_values_for_type(x509.UniformResourceIdentifier)
        identity = found[0] if found else None
    except (x509.ExtensionNotFound, ValueError):
        pass
    for oid in FULCIO_ISSUER_OIDS:
        try:
            value = certificate.extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value
            data = value.value if hasattr(value, "value") else b""
            issuer = data.decode("utf-8", "replace").lstrip("\x0c\x16\x13")  # a DER string's tag, if any
            break
        except (x509.ExtensionNotFound, ValueError):
            continue
    return identity, issuer


def describe_signer(found: dict) -> str:
    """A verify line's words for a signature file's signer (signature_signer)."""
    if found["kind"] == KEY:
        return f"the key whose public key's sha256 is {found['fingerprint']}"
    who = printable(str(found.get("identity") or "an identity that does not read"))
    return f"Sigstore identity {who} (issuer {printable(str(found.get('issuer') or 'unknown'))})"


@dataclass(frozen=True)
class SignerCheck:
    """What `hsi verify` is asked to check a signature against: a public key file, or a Sigstore
    identity and its OIDC issuer; neither, and it only says who signed."""

    public_key: Path | None = None
    identity: str | None = None
    issuer: str | None = None

    @property
    def asked(self) -> bool:
        return self.public_key is not None or self.identity is not None

    def check_options(self) -> SignerCheck:
        """Refuse a contradictory or unreadable request before anything is read."""
        if self.public_key is not None and self.identity is not None:
            raise SignatureError("give --signer (a public key) or --signer-identity (a Sigstore identity), not both")
        if self.identity is not None and not self.issuer:
            raise SignatureError(
                "--signer-identity needs --signer-issuer, the identity's OIDC issuer "
                "(e.g. https://github.com/login/oauth)"
            )
        if self.public_key is not None:
            from cryptography.hazmat.primitives import serialization

            try:
                key = serialization.load_pem_public_key(_key_bytes(self.public_key, "--signer"))
            except ValueError:
                raise SignatureError(
                    f"--signer {self.public_key} is not a PEM public key; give the signer's public key"
                ) from None
            _check_curve(key, f"--signer {self.public_key}")
        return self


def check_signature(folder: Path, request: SignerCheck, follow_cache_links: bool = False) -> str | None:
    """None when `folder/release.sig` signs exactly the folder's files and was made by the key (or
    identity) of `request`; else the problem, in one line. `follow_cache_links`: the folder is
    huggingface_hub's snapshot of a revision, whose files are its own links into its blob store."""
    ms = _model_signing()
    config = ms.verifying.Config()
    hashing = ms.hashing.Config().set_ignored_paths(paths=[SIGNATURE], ignore_git_paths=True)
    config.set_hashing_config(hashing.set_allow_symlinks(follow_cache_links))
    try:
        if request.public_key is not None:
            config.use_elliptic_key_verifier(public_key=request.public_key)
        else:
            config.use_sigstore_verifier(identity=str(request.identity), oidc_issuer=str(request.issuer))
        config.verify(folder, folder / SIGNATURE)
    except Exception as exc:  # model-signing raises ValueError, cryptography InvalidSignature, sigstore its own
        return f"{SIGNATURE}: the signature does not check: {_mismatch(exc, folder, follow_cache_links)}"
    return None


def _mismatch(exc: Exception, folder: Path, cache_links: bool) -> str:
    """What a failed check found, in words. On a manifest mismatch the signature itself checked (the
    library compares manifests only after that), so its signed statement names each file's sha256:
    compared here with the folder's files, it says which changed, which are not signed, which are gone."""
    if not str(exc).startswith("Signature mismatch"):
        return f"{type(exc).__name__}: {_one_line(exc)}"
    try:
        bundle = folder / SIGNATURE
        bundle = bundle.resolve() if cache_links else bundle  # huggingface_hub's link to its blob
        statement = json.loads(base64.b64decode(read_json(bundle, SIGNATURE)["dsseEnvelope"]["payload"]))
        signed = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    except (UntrustedInput, ValueError, KeyError, TypeError):
        return _one_line(exc)
    present = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder).as_posix()
        if relative == SIGNATURE or relative.split("/")[0] in GIT_PATHS or not path.is_file():
            continue
        if cache_links or not path.is_symlink():
            present[relative] = sha256_file(path.resolve())
    found = []
    for label, names in (
        ("changed since it was signed", [n for n in sorted(signed) if n in present and present[n] != signed[n]]),
        ("not signed", sorted(set(present) - set(signed))),
        ("signed but absent", sorted(set(signed) - set(present))),
    ):
        if names:
            found.append(f"{label}: {', '.join(printable(n) for n in names[:10])}")
    return "; ".join(found) or _one_line(exc)


def signature_problems(
    record: dict,
    card: str | None,
    signature: Path | None,
    request: SignerCheck,
    check: Callable[[], str | None],
) -> tuple[list[str], list[str]]:
    """(report lines, problems) of a release's signature: `signature` is its signature file (None when
    the revision has none), `record` the release record, `card` its text; `check` runs
    check_signature when `request` asks for a signer. The record's `signer`, the card's Signature
    section and the signature file must name the same signer."""
    recorded = record.get("signer")
    problems = []
    if card is not None and recorded and signature_section(recorded) not in card:
        problems.append(f"README.md: does not name the signer _release.json records ({signer_words(recorded)})")
    if signature is None:
        if recorded:
            problems.append(f"{SIGNATURE}: _release.json records a signer, the revision holds no signature")
        if request.asked:
            problems.append(f"{SIGNATURE}: the release is unsigned; --signer asks for a signature")
            return [], problems
        return [
            "not checked: unsigned; nothing outside the revision vouches for it (`hsi release --sign KEY`)"
        ], problems
    found = signature_signer(signature, SIGNATURE)
    if not recorded:
        problems.append(f"{SIGNATURE}: the revision holds a signature, _release.json records no signer")
    elif recorded.get("kind") != found["kind"] or (
        found["kind"] == KEY and recorded.get("fingerprint") != found["fingerprint"]
    ):
        problems.append(
            f"signer: _release.json records a signature made {signer_words(recorded)}; {SIGNATURE} was made by "
            f"{describe_signer(found)}"
        )
    if not request.asked:
        return [
            f"signed by {describe_signer(found)}; not checked: give --signer PUBKEY (or --signer-identity) to check it"
        ], problems
    failed = check()
    if failed:
        return [], [*problems, failed]
    return [f"signature: {SIGNATURE} checks: every file signed by {describe_signer(found)}"], problems


def check_recorded_signer(data: Fields) -> dict | None:
    """The release record's `signer` field, read (cards.release's record reader)."""
    if not data.has("signer"):
        return None
    signer = data.object("signer").only(("kind", "fingerprint"))
    kind = signer.string("kind", choices=(KEY, SIGSTORE))
    if kind == KEY:
        return {"kind": KEY, "fingerprint": signer.string("fingerprint", pattern=FINGERPRINT)}
    return {"kind": SIGSTORE}
