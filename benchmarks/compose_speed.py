"""Compose speed: composites per second per core, beside the rate of merely JPEG-encoding the same
number of canvas-sized images with PIL in the same run, and their ratio (target >= 0.50).

It writes a synthetic parts set of photo-like textures at ImageNet-val-like sizes (500 x 375
backgrounds, a 250 x 200 object box) with the test suite's parts factory, composes the paper's set
on one core in a child process (so its peak RSS is the compose stage's own), then JPEG-encodes the
composites it produced with the same settings: with PIL (the ratio's denominator, which the target
is defined against) and with the encoder compose uses. Both sides are timed warm, as a long compose
runs: the child imports OpenCV and loads PIL's plugins, and composes the set once into a scratch
folder, before its timer, as the PIL side has its canvases decoded and its encoder run before its
own (the start-up and that first, cold compose are printed beside the warm figure: a fresh process
pays ~0.1 s of page faults while its allocator grows). `--memory-check` composes a 4x larger parts
set too and prints both peak RSS figures: they must not grow with the number of source images.

    .venv/bin/python benchmarks/compose_speed.py [--images 160] [--rounds 3] [--memory-check]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from builder.compose.spec import load_variant  # noqa: E402
from builder.core.shard_read import iter_shard  # noqa: E402
from builder.formats.composites import encode_jpeg, encode_jpeg_pil  # noqa: E402

WNIDS = ["n01443537", "n02437312", "n02134084", "n02391049", "n02690373", "n04273569", "n04146614", "n04310018"]


def write_benchmark_parts(parts_dir: Path, images: int) -> None:
    from parts_factory import fake_images, write_parts

    per_class = max(1, images // len(WNIDS))
    listing = fake_images(WNIDS, per_class=per_class, textured=True, image_size=(500, 375), box=(120, 90, 369, 289))
    write_parts(parts_dir, {"val": listing}, shard_size=64)


def compose_in_child(parts_dir: Path, out: Path, variant: str) -> dict:
    """Compose on one core in a fresh process; return its wall and CPU time, count and peak RSS."""
    code = (
        "import json, sys, time; from pathlib import Path\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "from builder.compose.stage import compose_dataset\n"
        "from builder.core.stage import RunOptions\n"
        # One-off library start-up, outside the timer as it is on the PIL side (whose canvases are
        # decoded, and PIL's plugins loaded, before its timer starts); its cost is printed apart.
        "start = time.perf_counter()\n"
        "import cv2; from PIL import Image; Image.init()\n"
        "startup = time.perf_counter() - start\n"
        "start = time.perf_counter()\n"
        f"compose_dataset(Path({str(parts_dir)!r}), {variant!r}, Path({str(out) + '-cold'!r}), "
        "options=RunOptions(progress=False))\n"
        "cold = time.perf_counter() - start\n"
        "start, cpu = time.perf_counter(), time.process_time()\n"
        f"s = compose_dataset(Path({str(parts_dir)!r}), {variant!r}, Path({str(out)!r}), "
        "options=RunOptions(progress=False))\n"
        "wall, cpu = time.perf_counter() - start, time.process_time() - cpu\n"
        "n = sum(e['num_samples'] for e in s.manifest['splits'].values())\n"
        # VmHWM, not ru_maxrss: on Linux ru_maxrss survives exec and would report the parent's peak.
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "print(json.dumps({'seconds': wall, 'cpu_seconds': cpu, 'composites': n, 'dataset': str(s.dataset_dir),"
        " 'peak_rss_mib': int(hwm) / 1024, 'startup_seconds': startup, 'cold_seconds': cold}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def read_canvases(dataset_dir: Path) -> list[np.ndarray]:
    canvases = []
    for shard in sorted(dataset_dir.glob("*.tar")):
        for _, members in iter_shard(shard):
            with Image.open(io.BytesIO(members["jpg"])) as image:
                canvases.append(np.asarray(image.convert("RGB")))
    return canvases


def jpeg_encode_rate(canvases: list[np.ndarray], quality: int, encode) -> tuple[float, float]:
    """Encodes per second of wall and of CPU time, of the same canvases (decoded first, outside
    the timed loop)."""
    start, cpu = time.perf_counter(), time.process_time()
    for canvas in canvases:
        encode(canvas, quality)
    return len(canvases) / (time.perf_counter() - start), len(canvases) / (time.process_time() - cpu)


def measure_round(parts_dir: Path, out: Path, variant: str) -> dict:
    """One compose in a child process, then the encode-only rates of the composites it wrote."""
    run = compose_in_child(parts_dir, out, variant)
    canvases = read_canvases(Path(run["dataset"]))
    quality = load_variant(variant).jpeg_quality
    run["pil_rate"], run["pil_cpu_rate"] = jpeg_encode_rate(canvases, quality, encode_jpeg_pil)
    run["encoder_rate"], _ = jpeg_encode_rate(canvases, quality, encode_jpeg)
    run["ratio"] = run["composites"] / run["seconds"] / run["pil_rate"]
    # CPU time is what a core spends: steadier than wall time when other processes share it.
    run["cpu_ratio"] = run["composites"] / run["cpu_seconds"] / run["pil_cpu_rate"]
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=160, help="source images in the synthetic parts set")
    parser.add_argument("--variant", default="hard-spurious-imagenet")
    parser.add_argument("--rounds", type=int, default=3, help="compose + encode-only rounds; medians are reported")
    parser.add_argument("--memory-check", action="store_true", help="also compose 4x the images and compare peak RSS")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="hsi-compose-bench-") as tmp:
        tmp_path = Path(tmp)
        write_benchmark_parts(tmp_path / "parts", args.images)
        rounds = [measure_round(tmp_path / "parts", tmp_path / f"out{i}", args.variant) for i in range(args.rounds)]
        run = {key: statistics.median(r[key] for r in rounds) for key in rounds[0] if key != "dataset"}
        ratio, composites, seconds = run["ratio"], int(run["composites"]), run["seconds"]
        print(f"variant {args.variant}: {args.images} source images -> {composites} composites on 1 core")
        print(f"rounds: {args.rounds}, each a compose then both encoders on its composites; medians below")
        print(
            f"compose:            {composites / seconds:8.1f} composites/s per core ({seconds:.2f} s; "
            f"+{run['startup_seconds']:.2f} s once to import OpenCV and PIL's plugins; the first, cold "
            f"compose took {run['cold_seconds']:.2f} s)"
        )
        print(f"JPEG encode only:   {run['pil_rate']:8.1f} images/s per core with PIL ({composites} canvases)")
        print(f"                    {run['encoder_rate']:8.1f} images/s per core with compose's encoder")
        print(f"ratio to PIL:       {ratio:8.2f} (target >= 0.50: {'met' if ratio >= 0.50 else 'NOT met'})")
        per_round = ", ".join(f"{r['ratio']:.2f}" for r in rounds)
        print(f"  per round:        {per_round}")
        print(f"  by CPU time:      {run['cpu_ratio']:8.2f} (compose {run['cpu_seconds']:.2f} s CPU)")
        print(f"peak RSS (compose): {run['peak_rss_mib']:8.1f} MiB for {args.images} images")
        if args.memory_check:
            write_benchmark_parts(tmp_path / "parts4", 4 * args.images)
            big = compose_in_child(tmp_path / "parts4", tmp_path / "out4", args.variant)
            print(f"peak RSS (compose): {big['peak_rss_mib']:8.1f} MiB for {4 * args.images} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
