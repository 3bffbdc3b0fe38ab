"""The card's "Results" section, rendered from `hsi eval` reports (eval.json), never pasted by hand.

`--results DIR` takes a model folder (holding eval.json) or an `hsi eval --out` folder (one
subfolder per model). A results folder is someone else's input: every eval.json is read through
`builder.core.untrusted` and checked field by field (one line naming the file and the field), no
link is followed (not the folder, a model folder, `plots/` nor the plot itself), and a plot must be
a PNG. Each report must belong to a config of the release and to the very build being released
(its data fingerprint equals the config's manifest fingerprint); otherwise the release is refused,
so a card never shows numbers measured on other data. A partial run (`hsi eval --limit`) is left
out of the card with a note: it is never shown as a full result, and never blocks a release.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from builder.core.errors import InputError, printable
from builder.core.names import UnsafeNameError, check_config_name
from builder.core.untrusted import Fields, UntrustedInput, check_integer, check_string, read_json, read_parquet
from evaluation.analysis.report import fmt

RESULTS_DIR = "results"
RELEASE_PLOT_SUFFIX = "_accuracy_vs_size.png"  # results/<model slug><suffix> in a release
EVAL_JSON = "eval.json"
PLOTS_FOLDER, MAIN_PLOT_NAME = "plots", "accuracy_vs_size.png"
MAIN_PLOT = f"{PLOTS_FOLDER}/{MAIN_PLOT_NAME}"
REPORT_SCHEMA = "hsi-eval/1"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SHA256 = re.compile(r"[0-9a-f]{64}")
PREDICTIONS_METADATA = b"hsi"  # where `hsi eval` and `hsi train` keep a predictions table's metadata


class ResultsError(InputError, ValueError):
    """A results folder that cannot go into the card; the message says why."""


@dataclass(frozen=True)
class ModelResult:
    folder: Path
    report: dict  # the fields the card shows, checked by read_report
    training: dict | None = None  # {method, seed}: a model trained by `hsi train` (from its predictions)

    @property
    def config(self) -> str:
        return self.report["data"]["config"]

    @property
    def spec(self) -> str:
        return self.report["model"]["spec"]

    @property
    def partial(self) -> bool:
        return self.report["data"]["partial"]

    @property
    def slug(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.config}_{self.folder.name}")


# ---------------------------------------------------------------- reading


def _estimate(fields: Fields, key: str) -> dict | None:
    if not fields.has(key):
        return None
    value = fields.object(key)
    return {k: value.number(k, None) for k in ("value", "low", "high")}


def read_report(path: Path) -> dict:
    """The fields of an eval.json the card shows, each checked (one line naming file and field)."""
    top = Fields(read_json(path, "eval report"), path)
    if top.raw("schema", None) != REPORT_SCHEMA:
        raise top.error(f"not an hsi eval report (schema is not {REPORT_SCHEMA!r}; write it with hsi eval)", "schema")
    model, data, pre = top.object("model"), top.object("data"), top.object("preprocessing")
    limit = data.integer("limit", None, low=1)
    config = data.string("config")
    try:
        check_config_name(config)
    except UnsafeNameError as exc:
        raise data.error(str(exc), "config") from None
    size = pre.list("input_size")
    if len(size) != 2:
        raise pre.error(f"expected [height, width], got {len(size)} values", "input_size")
    for n, side in enumerate(size):
        check_integer(side, lambda problem, n=n: pre.error(problem, f"input_size[{n}]"), low=1)
    metrics = top.object("metrics")
    summary = metrics.object("groups_summary", None)
    worst = summary.object("worst_group", None)
    return {
        "model": {
            "spec": model.string("spec"),
            "checkpoint": model.string("checkpoint", None),
            "checkpoint_sha256": model.string("checkpoint_sha256", None, pattern=SHA256),
        },
        "data": {
            "config": config,
            "split": data.string("split"),
            "fingerprint": data.string("fingerprint", None),
            "limit": limit,
            # older reports say only `limit`; a report that says `partial` is believed
            "partial": data.boolean("partial", None) if data.has("partial") else limit is not None,
        },
        "preprocessing": {
            "cropped": pre.boolean("cropped") if pre.has("cropped") else False,
            "crop_pct": pre.number("crop_pct", None, low=0, high=1),
            "input_size": list(size),
            "interpolation": pre.string("interpolation"),
        },
        "label_space": {"name": top.object("label_space").string("name")},
        "toolkit": {"version": top.object("toolkit").string("version")},
        "metrics": {
            "overall": {"top1": _estimate(metrics.object("overall", None), "top1")},
            "by_group": [
                {"group": row.string("group"), "top1": _estimate(row, "top1")} for row in metrics.objects("by_group")
            ]
            if metrics.has("by_group")
            else [],
            "groups_summary": {
                "groups": [
                    check_string(g, lambda problem, n=n: summary.error(problem, f"groups[{n}]"))
                    for n, g in enumerate(summary.list("groups") if summary.has("groups") else [])
                ],
                "mean_over_groups": _estimate(summary, "mean_over_groups"),
                "worst_group": (
                    {"group": worst.string("group"), **(_estimate(summary, "worst_group") or {})}
                    if summary.has("worst_group")
                    else None
                ),
            },
        },
        "predictions": top.object("files", None).string("predictions", None),
    }


def read_training(folder: Path, predictions: str | None) -> dict | None:
    """{method, seed} when the report's predictions were made by an `hsi train` run (it records them in
    the table's metadata), else None. The table is only looked at when it is a plain file of the folder."""
    import json

    if not predictions or "/" in predictions or predictions.startswith("."):
        return None
    path = folder / predictions
    if not path.is_file() or path.is_symlink():
        return None
    table = read_parquet(path, "predictions table")
    raw = (table.schema.metadata or {}).get(PREDICTIONS_METADATA)
    try:
        training = json.loads(raw).get("training") if raw else None
    except (ValueError, AttributeError):
        raise UntrustedInput(f"{printable(str(path))}: its hsi metadata is not a JSON object") from None
    if training is None:
        return None
    fields = Fields(training, path, "metadata.training")
    return {
        "method": fields.string("method"),
        "seed": fields.integer("seed"),
        # the weights the run kept, when the run records them (its checkpoint file and sha256)
        "checkpoint": fields.string("checkpoint", None),
        "checkpoint_sha256": fields.string("checkpoint_sha256", None, pattern=SHA256),
    }


def _reports_of(folder: Path) -> list[Path]:
    """The eval.json files a --results folder holds: its own, or one per model subfolder. A link is
    never followed into (one that would be read is refused)."""
    shown = printable(str(folder))
    if folder.is_symlink():
        raise ResultsError(f"--results {shown} is a link; links are never followed: pass the folder it leads to")
    if not folder.is_dir():
        raise ResultsError(f"--results {shown} is not a folder (give an hsi eval --out folder or a model folder)")
    own = folder / EVAL_JSON
    if own.exists() or own.is_symlink():
        return [own]
    reports = []
    for child in sorted(folder.iterdir()):
        report = child / EVAL_JSON
        if not (report.exists() or report.is_symlink()):
            continue
        if child.is_symlink():
            raise ResultsError(
                f"{printable(str(child))} is a link to a model folder; links are never followed into a release: "
                "replace it with the folder itself"
            )
        reports.append(report)
    if not reports:
        raise ResultsError(f"--results {shown}: no eval.json in it or in its subfolders (write them with hsi eval)")
    return reports


def load_results(dirs: list[Path]) -> list[ModelResult]:
    found = []
    for folder in dirs:
        for path in _reports_of(Path(folder)):
            report = read_report(path)
            found.append(ModelResult(path.parent, report, read_training(path.parent, report.pop("predictions"))))
    return found


def select_results(results: list[ModelResult], fingerprints: dict[str, str | None]) -> tuple[list[ModelResult], list]:
    """(the results the card shows, notes on those it leaves out). Each report must belong to a
    released config and its exact build (else the release is refused); a partial run is left out."""
    shown, notes = [], []
    for result in results:
        data = result.report["data"]
        if result.config not in fingerprints:
            raise ResultsError(
                f"results of {printable(result.spec)} are for config {result.config!r}, "
                f"which is not in this release ({sorted(fingerprints)})"
            )
        if data["fingerprint"] != fingerprints[result.config]:
            raise ResultsError(
                f"results of {printable(result.spec)} were measured on another build of "
                f"{result.config} (fingerprint {printable(str(data['fingerprint']))}, released "
                f"{fingerprints[result.config]}); re-run hsi eval"
            )
        if result.partial:
            limit = f"the first {data['limit']} samples" if data["limit"] else "part of the samples"
            notes.append(
                f"left {printable(result.folder.name)} out of the card's results: a partial evaluation ({limit}, "
                "hsi eval --limit); evaluate without --limit to show it"
            )
            continue
        shown.append(result)
    slugs = [r.slug for r in shown]
    twice = sorted({s for s in slugs if slugs.count(s) > 1})
    if twice:
        raise ResultsError(
            f"two results folders of the same name for one config ({', '.join(twice)}); give each model once"
        )
    return shown, notes


# ---------------------------------------------------------------- the plots


def _open_plot(folder: Path) -> int | None:
    """A read descriptor of `folder/plots/accuracy_vs_size.png`, each step opened without following a
    link (so nothing swapped in meanwhile is followed either); None when there is no plot."""
    no_link = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    opened: list[int] = []
    try:
        for name, flags, at in (
            (str(folder), os.O_RDONLY | os.O_DIRECTORY, None),
            (PLOTS_FOLDER, os.O_RDONLY | os.O_DIRECTORY, -1),
            (MAIN_PLOT_NAME, os.O_RDONLY, -1),
        ):
            try:
                opened.append(os.open(name, flags | no_link, dir_fd=opened[at] if at else None))
            except FileNotFoundError:
                return None
            except (NotADirectoryError, OSError) as exc:
                where = printable(str(folder / MAIN_PLOT if at else folder))
                raise ResultsError(
                    f"{where}: a link or not a plain {'file' if name == MAIN_PLOT_NAME else 'folder'} on the way to "
                    f"the plot ({exc.strerror}); a release copies no links: replace it with the real one"
                ) from None
        if not stat.S_ISREG(os.fstat(opened[-1]).st_mode):
            raise ResultsError(f"{printable(str(folder / MAIN_PLOT))} is not a regular file")
        return opened.pop()
    finally:
        for fd in opened:
            os.close(fd)


def copy_plots(results: list[ModelResult], staging: Path) -> dict[str, str]:
    """Copy each model's main plot into the release (never through a link, only a PNG); release-relative
    paths by slug."""
    copied = {}
    for result in results:
        fd = _open_plot(result.folder)
        if fd is None:
            continue
        with os.fdopen(fd, "rb") as source:
            data = source.read()
        if not data.startswith(PNG_SIGNATURE):
            raise ResultsError(f"{printable(str(result.folder / MAIN_PLOT))} is not a PNG image; it is not published")
        target = staging / RESULTS_DIR / f"{result.slug}{RELEASE_PLOT_SUFFIX}"
        target.parent.mkdir(exist_ok=True)
        with open(target, "xb") as handle:  # the staging folder is new: nothing is ever overwritten
            handle.write(data)
        copied[result.slug] = f"{RESULTS_DIR}/{target.name}"
    return copied


# ---------------------------------------------------------------- rendering


def _preprocessing(report: dict) -> str:
    pre = report["preprocessing"]
    return f"centre crop (crop_pct {pre['crop_pct']})" if pre["cropped"] else "canvas as is (no crop)"


def _weights(result: ModelResult) -> tuple[str, str]:
    """(weights, sha256) cells: what the report and the run's records say, never an empty cell."""
    model, training = result.report["model"], result.training or {}
    checkpoint = model["checkpoint"] or training.get("checkpoint")
    digest = model["checkpoint_sha256"] or training.get("checkpoint_sha256")
    sha = f"`{digest}`" if digest else "not recorded"
    if training:
        trained = f"trained with hsi train ({training['method']}, seed {training['seed']})"
        return (f"{checkpoint}, {trained}" if checkpoint else f"{trained}; its run records no checkpoint file"), sha
    if checkpoint:
        return checkpoint, sha
    return "the library's published weights of the spec", sha


def render_results(results: list[ModelResult], plots: dict[str, str], table: Callable) -> str:
    """The markdown of the Results section (`table` is the card's own table renderer)."""
    lines = [
        "Top-1 accuracy with 95% bootstrap intervals over source images, from `hsi eval` reports "
        "(rendered from their eval.json)."
    ]
    for config in sorted({r.config for r in results}):
        rows_of = sorted(
            (r for r in results if r.config == config),
            key=lambda r: -((r.report["metrics"]["groups_summary"]["worst_group"] or {}).get("value") or 0.0),
        )
        groups: list[str] = []
        for r in rows_of:
            groups += [g for g in r.report["metrics"]["groups_summary"]["groups"] if g not in groups]
        rows = []
        for r in rows_of:
            metrics = r.report["metrics"]
            by_group = {g["group"]: g["top1"] for g in metrics["by_group"]}
            summary = metrics["groups_summary"]
            worst = summary["worst_group"]
            rows.append(
                [
                    f"`{r.spec}`",
                    r.report["data"]["split"],
                    fmt(metrics["overall"]["top1"]),
                    *[fmt(by_group.get(g)) for g in groups],
                    fmt(summary["mean_over_groups"]),
                    f"{worst['group']} {fmt(worst)}" if worst else "n/a",
                ]
            )
        lines.append(
            f"### {config}\n\n" + table(["model", "split", "top-1", *groups, "mean over groups", "worst group"], rows)
        )
        details = []
        for r in rows_of:
            pre = r.report["preprocessing"]
            details.append(
                [
                    f"`{r.spec}`",
                    *_weights(r),
                    _preprocessing(r.report),
                    f"{pre['input_size'][0]}x{pre['input_size'][1]} {pre['interpolation']}",
                    r.report["label_space"]["name"],
                    r.report["toolkit"]["version"],
                ]
            )
        lines.append(table(["model", "weights", "sha256", "preprocessing", "input", "label space", "toolkit"], details))
        for r in rows_of:
            if r.slug in plots:
                alt = re.sub(r"[\[\]\s]+", " ", f"{r.spec} on {config}")
                lines.append(f"![{alt}]({plots[r.slug]})")
    return "\n\n".join(lines)
