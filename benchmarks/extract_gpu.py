"""Extract speed on one device: images/s of SAM + LaMa over a batch-size sweep, and where the time goes.

    python benchmarks/extract_gpu.py                       # GPU: SAM vit_h, ImageNet-sized images
    python benchmarks/extract_gpu.py --lama-checkpoint big-lama.pt --trust-file SHA256   # also time big-lama
    python benchmarks/extract_gpu.py --device cpu --images 2 --sizes small --sam-model vit_b --batch-sizes 1,2

What is measured, per batch size, over the same synthetic images (seeded gradients and noise,
JPEG-encoded at ImageNet's common sizes, 500 x 375 and friends, one or two boxes each):
  decode   JPEG bytes -> RGB (PIL), as extract's decode does
  sam_enc  SAM's upload, resize, normalise and pad on the device, and its image encoder, batched
  sam_dec  prompt encoder + mask decoder (every box of the batch in one call) + upscaling to full size
  lama     big-lama on the dilated union mask at full resolution, batched by padded size
  encode   the parts members (crop, mask, background, erase PNGs and the canvas-sized background)
Model stages are timed with CUDA synchronisation. decode and encode are CPU work that extract runs
in I/O threads beside the models (decoding batches ahead, encoding parts behind), so two rates are
printed: `serial` (every stage one after the other) and `model` (the model stages only: the rate a
GPU fed by enough CPU threads can sustain).

Weights: none can be downloaded where this runs, and speed does not depend on weight values, so SAM
is segment-anything's real architecture, randomly initialised (`sam_model_registry[...]()`), unless
--sam-checkpoint is given. No package ships big-lama's architecture and this benchmark does not
fake one: LaMa is timed only with the real TorchScript file (--lama-checkpoint or LAMA_MODEL) and is
otherwise reported as "not measured" (its column shows "-" and the rates exclude it).

The run stops starting new batch sizes once --budget-s seconds (default 270) have passed, so the
default sweep stays under 5 minutes on one GPU. The target in the project's issue is 28 images/s
(SAM vit_h + big-lama) on one H200.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REAL_SIZES = [(500, 375), (500, 333), (375, 500), (500, 500), (640, 480)]  # (width, height)
SMALL_SIZES = [(160, 120), (120, 160)]
STAGES = ("decode", "sam_enc", "sam_dec", "lama", "encode")


def synth_jpegs(count: int, sizes, seed: int = 0):
    """JPEG bytes and VOC boxes of `count` synthetic photos (deterministic)."""
    from builder.core.records import Box

    rng = np.random.default_rng(seed)
    out = []
    for n in range(count):
        width, height = sizes[n % len(sizes)]
        yy, xx = np.mgrid[0:height, 0:width]
        pixels = np.stack([xx * 255 // width, yy * 255 // height, (xx + yy) % 256], -1) + rng.integers(
            0, 40, (height, width, 3)
        )
        buffer = io.BytesIO()
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, "JPEG", quality=90)
        boxes = [Box(width // 5, height // 6, width * 3 // 4, height * 4 // 5, "n01440764")]
        if n % 2:
            boxes.append(Box(width // 10, height // 10, width // 3, height // 3, "n01440764"))
        out.append((buffer.getvalue(), boxes))
    return out


def make_sam(model: str, checkpoint: str | None, device: str, batch: int):
    from segment_anything import sam_model_registry

    from builder.backends.sam import load_sam

    if checkpoint:
        sam, _ = load_sam(Path(checkpoint), model)
        return sam_masker(sam, model, Path(checkpoint).name, device, batch)
    return sam_masker(sam_model_registry[model]().eval(), model, f"random-init {model}", device, batch)


def sam_masker(sam, model: str, name: str, device: str, batch: int):
    """The production masker around an already built SAM module (a checkpoint's, or random weights)."""
    from builder.backends.sam import SamMasker, infer_architecture

    return SamMasker(sam, infer_architecture(sam.state_dict()), model, Path(name), "not-a-checkpoint", device, batch)


def add_trust_flags(parser: argparse.ArgumentParser) -> None:
    """--trust-file SHA256 and --trust-code, as `hsi extract` takes them: big-lama is TorchScript, i.e. code."""
    from builder.backends.code_trust import TRUST_CODE_FLAG, TRUST_CODE_HELP, TRUST_FILE_FLAG, TRUST_FILE_HELP

    parser.add_argument(TRUST_FILE_FLAG, action="append", default=[], metavar="SHA256", help=TRUST_FILE_HELP)
    parser.add_argument(TRUST_CODE_FLAG, action="store_true", help=TRUST_CODE_HELP)


def make_lama(checkpoint: str | None, device: str, batch: int, trust):
    """The production LaMa inpainter of `checkpoint`, loaded only when `trust` (a CodeTrust) allows it."""
    if not checkpoint:
        return None
    from builder.backends.lama import LamaInpainter, load_lama

    model, sha256 = load_lama(Path(checkpoint), trust)
    return LamaInpainter(model, Path(checkpoint), sha256, device, batch)


class Timer:
    def __init__(self, sync) -> None:
        self.sync = sync
        self.totals = dict.fromkeys(STAGES, 0.0)

    def __call__(self, stage, fn, *args):
        self.sync()
        start = time.perf_counter()
        result = fn(*args)
        self.sync()
        self.totals[stage] += time.perf_counter() - start
        return result


def run_sweep(batch: int, data, masker, inpainter, sync, dilation: int) -> dict:
    from builder.extract.shard_builder import RawParts, dilate, encode_parts

    masker.batch.size = batch
    if inpainter is not None:
        inpainter.batch.size = batch
    timer = Timer(sync)
    for start in range(0, len(data), batch):
        chunk = data[start : start + batch]
        images = timer("decode", lambda: [np.asarray(Image.open(io.BytesIO(b)).convert("RGB")) for b, _ in chunk])
        boxes = [b for _, b in chunk]
        features, sizes = timer("sam_enc", masker.embed, images)
        masks = timer("sam_dec", masker.decode_batch, features, sizes, images, boxes)
        erase = [dilate(np.logical_or.reduce(m), dilation) for m in masks]
        backgrounds = timer("lama", inpainter.inpaint_batch, images, erase) if inpainter is not None else images

        def encode():  # exactly what extract encodes per image
            for image, per_box, box_list, background, hole in zip(images, masks, boxes, backgrounds, erase):
                box = box_list[0]
                window = (slice(box.y0, box.y1 + 1), slice(box.x0, box.x1 + 1))
                encode_parts(
                    RawParts(
                        "benchmark",
                        np.ascontiguousarray(image[window]),
                        per_box[0][window],
                        background,
                        hole,
                        {"class_index": 0},
                    )
                )

        timer("encode", encode)
    return timer.totals


def extract_rates(totals: dict, images: int) -> tuple[float, float]:
    """images/s of one sweep: `serial` (every stage one after the other) and `model` (the model
    stages only, the rate a GPU fed by enough I/O threads sustains)."""
    model_s = totals["sam_enc"] + totals["sam_dec"] + totals["lama"]
    return images / sum(totals.values()), images / model_s


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--images", type=int, default=64, help="images per batch-size run (default 64)")
    parser.add_argument("--batch-sizes", default="1,4,8,16", help="comma-separated sweep (default 1,4,8,16)")
    parser.add_argument(
        "--sizes", choices=["real", "small"], default="real", help="ImageNet-sized images or small ones for a CPU check"
    )
    parser.add_argument("--sam-model", default="vit_h", choices=["vit_h", "vit_l", "vit_b"])
    parser.add_argument("--sam-checkpoint", help="time real SAM weights instead of a random init (same speed)")
    parser.add_argument(
        "--lama-checkpoint",
        default=os.environ.get("LAMA_MODEL"),
        help="the big-lama TorchScript file; without it LaMa is not measured",
    )
    add_trust_flags(parser)
    parser.add_argument("--dilation", type=int, default=15)
    parser.add_argument("--budget-s", type=float, default=270.0, help="start no new batch size after this many seconds")
    args = parser.parse_args(argv)

    import torch

    from builder.backends.torch_base import resolve_device

    started = time.perf_counter()
    device = resolve_device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    sweep = [int(b) for b in args.batch_sizes.split(",")]
    masker = make_sam(args.sam_model, args.sam_checkpoint, str(device), max(sweep))
    from builder.backends.code_trust import CodeTrust

    inpainter = make_lama(args.lama_checkpoint, str(device), max(sweep), CodeTrust.of(args.trust_file, args.trust_code))
    data = synth_jpegs(args.images, REAL_SIZES if args.sizes == "real" else SMALL_SIZES)
    print(
        f"device {gpu}; SAM {args.sam_model} ({'checkpoint' if args.sam_checkpoint else 'random init'}); "
        f"LaMa {'big-lama ' + Path(args.lama_checkpoint).name if inpainter else 'not measured (no big-lama file)'}; "
        f"{args.images} images, sizes {args.sizes}; torch {torch.__version__}"
    )
    run_sweep(min(sweep), data[: min(len(data), min(sweep))], masker, inpainter, sync, args.dilation)  # warm-up
    header = (
        f"{'batch':>5} " + " ".join(f"{s + ' s':>9}" for s in STAGES) + f" {'serial img/s':>13} {'model img/s':>12}"
    )
    print(header)
    for batch in sweep:
        if time.perf_counter() - started > args.budget_s:
            print(f"{batch:>5} skipped: the {args.budget_s:.0f} s budget is spent")
            continue
        totals = run_sweep(batch, data, masker, inpainter, sync, args.dilation)
        serial, model = extract_rates(totals, len(data))
        cells = " ".join(f"{totals[s]:>9.2f}" if s != "lama" or inpainter else f"{'-':>9}" for s in STAGES)
        print(f"{batch:>5} {cells} {serial:>13.2f} {model:>12.2f}", flush=True)
    print(f"total {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
