"""The card's SCGS parts: for a config written by `hsi scgs`, a preview sheet (source | Grad-CAM++ |
keep-mask | generated, one row per generated image), the label-check figure (per class: the share of
generated images the label check agrees with and the share kept), and the card section that says
how the images were made. Everything is read from the config's manifest and shards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from builder.core.errors import InputError
from builder.core.folders import SCGS_LABEL_CHECK_NAME, SCGS_PREVIEW_NAME
from builder.core.manifest import Manifest
from builder.core.shard_read import iter_shard
from builder.formats.augmented import decode_augment_json, decode_cam, decode_keep_mask, is_generated
from builder.formats.composites import decode_composite_pixels

COLUMNS = ("source", "Grad-CAM++", "keep-mask", "generated")


def is_scgs(manifest: dict) -> bool:
    return manifest.get("stage") == "scgs" and isinstance(manifest.get("augment"), dict)


def jet(values: np.ndarray) -> np.ndarray:
    """The usual jet colour map (blue -> cyan -> yellow -> red) of values in [0, 1], uint8 RGB."""
    v = np.clip(values, 0, 1)[..., None]
    rgb = np.clip(np.concatenate([1.5 - np.abs(4 * v - 3), 1.5 - np.abs(4 * v - 2), 1.5 - np.abs(4 * v - 1)], -1), 0, 1)
    return (rgb * 255).astype(np.uint8)


def preview_rows(folder: Path, rows: int) -> list[tuple[dict, list[np.ndarray]]]:
    """The first `rows` generated samples (by key) with their source, CAM, mask and image."""
    manifest = Manifest.read(folder)
    sources, generated = {}, []
    for path in manifest.shard_paths(folder, "train"):
        for key, members in iter_shard(path):
            if is_generated(members):
                generated.append((key, members))
            else:
                sources[key] = members["jpg"]
    out = []
    for _, members in sorted(generated, key=lambda item: item[0])[:rows]:
        block = decode_augment_json(members)
        source = decode_composite_pixels(sources[block["source_key"]])
        mask = np.repeat(decode_keep_mask(members["mask.png"])[..., None] * np.uint8(255), 3, axis=2)
        out.append(
            (block, [source, jet(decode_cam(members["cam.png"])), mask, decode_composite_pixels(members["jpg"])])
        )
    return out


def preview_sheet(folder: Path, out_path: Path, rows: int = 8, thumb: int = 112) -> Path:
    items = preview_rows(folder, rows)
    label_height, margin = 14, 4
    width = len(COLUMNS) * (thumb + margin) + margin
    height = label_height + len(items) * (thumb + label_height + margin) + margin
    sheet = Image.new("RGB", (width, max(height, label_height + margin)), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for c, name in enumerate(COLUMNS):
        draw.text((margin + c * (thumb + margin), 1), name, fill=(0, 0, 0))
    for r, (block, images) in enumerate(items):
        top = label_height + r * (thumb + label_height + margin)
        caption = (
            f"{block['true_class_name']} (predicted {block['predicted_class_name']}), "
            f"{block['mask']} mask {100 * block['mask_area_fraction']:.0f}%, "
            f"check {'agrees' if block['label_check']['agrees'] else 'disagrees'}"
        )
        draw.text((margin, top), caption[: width // 6], fill=(0, 0, 0))
        for c, image in enumerate(images):
            tile = Image.fromarray(image).resize((thumb, thumb), Image.Resampling.NEAREST)
            sheet.paste(tile, (margin + c * (thumb + margin), top + label_height))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out_path, format="PNG")
    return out_path


def label_check_figure(manifest: dict, out_path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_class = manifest["augment"]["label_check"]["per_class"]
    names = list(per_class)
    agree = [per_class[n]["agree_share"] or 0 for n in names]
    kept = [per_class[n]["kept_share"] or 0 for n in names]
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(names) + 2), 3), dpi=100)
    ax.bar(x - 0.2, agree, 0.4, label="label check agrees")
    ax.bar(x + 0.2, kept, 0.4, label=f"kept (--keep {manifest['augment']['keep']})")
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of generated images")
    ax.set_title(f"{manifest['config']}: label check per true class", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, format="png", metadata={"Software": None})
    plt.close(fig)
    return out_path


def write_scgs_previews(folder: Path) -> list[Path]:
    """The preview sheet and the label-check figure under `folder/previews/`, which releases copy."""
    folder = Path(folder)
    previews = folder / "previews"
    if previews.is_symlink():  # the sheets would be drawn outside the folder, over whatever is there
        raise InputError(f"{previews} is a link: the SCGS sheets are drawn only into a real folder; remove the link")
    manifest = Manifest.read(folder).to_json()
    return [
        preview_sheet(folder, previews / SCGS_PREVIEW_NAME),
        label_check_figure(manifest, previews / SCGS_LABEL_CHECK_NAME),
    ]


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def scgs_section(manifest: dict) -> str | None:
    """The card's "SCGS augmentation" section of a config written by `hsi scgs` (None for others)."""
    if not is_scgs(manifest):
        return None
    from builder.core.markdown import table

    summary, backends = manifest["augment"], manifest.get("backends") or {}
    options = (manifest.get("settings") or {}).get("options") or {}
    generation = (manifest.get("settings") or {}).get("generation") or {}
    generator, classifier = backends.get("generator") or {}, backends.get("classifier") or {}
    checks = summary["label_check"]
    rows = [
        [
            name,
            summary["per_class"].get(name, {}).get("misclassified", 0),
            summary["per_class"].get(name, {}).get("sampled", 0),
            row["generated"],
            _pct(row["agree_share"]),
            row["kept"],
            _pct(row["kept_share"]),
        ]
        for name, row in checks["per_class"].items()
    ]
    overall = checks["overall"]
    rows.append(
        [
            "all",
            summary["misclassified"],
            summary["sampled_images"],
            overall["generated"],
            _pct(overall["agree_share"]),
            overall["kept"],
            _pct(overall["kept_share"]),
        ]
    )
    mask_words = {
        "cam": "the Grad-CAM++ mask of the predicted (wrong) class",
        "random": "a control: random low-passed blobs with exactly the CAM mask's pixel count",
        "shifted": "a control: the CAM mask rolled by a seeded random offset",
        "none": "a control: no mask, the whole image regenerated at the same strength",
    }
    lines = [
        f"The train split of `{summary['source_config']}` plus {overall['kept']} generated images; val and test are "
        f"the source's shards, unchanged. {summary['method']} ({summary['misclassified']} of "
        f"{summary['train_samples']} train samples misclassified, ERM train accuracy "
        f"{_pct(summary['erm_train_accuracy'])}). Keep-mask: {mask_words.get(summary['mask'], summary['mask'])}, "
        f"threshold {summary['threshold']}.",
        "",
        f"- ERM model: `{classifier.get('spec')}` (checkpoint sha256 `{classifier.get('checkpoint_sha256')}`), "
        f"CAM layer `{(backends.get('cam') or {}).get('layer')}`",
        f"- Inpainting: `{generator.get('model_id')}` (weights sha256 `{generator.get('weights_sha256')}`), "
        f"{generation.get('steps')} steps, guidance {generation.get('guidance')}, strength "
        f"{generation.get('strength')}, prompt `{generation.get('prompt_template')}`, negative prompt "
        + (f"`{generation['negative_prompt']}`" if generation.get("negative_prompt") else "none")
        + f", kept pixels pasted back: {generation.get('paste_back')}",
        f"- Sampling: {options.get('clusters')} k-means clusters per class, fraction {options.get('fraction')}, "
        f"{options.get('per_image')} image(s) per sampled image, seed {options.get('seed')}, "
        f"label check `--keep {summary['keep']}`",
        "- Generated samples hold, beside `jpg`, `cls` and `json` (copied from the source sample, `variant` "
        "set to this config): `augment.json` (source key, true and predicted class, mask kind and area, "
        "SD model and weights sha256, prompt, seed, label check), `mask.png` (255 = kept source pixels) "
        "and `cam.png` (the Grad-CAM++ map); their keys are `<source key>_scgs<j>`",
        "",
        table(
            ["true class", "misclassified", "sampled", "generated", "check agrees", "kept", "kept share"],
            rows,
            none="None",
        ),
    ]
    return "### SCGS augmentation\n\n" + "\n".join(lines)
