"""The release's `parts` config on the card: the parts `hsi extract` wrote, shipped so that anyone can
compose new positions and sizes from a published release (`hsi compose --parts RELEASE`) without
ImageNet or a GPU.

`PartsSummary` is what the card is rendered from (the parts manifest only: shards are never rescanned);
`parts_features` the features `load_dataset(RELEASE, "parts")` declares; `parts_section` the card's
section; `fill_scores_table` the fill-score summary of a manifest's split (the parts', and a composed
config's backgrounds when its compose manifest carries one in the same shape)."""

from __future__ import annotations

from dataclasses import dataclass

from builder.core import markdown
from builder.formats.fill_scores import SCORE_NAMES

PARTS_CONFIG = "parts"  # the config name of the parts in every release; no composed config may take it
PARTS_DATA_DIR = f"data/{PARTS_CONFIG}"


@dataclass(frozen=True)
class PartsSummary:
    """What the card says about the release's parts, read from the parts manifest."""

    manifest: dict

    @property
    def splits(self) -> list[str]:
        return sorted(self.manifest["splits"])

    def data_files(self, split: str) -> list[str]:
        return [f"{PARTS_DATA_DIR}/{name}" for name in self.manifest["splits"][split]["filenames"]]

    def num_samples(self, split: str | None = None) -> int:
        splits = [split] if split else self.splits
        return sum(self.manifest["splits"][s]["num_samples"] for s in splits)

    def num_bytes(self, split: str | None = None) -> int:
        splits = [split] if split else self.splits
        return sum(shard["bytes"] for s in splits for shard in self.manifest["splits"][s]["shards"])

    def mb_per_1000(self) -> float | None:
        """Megabytes (10^6 bytes) of shards per 1,000 parts, measured from the shards' bytes."""
        count = self.num_samples()
        return self.num_bytes() / count * 1000 / 1e6 if count else None


def _box_feature():
    from datasets import Value

    return {
        "x0": Value("int64"),
        "y0": Value("int64"),
        "x1": Value("int64"),
        "y1": Value("int64"),
        "wnid": Value("string"),
    }


def _backend_feature():
    from datasets import Value

    return {"name": Value("string"), "checkpoint": Value("string"), "checkpoint_sha256": Value("string")}


def parts_features():
    """The declared `datasets` features of the parts config: every member of a schema-2 part (the
    PNGs as images, canvas.npy as a 224 x 224 x 3 uint8 array, cls as the class index) and the json's
    fixed fields (its backends' free-form `params` are in the shard's json, not in these columns)."""
    from datasets import Array3D, Features, Image, List, Value

    from builder.formats.parts import PARTS_CANVAS_SIZE

    integer, text = Value("int64"), Value("string")
    side = PARTS_CANVAS_SIZE
    return Features(
        {
            "__key__": text,
            "background.png": Image(),
            "canvas.npy": Array3D(shape=(side, side, 3), dtype="uint8"),
            "cls": integer,
            "crop.png": Image(),
            "erase.png": Image(),
            "fill.png": Image(),
            "json": {
                "schema_version": integer,
                "source_id": text,
                "wnid": text,
                "class_index": integer,
                "class_name": text,
                "width": integer,
                "height": integer,
                "boxes": List(_box_feature()),
                "object_box_index": integer,
                "object_box": List(integer),
                "object_box_rule": text,
                "crop_box": List(integer),
                "conversions": List(text),
                "provenance": {
                    "backends": {"masker": _backend_feature(), "inpainter": _backend_feature()},
                    "dilation": integer,
                    "tool_version": text,
                },
                "fill_scores": {name: Value("float64") for name in SCORE_NAMES},
                "background_status": text,
            },
            "mask.png": Image(),
        }
    )


def _number(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def fill_scores_table(summary: dict | None) -> str | None:
    """A split's fill-score summary (builder.formats.fill_scores.summarise_fill_scores) as a table:
    median and p10 of texture, seam, step and score, and the share under the poor-score threshold.
    None when the manifest carries no summary."""
    if not isinstance(summary, dict):
        return None
    rows = []
    for name in SCORE_NAMES:
        quantiles = summary.get(name) if isinstance(summary.get(name), dict) else {}
        rows.append([name, _number(quantiles.get("median")), _number(quantiles.get("p10"))])
    share = summary.get("share_below_poor_score")
    text = markdown.table(["score", "median", "p10"], rows, none="n/a")
    poor = f"{share:.1%}" if isinstance(share, (int, float)) else "n/a"
    return (
        text + f"\n\n{summary.get('scored', 0)} backgrounds scored, {summary.get('unscored', 0)} with nothing filled; "
        f"{poor} score under the poor-fill threshold {summary.get('poor_score', 'n/a')}."
    )


def fill_scores_cell(summary: dict | None) -> str:
    """A split's fill scores in one table cell: the median score and the share of poor fills."""
    if not isinstance(summary, dict):
        return ""
    score = summary.get("score") if isinstance(summary.get("score"), dict) else {}
    share = summary.get("share_below_poor_score")
    poor = f"{share:.0%}" if isinstance(share, (int, float)) else "n/a"
    return f"median score {_number(score.get('median'))}, {poor} under {summary.get('poor_score', 'n/a')}"


SCORES_MEANING = (
    "Fill scores are no-reference measures of each inpainted background on the 224 px canvas "
    "(`builder/formats/fill_scores.py`): `texture` (under 1: the fill is smoother than the photo around it), "
    "`seam` (above 1: an edge runs around the fill), `step` (the colour jump across its border; 0 when the "
    "colours meet) and `score` = min(1, texture) x min(1, 1 / seam) / (1 + step), in [0, 1] (1: these measures "
    "cannot tell the fill from the photo; 0: the background is all fill)."
)


def parts_section(parts: PartsSummary, name: str, license_text: str) -> str:
    """The card's section on the parts config (its `## parts` heading included)."""
    mb = parts.mb_per_1000()
    cost = (
        f"{parts.num_samples():,} parts in {parts.num_bytes() / 1e6:.1f} MB of shards: "
        + (f"**{mb:.1f} MB per 1,000 parts**" if mb is not None else "no parts")
        + " (measured from the shards' bytes, the full-resolution backgrounds most of it)."
    )
    split_rows = [[s, parts.num_samples(s), len(parts.manifest["splits"][s]["shards"])] for s in parts.splits]
    blocks = [
        f"## {PARTS_CONFIG}\n\nThe parts `hsi extract` wrote for every source image, shipped as a config of "
        "their own: the shards byte for byte as extract wrote them, with the parts manifest "
        f"(`{PARTS_DATA_DIR}/_info.json`, every shard's sha256) beside them.",
        "**What a part is.** One row per source image: `crop.png` (the object's box region), `mask.png` "
        "(the object mask within the crop), `erase.png` (the dilated mask that was erased) and `fill.png` "
        "(the pixels the inpainter replaced), `background.png` (the photo at its own resolution with every box "
        "erased and inpainted), `canvas.npy` (that background resized to the 224 px canvas, uint8), `cls` (the "
        "ImageNet class index) and `json` (the image's boxes, the object box, provenance: masker, inpainter, "
        "checkpoints and their sha256, and the fill scores of its background).",
        "**What it is for.** Regenerate the benchmark with other positions or sizes on a laptop: compose runs "
        "on a CPU in minutes, needs neither ImageNet nor a GPU, and gives the bytes the original parts folder "
        "would give:",
        "```bash\n"
        f"hsi compose --parts hf://datasets/ORG/{name}@REVISION --positions bottom-left --sizes 40 --out OUT\n"
        f"hsi compose --parts {name} --variant hard-spurious-imagenet-ar --out OUT   # a local copy of the release\n"
        "```",
        "Every shard is checked against the parts manifest's sha256 before compose reads it. In Python: "
        f'`load_dataset("{name}", "{PARTS_CONFIG}", split="{parts.splits[0] if parts.splits else "val"}")` '
        "gives one row per part (the json's fixed fields; the shard's json also holds each backend's "
        "parameters).",
        "**What it costs.** " + cost,
        markdown.table(["split", "parts", "shards"], split_rows, none="n/a"),
    ]
    scores = [(s, fill_scores_table(parts.manifest["splits"][s].get("fill_scores"))) for s in parts.splits]
    scored = [(s, t) for s, t in scores if t]
    if scored:
        blocks.append("### Fill scores of the parts' backgrounds\n\n" + SCORES_MEANING)
        blocks += [f"**{s}**\n\n{t}" for s, t in scored]
    else:
        blocks.append("The parts manifest carries no fill-score summary (parts of schema 1).")
    blocks.append(f"**Terms.** {license_text}")
    return "\n\n".join(blocks)
