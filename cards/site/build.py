"""`build_site`: read the eval folders, prove the data, draw, render, then write the site.

Everything is read, checked and rendered in memory before the first byte is written, so any
refusal (a link, a foreign eval.json, data of another fingerprint, a shard that fails its sha256,
a user's file where a page goes) leaves the output folder as it was. The folder is an
`OwnedFolder` of kind `report`: locked, nothing written through a link, never a user's file
replaced, and the files an earlier run wrote that this one does not are removed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from builder import __version__
from builder.core.errors import printable
from builder.core.names import check_split_name
from evaluation.orchestration.eval_folder import claimed

from .collect import ModelEval, ReportInputError, collect_evals, collect_failures, site_name
from .figures import accuracy_vs_size, png_bytes, position_heat_maps
from .gallery import GalleryCell, sample_gallery
from .pages import Board, index_page, model_page, published_section, sort_key
from .revision import Sample, SplitData, match_data, read_samples, source_text

REPORT_KIND = "report"  # the OwnedFolder kind of `hsi report --out`
INDEX = "index.html"


@dataclass(frozen=True)
class SiteSettings:
    data: tuple[str, ...] | list[str] = ()  # --data sources; none: a site without galleries
    seed: int = 0  # the galleries' sample
    errors: int = 8  # per group and size
    successes: int = 4
    progress: bool = True
    reference: str | None = None  # --reference: a published table shown apart, never ranked (paper)


@dataclass(frozen=True)
class SiteSummary:
    index: Path  # the leaderboard page
    models: int
    thumbnails: int
    galleries: bool  # False without --data


def _thumb_path(model: ModelEval, key: str) -> list[str]:
    """thumbs/<fingerprint>/<split>/<key>.jpg: one file per sample, shared by every model measured on it."""
    _, split, fingerprint = model.revision
    return [
        "thumbs",
        site_name(fingerprint, "data fingerprint"),
        check_split_name(split),
        site_name(f"{key}.jpg", "sample key"),
    ]


def _wanted(models: list[ModelEval], galleries: dict[str, list[GalleryCell]]) -> dict[tuple, dict[str, str]]:
    """{revision: {key: shard}} of every thumbnail shown; one sample named in two shards is refused."""
    wanted: dict[tuple, dict[str, str]] = {}
    for model in models:
        keys = wanted.setdefault(model.revision, {})
        for cell in galleries[model.slug]:
            for thumb in (*cell.errors, *cell.successes):
                site_name(thumb.key, "sample key")  # it names the thumbnail's file: checked before any shard is read
                if keys.setdefault(thumb.key, thumb.shard) != thumb.shard:
                    raise ReportInputError(
                        f"sample {printable(thumb.key)} is in shard {printable(keys[thumb.key])} for one evaluation "
                        f"and in {printable(thumb.shard)} for {printable(model.spec)}: they were not made on one data "
                        "revision"
                    )
    return wanted


def _check_labels(model: ModelEval, cells: list[GalleryCell], samples: dict[str, Sample]) -> None:
    """A thumbnail's true class is the one its sample's json names: otherwise the labels would lie."""
    for cell in cells:
        for thumb in (*cell.errors, *cell.successes):
            named = samples[thumb.key].meta.get("class_index")
            if named is not None and named != thumb.labels[0].index:
                raise ReportInputError(
                    f"{printable(str(model.folder))}: the predictions give sample {printable(thumb.key)} class "
                    f"{thumb.labels[0].index}, its json in the data class {named}: the predictions were not made on "
                    "this data"
                )


def _no_data_note(model: ModelEval) -> str:
    run = model.run
    return (
        "Failure galleries need the data this model was measured on: run hsi report again with --data SOURCE (the "
        f"release folder, composed dataset folder or hf:// address holding config {run['config']}, split "
        f"{run['split']}, fingerprint {run['fingerprint']}). The evaluation records its source only by name "
        f"({run['source']}), so the report does not guess where it is."
    )


def _boards(models: list[ModelEval], failures: list[tuple[tuple, dict]], files: dict[str, bytes]) -> list[Board]:
    """The leaderboards, one per data revision (of an evaluated or a failed model), with their figures
    added to `files`."""
    revisions = sorted(
        {m.revision for m in models} | {revision for revision, _ in failures}, key=lambda r: tuple(str(v) for v in r)
    )
    boards = []
    for n, revision in enumerate(revisions, start=1):
        members = sorted((m for m in models if m.revision == revision), key=sort_key)
        names = {}
        for kind, data in (
            ("accuracy_vs_size", accuracy_vs_size(members)),
            ("position_size_heatmaps", position_heat_maps(members)),
        ):
            if data is not None:
                names[kind] = f"leaderboard/board-{n}-{kind}.png"
                files[names[kind]] = png_bytes(data)
        failed = tuple(record for where, record in failures if where == revision)
        boards.append(
            Board(revision, members, names.get("accuracy_vs_size"), names.get("position_size_heatmaps"), failed)
        )
    return boards


def _read_thumbnails(
    models: list[ModelEval], galleries: dict, data: dict[tuple, SplitData], progress: bool
) -> dict[tuple, dict[str, Sample]]:
    """{revision: {key: Sample}} of every thumbnail the galleries show, each checked against its row."""
    from tqdm import tqdm

    wanted = _wanted(models, galleries)
    samples: dict[tuple, dict[str, Sample]] = {}
    total = sum(len(keys) for keys in wanted.values())
    with tqdm(total=total, desc="report: thumbnails", unit="img", disable=not progress, file=sys.stderr) as bar:
        for revision, keys in wanted.items():
            samples[revision] = read_samples(data[revision], keys, bar.update)
    for model in models:
        _check_labels(model, galleries[model.slug], samples[model.revision])
    return samples


def _model_files(model: ModelEval, gallery: list[GalleryCell] | None, samples: dict[str, Sample], data, generator):
    """{site path: bytes} of one model: its page, its plots, its thumbnails (shared ones are the same bytes)."""
    files = {f"models/{model.slug}/plots/{name}": png for name, png in model.plots}
    thumbs = {}
    for key, sample in samples.items():
        path = _thumb_path(model, key)
        files["/".join(path)] = sample.jpg
        thumbs[key] = ["..", "..", *path]
    note = None if gallery is not None else _no_data_note(model)
    source = source_text(data) if data is not None else None
    page = model_page(model, gallery, thumbs, note, source, generator)
    files[f"models/{model.slug}/{INDEX}"] = page.encode("utf-8")
    return files


def build_site(eval_dirs: list[Path], out: Path, settings: SiteSettings = SiteSettings()) -> SiteSummary:
    """The site of `eval_dirs` in `out` (see cards.site)."""
    generator = f"built by hsi report (hard-spurious-imagenet {__version__})"
    published = None
    if settings.reference is not None:  # an unknown name is refused before the site is claimed
        from evaluation.ranking.published import published_runs

        published = published_section(published_runs(settings.reference), settings.reference)
    with claimed(Path(out), REPORT_KIND) as owned:
        models = collect_evals(eval_dirs, settings.progress)
        data = match_data(models, list(settings.data)) if settings.data else {}
        galleries = {
            m.slug: sample_gallery(m.predictions, settings.seed, settings.errors, settings.successes) for m in models
        }
        samples = _read_thumbnails(models, galleries, data, settings.progress) if data else {}
        files: dict[str, bytes] = {}
        for model in models:
            shown = galleries[model.slug] if data else None
            split = data.get(model.revision)
            files.update(_model_files(model, shown, samples.get(model.revision, {}), split, generator))
        boards = _boards(models, collect_failures(eval_dirs), files)
        files[INDEX] = index_page(boards, generator, published).encode("utf-8")
        for relative in files:  # refuse a link or a user's file on the way before writing anything
            owned.path(relative)
        for relative, payload in files.items():
            owned.write_bytes(relative, payload)
        owned.remove_listed("", keep=set(files))
        thumbnails = sum(1 for name in files if name.startswith("thumbs/"))
        return SiteSummary(owned.root / INDEX, len(models), thumbnails, bool(data))
