"""`hsi build`: ImageNet on disk to a versioned release in one command, by calling the stages in
order (extract, compose, validate with the parts, release with the parts config).

A composition only: each stage keeps its own resume rule (extract and compose reuse finished shards
and skip a finished output; a passing validation of the same dataset and a release of the same
version and inputs are kept), so running the same command again continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from builder.core.stage import RunOptions
from builder.extract.shard_builder import ExtractConfig

DEFAULT_VARIANT = "hard-spurious-imagenet"
STAGES = 4


@dataclass(frozen=True)
class BuildRequest:
    source: Path
    out: Path
    version: str
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    variants: Sequence[str] = (DEFAULT_VARIANT,)
    boxes: Path | None = None
    release_name: str = DEFAULT_VARIANT
    options: RunOptions = field(default_factory=RunOptions)

    @property
    def parts_dir(self) -> Path:
        return self.out / "parts"

    @property
    def datasets_root(self) -> Path:
        return self.out / "datasets"

    @property
    def release_dir(self) -> Path:
        return self.out / self.release_name


@dataclass
class BuildResult:
    extract: object  # builder.extract.stage.ExtractSummary
    composed: list = field(default_factory=list)  # builder.compose.stage.ComposeSummary, one per variant
    reports: list = field(default_factory=list)  # validation.report.ValidationReport or None (kept)
    release_dir: Path | None = None


def stage_line(number: int, name: str, text: str) -> str:
    return f"[{number}/{STAGES}] {name}: {text}"


def run_build(request: BuildRequest, say: Callable[[str], None] = print) -> BuildResult:
    """Run the four stages; `say` gets one line per stage. A failed validation stops the build
    before the release (RunFailed, exit 1) and names its report."""
    from builder.compose.stage import compose_dataset
    from builder.core.errors import RunFailed
    from builder.extract.stage import run_extract
    from cards.release import build_release

    check_request(request)
    extract = run_extract(request.source, request.out, request.extract, request.boxes, options=request.options)
    problems = sum(extract.issues_by_reason.values())
    say(
        stage_line(
            1,
            "extract",
            f"{extract.samples} parts of {extract.images_listed} images in {extract.parts_dir} "
            f"({extract.shards_built} shards built, {extract.shards_reused} reused"
            + (f"; {problems} input problems in errors.jsonl" if problems else "")
            + ")",
        )
    )
    result = BuildResult(extract)

    for variant in request.variants:
        result.composed.append(
            compose_dataset(extract.parts_dir, variant, request.datasets_root, options=request.options)
        )
    say(
        stage_line(
            2,
            "compose",
            "; ".join(
                f"{c.dataset_dir} ({sum(s['num_samples'] for s in c.manifest['splits'].values())} composites, "
                f"{c.reused_shards} shards reused)"
                for c in result.composed
            ),
        )
    )

    lines = []
    for composed in result.composed:
        report = validated(composed.dataset_dir, extract.parts_dir, request.options.workers)
        result.reports.append(report)
        if report is not None and not report.ok:
            raise RunFailed(
                f"validation of {composed.dataset_dir} failed: see {report.md_path}; the release is not built"
            )
        lines.append(f"{composed.dataset_dir.name} " + ("passed" if report is not None else "passed earlier, kept"))
    say(stage_line(3, "validate", "; ".join(lines) + " (with the parts)"))

    datasets = [c.dataset_dir for c in result.composed]
    if release_is_current(request.release_dir, request.version, datasets, extract.parts_dir):
        say(stage_line(4, "release", f"{request.release_dir} {request.version} is current, kept"))
        result.release_dir = request.release_dir
        return result
    result.release_dir = build_release(
        request.release_dir,
        datasets,
        overwrite=request.release_dir.exists(),  # build_release replaces only a release folder
        version=request.version,
        parts_dir=extract.parts_dir,
        announce=lambda note: say(f"note: {note}"),
    )
    say(stage_line(4, "release", f"{result.release_dir} {request.version}, with the parts config"))
    return result


def check_request(request: BuildRequest) -> None:
    """Everything refusable before the first write: the runner, the version, every variant spec."""
    from builder.compose.spec import load_variant
    from cards.release import parse_version

    request.options.check()
    parse_version(request.version)
    for variant in request.variants:
        load_variant(variant)


def validated(dataset_dir: Path, parts_dir: Path, workers: int):
    """Validate `dataset_dir` with its parts, unless a passing report of this very dataset (its
    fingerprint and shards, as `hsi release` checks them) is already there: then None."""
    from builder.core.errors import HsiError
    from builder.core.locks import exclusive_folder
    from cards.release import load_release_input
    from validation.report import validate_dataset

    try:
        load_release_input(dataset_dir)
        return None
    except HsiError:
        with exclusive_folder(dataset_dir):  # the lock `hsi validate` takes: no compose or validate writes it meanwhile
            return validate_dataset(dataset_dir, parts_dir=parts_dir, workers=workers)


def release_is_current(release_dir: Path, version: str, datasets: list[Path], parts_dir: Path) -> bool:
    """Whether `release_dir` is already the release of this version from these very inputs (the
    fingerprint of every composed config and of the parts)."""
    from builder.core.errors import HsiError
    from builder.core.manifest import Manifest
    from cards.parts_card import PARTS_CONFIG
    from cards.release import read_release_meta

    try:
        record = read_release_meta(release_dir)
        if record is None or record.get("version") != version:
            return False
        wanted = {Manifest.read(d).config: Manifest.read(d).fingerprint for d in datasets}
        wanted[PARTS_CONFIG] = Manifest.read(parts_dir).fingerprint
    except HsiError:
        return False
    recorded = {name: entry.get("fingerprint") for name, entry in record["configs"].items()}
    return recorded == wanted


def next_steps(release_dir: Path, version: str, split: str) -> str:
    """How to load, regenerate from, check and publish the release just built."""
    release, parent = release_dir.name, release_dir.parent
    return "\n".join(
        [
            "next:",
            f'  load it       cd {parent} && python -c "from datasets import load_dataset; '
            f"print(load_dataset('{release}', split='{split}'))\"",
            f"  regenerate    hsi compose --parts {release_dir} --positions top-left,bottom-right "
            f"--out {parent / 'datasets'}",
            f"  check it      hsi verify {release_dir} --version {version}",
            f"  publish       hsi publish {release_dir} --version {version} --repo ORG/NAME   (a dry run; add --yes)",
        ]
    )
