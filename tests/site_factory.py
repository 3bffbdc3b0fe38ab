"""What the report-site tests share (tests/ is on sys.path): the paper's config composed from flat
parts, two planted predictors evaluated on it by `hsi eval`, `hsi report` runs, and readers of the
pages a test checks against the predictions.

    from site_factory import shared_evaluation, evaluate_paired_set, report, thumbnails

`shared_evaluation` is built once per test session, and once only under pytest-xdist too (the
first worker builds it under a lock, the others read it), so the site tests, the browser test and
the adversarial tests share one dataset and one `hsi eval` folder: a test that alters an input
alters a copy.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from parts_factory import compose_quietly, write_parts

from hsi.cli import main

# the planted predictors and the eval command line live with the evaluation tests
EVALUATION_TESTS = str(Path(__file__).parent / "evaluation")
if EVALUATION_TESTS not in sys.path:
    sys.path.append(EVALUATION_TESTS)

from eval_cli import eval_args  # noqa: E402
from planted import flat_images, save_planted  # noqa: E402

CORNER, FINDER = "ts_planted_corner.pt", "ts_planted_finder.pt"  # the model folders hsi eval names


@dataclass(frozen=True)
class Evaluation:
    dataset: Path  # the composed dataset folder (what --data names)
    evals: Path  # the hsi eval --out folder: the corner rule and the object finder
    root: Path


def evaluate_paper_set(root: Path) -> Evaluation:
    """6 flat images composed into the paper's config (72 composites in 3 shards), both planted
    predictors evaluated on it (the corner rule errs on every CoR sample, the finder never)."""
    images = flat_images()
    write_parts(root / "parts", {"val": images}, shard_size=3)
    dataset = compose_quietly(
        root / "parts", "hard-spurious-imagenet", root / "composed", overrides={"shard_size": 24}
    ).dataset_dir
    corner = save_planted(root / "planted_corner.pt", images, background_on_corner=True)
    finder = save_planted(root / "planted_finder.pt", images, background_on_corner=False)
    args = eval_args(dataset, f"ts:{corner},ts:{finder}", root / "evals", "--split", "val", bootstrap=50)
    assert main(args) == 0
    return Evaluation(dataset, root / "evals", root)


def evaluate_paired_set(root: Path) -> Evaluation:
    """The -10 config (paired backgrounds) at one size from 2 flat images per class, the corner rule
    evaluated on its test split: every sample names its paired class."""
    from builder.compose.spec import load_variant

    classes = sorted(dict(load_variant("hard-spurious-imagenet-10").subset.pairs))
    images = flat_images(classes, per_class=2)
    write_parts(root / "parts", {"val": images}, shard_size=8)
    dataset = compose_quietly(
        root / "parts",
        "hard-spurious-imagenet-10",
        root / "composed",
        overrides={"sizes": "56", "positions": "center,top-right", "shard_size": 30},
    ).dataset_dir
    corner = save_planted(root / "planted_corner.pt", images, background_on_corner=True)
    assert main(eval_args(dataset, f"ts:{corner}", root / "evals", bootstrap=20)) == 0
    return Evaluation(dataset, root / "evals", root)


def shared_evaluation(tmp_path_factory) -> Evaluation:
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the session's, for every worker
    done = shared / "site-evaluation.json"
    with open(shared / "site-evaluation.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.is_file():
            root = shared / "site-evaluation"
            root.mkdir()
            made = evaluate_paper_set(root)
            done.write_text(json.dumps({"dataset": str(made.dataset), "evals": str(made.evals), "root": str(root)}))
    paths = json.loads(done.read_text())
    return Evaluation(Path(paths["dataset"]), Path(paths["evals"]), Path(paths["root"]))


def report(*eval_dirs, out, data=None, extra=()) -> int:
    """`hsi report EVAL_DIR... --out OUT [--data DATA] --no-progress EXTRA...`."""
    data_flags = (
        []
        if data is None
        else [flag for d in ([data] if isinstance(data, (str, Path)) else data) for flag in ("--data", str(d))]
    )
    return main(["report", *map(str, eval_dirs), "--out", str(out), *data_flags, "--no-progress", *extra])


class _Thumbnails(HTMLParser):
    """The gallery figures of a model page: key, kind, image source and each label's name and p."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[dict] = []
        self.stack: list[str] = []  # the class of each open span inside a figure
        self.current: dict | None = None
        self.label: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "figure" and "thumb" in classes:
            kind = "error" if "error" in classes else "success"
            self.current = {"key": attrs["data-key"], "kind": kind, "src": None, "labels": {}}
        elif self.current is not None and tag == "img":
            self.current["src"] = attrs["src"]
        elif self.current is not None and tag == "span":
            if "label" in classes:
                self.label = classes[1]
                self.current["labels"][self.label] = {"name": "", "p": None}
            self.stack.append(classes[0] if classes else "")

    def handle_endtag(self, tag):
        if tag == "figure" and self.current is not None:
            self.found.append(self.current)
            self.current = None
        elif tag == "span" and self.current is not None and self.stack:
            if self.stack.pop() == "label":
                self.label = None

    def handle_data(self, data):
        if self.current is None or self.label is None or not self.stack:
            return
        entry = self.current["labels"][self.label]
        if self.stack[-1] == "name" and len(self.stack) >= 2:
            entry["name"] += data
        elif self.stack[-1] == "p":
            entry["p"] = data


def thumbnails(page: Path) -> list[dict]:
    """[{key, kind ('error'/'success'), src, labels: {role: {name, p}}}] of a model page's galleries."""
    parser = _Thumbnails()
    parser.feed(page.read_text("utf-8"))
    return parser.found


def checked_model_eval(path: Path, folder: Path, predictions):
    """The site's ModelEval of the eval.json at `path` for the model folder `folder` (its predictions
    the DataFrame `predictions`, no plots), read by the checks the site reads it with: HsiError when
    they refuse it."""
    from cards.site.collect import ModelEval
    from evaluation.ranking.eval_reader import checked_report
    from evaluation.ranking.leaderboard import leaderboard_row
    from evaluation.ranking.report_fields import checked_metrics, checked_run

    report_json = checked_report(path)
    return ModelEval(
        1,
        folder,
        report_json,
        checked_run(report_json, path),
        checked_metrics(report_json, path),
        leaderboard_row(report_json, folder.name),
        predictions,
        [],
    )
