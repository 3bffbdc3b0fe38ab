"""The data behind the galleries: `--data SOURCE` matched to the revision each evaluation names,
and the gallery samples read from shards proved against the manifest.

An evaluation records its data revision (config, split, fingerprint) but its source only by name
(`source_display_name`: a folder's name, never a path), so the site never guesses where the data
is: `--data` names it (a release folder, a composed folder or an hf:// address; several for
several configs), and each evaluation takes the source whose manifest has its config, its split
and its fingerprint. One that none has is refused, so a thumbnail is never another build's image.

Shards are checked by `evaluation.predicting.verified_shards` (size and sha256 against the manifest; a hub
source is read from its checked cached copy), the shards the galleries need and no others.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import printable
from builder.core.manifest import Manifest
from builder.formats.stream import StreamError, iter_tar_samples, resolve_shard_lengths, source_manifest
from evaluation.predicting.data import SampleError, sample_json
from evaluation.predicting.verified_shards import ShardMismatch, verify_shards

from .collect import ModelEval, ReportInputError


@dataclass
class SplitData:
    """One split of one data source: its manifest and its shards by file name."""

    source: str
    config: str
    split: str
    fingerprint: str
    manifest: dict
    shards: dict[str, str]  # shard file name -> url or path, as the manifest lists them


@dataclass(frozen=True)
class Sample:
    """A gallery sample as its shard holds it: the composite's JPEG bytes, size and json."""

    key: str
    jpg: bytes
    size: tuple[int, int]
    meta: dict


def _manifest(source: str, config: str | None) -> dict | None:
    """The manifest of `config` in `source`, or None when the source holds no such config."""
    try:
        _, manifest = source_manifest(source, config)
    except FileNotFoundError:
        raise ReportInputError(
            f"--data {printable(source)} is neither a release folder nor a composed dataset folder nor an hf:// "
            "address with a manifest: pass the data the evaluations read"
        ) from None
    except StreamError as exc:
        if "is not in this release" in str(exc):
            return None
        raise ReportInputError(f"--data {printable(source)}: {exc}") from None
    Manifest.from_json(manifest)  # a malformed manifest is one line naming the field
    return manifest


def _revision_text(revision: tuple) -> str:
    config, split, fingerprint = revision
    return f"config {printable(str(config))}, split {printable(str(split))}, fingerprint {printable(str(fingerprint))}"


def match_data(models: list[ModelEval], sources: list[str]) -> dict[tuple, SplitData]:
    """{revision: its split of the one --data source that holds it} for every model's revision;
    refused in one line for a revision no source holds (or one without a fingerprint to check)."""
    matched: dict[tuple, SplitData] = {}
    for model in models:
        revision = model.revision
        if revision in matched:
            continue
        config, split, fingerprint = revision
        where = printable(str(model.folder))
        if not fingerprint:
            raise ReportInputError(
                f"{where}: its eval.json records no data fingerprint, so no --data can be proved to be its data; "
                "re-run hsi eval, or leave out --data for a site without galleries"
            )
        found, without = [], []
        for source in sources:
            manifest = _manifest(source, config)
            if manifest is None:
                without.append(f"--data {printable(source)} has no config {printable(str(config))}")
                continue
            found.append((source, manifest))
            if (
                manifest.get("config") == config
                and manifest.get("fingerprint") == fingerprint
                and split in manifest["splits"]
            ):
                break
        else:
            held = "; ".join(
                [
                    f"--data {printable(s)} holds config {printable(str(m.get('config')))}, fingerprint "
                    f"{printable(str(m.get('fingerprint')))}, splits {', '.join(map(printable, sorted(m['splits'])))}"
                    for s, m in found
                ]
                + without
            )
            raise ReportInputError(
                f"{printable(model.spec)} ({where}) was measured on {_revision_text(revision)}, which no --data holds"
                f"{' (' + held + ')' if held else ''}: pass the data it was measured on, or leave out --data for a "
                "site without galleries"
            )
        try:
            urls, _, _ = resolve_shard_lengths(source, config, split)
        except StreamError as exc:
            raise ReportInputError(f"--data {printable(source)}: {exc}") from None
        shards = {url.rsplit("/", 1)[-1]: url for url in urls}
        matched[revision] = SplitData(source, config, split, fingerprint, manifest, shards)
    return matched


def _decoded(data: SplitData, key: str, members: dict[str, bytes]) -> Sample:
    """The sample's JPEG (it must decode: the galleries show it as it is) and its checked json."""
    from PIL import Image

    where = f"sample {printable(key)} of --data {printable(data.source)}"
    if "jpg" not in members:
        raise ReportInputError(f"{where} has no jpg member: the data is not a composed set of this toolkit")
    try:
        meta = sample_json(members["json"]) if "json" in members else {}
    except SampleError as exc:
        raise ReportInputError(f"{where}: {exc}") from None
    try:
        with Image.open(io.BytesIO(members["jpg"])) as image:
            image.load()
            if image.format != "JPEG":
                raise ValueError(f"a {image.format} image")
            size = image.size
    except Exception as exc:  # any decoder failure: the galleries never show a broken image
        raise ReportInputError(
            f"{where}: its jpg member does not decode as a JPEG ({printable(str(exc))[:80]})"
        ) from None
    return Sample(key, members["jpg"], size, meta)


def read_samples(
    data: SplitData,
    wanted: dict[str, str],
    advance: Callable[[int], object] = lambda n: None,
    announce: Callable[[str], None] = lambda text: print(text, file=sys.stderr),
) -> dict[str, Sample]:
    """{key: Sample} of the `wanted` keys ({key: the shard the predictions name}), read from those
    shards only, each proved against the manifest first; one line for a shard the manifest does not
    list, a shard that fails its sha256, or a key its shard does not hold."""
    by_shard: dict[str, set[str]] = {}
    for key, shard in wanted.items():
        by_shard.setdefault(shard, set()).add(key)
    unlisted = sorted(name for name in by_shard if name not in data.shards)
    if unlisted:
        raise ReportInputError(
            f"the predictions name shard {printable(unlisted[0])}, which the manifest of --data "
            f"{printable(data.source)} ({data.config}/{data.split}) does not list: they were not made on this data"
        )
    urls = [data.shards[name] for name in sorted(by_shard)]
    first = urls[0].rsplit("/", 1)[0] if urls else ""
    try:
        local = verify_shards(urls, data.manifest, data.split, f"{first}/_info.json", announce)
    except ShardMismatch as exc:
        raise ReportInputError(f"--data {printable(data.source)}: {exc}") from None
    samples: dict[str, Sample] = {}
    for name in sorted(by_shard):
        keys = by_shard[name]
        try:
            for key, members in iter_tar_samples(local[data.shards[name]]):
                if key in keys and key not in samples:
                    samples[key] = _decoded(data, key, members)
                    advance(1)
        except (OSError, ValueError, StreamError) as exc:
            raise ReportInputError(f"shard {printable(name)} of --data {printable(data.source)}: {exc}") from None
        missing = sorted(keys - samples.keys())
        if missing:
            raise ReportInputError(
                f"the predictions name sample {printable(missing[0])} in shard {printable(name)}, which holds no such "
                f"sample in --data {printable(data.source)}: the predictions were not made on this data"
            )
    return samples


def source_text(data: SplitData) -> str:
    """How a page names the data source: an address as given, a folder by its name."""
    return data.source if "://" in data.source else Path(data.source).name
