"""Evaluation throughput: the eval path (stream()'s shards -> DataLoader workers decoding and
preprocessing -> normalise -> forward -> prediction rows) against the model's forward passes alone
on the same batches already in memory, in one run, printed as images/s and their ratio.

    python benchmarks/eval_speed.py           # a throwaway composed set of 50 textured images (600 composites)
    python benchmarks/eval_speed.py DATASET_DIR --split val [--model resnet18] [--workers 2] [--batch-size 64]

The model is loaded through the production loader (a random-init timm checkpoint written here and
passed as --checkpoint), so the eval path is exactly `hsi eval`'s. Target: eval >= 0.9 of the
forward-only throughput on CPU with 2 loader workers (the data path must not be the bottleneck).
The full `hsi eval` time (predictions + parquet + metrics + reports + plots) is printed too.
The data path alone (workers reading and decoding, no model) is printed too, to show its headroom,
and the eval path's steady part (every batch after the first) apart from its loader start-up.
The best of --repeat rounds is kept; the measurements take turns within a round, and each round's
own ratio is printed with their median (on a shared machine, rounds disagree: use many).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def synthetic_dataset(folder: Path, images: int, workers: int = 1) -> Path:
    from parts_factory import fake_images, write_parts

    from builder.compose.stage import compose_dataset
    from builder.core.classes import imagenet_classes
    from builder.core.stage import RunOptions

    wnids = [c.wnid for c in imagenet_classes()[: max(2, images // 5)]]
    fakes = fake_images(
        wnids, per_class=max(1, images // len(wnids)), textured=True, image_size=(320, 240), box=(60, 40, 259, 199)
    )
    write_parts(folder / "parts", {"val": fakes}, shard_size=16)
    return compose_dataset(
        folder / "parts",
        "hard-spurious-imagenet",
        folder / "composed",
        options=RunOptions(workers=workers, progress=False),
        overrides={"shard_size": 120},
    ).dataset_dir


@dataclass
class Throughput:
    """Seconds per round of each measurement over the same `images`."""

    images: int
    forward: list[float]  # forward passes alone, on batches already in memory
    eval_path: list[float]  # stream()'s shards -> loader workers -> forward -> prediction rows
    data: list[float]  # the loader alone: read, decode, resize, batch
    startup: list[float] = field(default_factory=list)  # eval path: its start until the first batch reaches the model
    steady: list[float] = field(default_factory=list)  # eval path: from the first batch's end to the last's
    steady_images: int = 0  # the images of the steady part (all but the first batch)

    def rate(self, name: str) -> float:
        """images/s of the best round of `name`."""
        return self.images / min(getattr(self, name))

    @property
    def steady_rate(self) -> float | None:
        """images/s of the eval path once its loader runs (best round), without its start-up;
        None when the run was one batch."""
        return self.steady_images / min(self.steady) if self.steady_images and min(self.steady) > 0 else None

    @property
    def ratio(self) -> float:
        """eval / forward-only throughput, best of each (the target is >= 0.9)."""
        return min(self.forward) / min(self.eval_path)

    @property
    def steady_ratio(self) -> float | None:
        """The steady eval path / forward-only throughput (the loader's start-up is paid once a run)."""
        steady = self.steady_rate
        return steady / self.rate("forward") if steady else None

    def round_ratios(self) -> list[float]:
        return sorted(f / e for f, e in zip(self.forward, self.eval_path))


@contextmanager
def model_calls(record: list[tuple[float, float, int]]):
    """Record (start, end, images) of every batch the eval path's classifier scores (its
    probabilities come back on the host, so each end is after the device finished)."""
    from evaluation.predicting import predict

    original = predict.Classifier.probabilities

    def timed(self, images):
        started = time.perf_counter()
        out = original(self, images)
        record.append((started, time.perf_counter(), len(images)))
        return out

    predict.Classifier.probabilities = timed
    try:
        yield
    finally:
        predict.Classifier.probabilities = original


def random_init_model(arch: str, folder: Path, device):
    """A random-init timm `arch` through the production loader: its state_dict is written to
    `folder` and passed as --checkpoint, as `hsi eval --model timm:ARCH --checkpoint` would load it."""
    import timm
    import torch

    from evaluation.model_formats.models import ModelOptions, load_model

    torch.manual_seed(0)
    checkpoint = folder / f"{arch}_random_init.pth"
    torch.save(timm.create_model(arch, pretrained=False).state_dict(), checkpoint)
    loaded = load_model(f"timm:{arch}", ModelOptions(checkpoint=checkpoint))
    loaded.module.to(device)
    return loaded


def measure(loaded, dataset: Path, settings, device, repeat: int) -> Throughput:
    """Forward-only, the eval path and the data path alone over the same batches, taking turns
    within each of `repeat` rounds (after one forward-only warm-up). The eval path's start-up (to
    its first batch) and its steady part (every later batch) are timed apart. With `settings.amp`
    or `channels_last`, the forward passes alone run the same way as the eval path's."""
    import torch

    from evaluation.orchestration.pipeline import predictions_for
    from evaluation.predicting.data import make_loader
    from evaluation.predicting.predict import plan_run

    def fresh_plan():
        return plan_run(loaded, dataset, None, settings.split, batch_size=settings.batch_size)

    # the same batches, decoded once and held in memory, normalised as the eval path does
    pre = loaded.preprocessing
    mean = torch.tensor(pre.mean, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(pre.std, device=device).view(1, 3, 1, 1) * 255
    memory_format = torch.channels_last if settings.channels_last else torch.contiguous_format
    if settings.channels_last:
        loaded.module.to(memory_format=torch.channels_last)  # as the eval path's Classifier does
    batches = [
        ((b.images.to(device).float() - mean) / std).contiguous(memory_format=memory_format)
        for b in make_loader(fresh_plan().dataset, settings.workers, False)
        if b.images is not None
    ]
    images = sum(len(b) for b in batches)
    on_cuda = device.type == "cuda"
    amp_dtype = torch.bfloat16 if settings.amp == "bf16" else torch.float16

    def forward_only() -> float:
        started = time.perf_counter()
        with (
            torch.inference_mode(),
            torch.autocast(device.type, dtype=amp_dtype, enabled=on_cuda and bool(settings.amp)),
        ):
            for batch in batches:
                loaded.module(batch)
        if on_cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - started

    def eval_path() -> float:
        calls: list[tuple[float, float, int]] = []
        started = time.perf_counter()
        with model_calls(calls):
            run = predictions_for(loaded, dataset, settings, plan=fresh_plan())
        total = time.perf_counter() - started
        assert len(run.rows) == images, (len(run.rows), images)
        result.startup.append(calls[0][0] - started)
        result.steady.append(calls[-1][1] - calls[0][1])
        result.steady_images = sum(n for _, _, n in calls[1:])
        return total

    def data_only() -> float:
        started = time.perf_counter()
        count = sum(len(b.rows) for b in make_loader(fresh_plan().dataset, settings.workers, False))
        assert count == images
        return time.perf_counter() - started

    forward_only()  # warm-up: allocator, kernels, page cache
    result = Throughput(images, [], [], [])
    for _ in range(repeat):
        result.forward.append(forward_only())
        result.eval_path.append(eval_path())
        result.data.append(data_only())
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "dataset", nargs="?", type=Path, help="a composed dataset or release folder (default: a synthetic one)"
    )
    parser.add_argument("--split", default="val")
    parser.add_argument(
        "--images", type=int, default=50, help="source images of the synthetic set (12 composites each)"
    )
    parser.add_argument("--model", default="resnet18", help="timm architecture, random init (default resnet18)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    import torch

    from evaluation.analysis.bootstrap import BootstrapSettings
    from evaluation.orchestration.pipeline import RunSettings, evaluate_model
    from evaluation.predicting.predict import resolve_device

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        dataset = args.dataset or synthetic_dataset(tmp, args.images)
        device = resolve_device(args.device)
        loaded = random_init_model(args.model, tmp, device)
        settings = RunSettings(
            split=args.split,
            batch_size=args.batch_size,
            workers=args.workers,
            device=args.device,
            progress=False,
            bootstrap=BootstrapSettings(1000),
            overwrite=True,
        )
        measured = measure(loaded, dataset, settings, device, args.repeat)
        started = time.perf_counter()
        evaluate_model(loaded, dataset, tmp / "eval", settings, announce=lambda text: None)
        full = time.perf_counter() - started

    images = measured.images
    print(
        f"model {args.model} (random init) on {device}, torch threads {torch.get_num_threads()}, "
        f"{args.workers} loader workers, batch {args.batch_size}, {images} images"
    )
    for name, label in (
        ("forward", "forward passes alone (batches in memory):"),
        ("eval_path", "eval path (read, decode, forward, rows): "),
        ("data", "data path alone (read, decode, resize, batch; no model):"),
    ):
        rate = measured.rate(name)
        print(f"{label} {rate:8.1f} images/s  ({images / rate:.2f} s)")
    steady = measured.steady_rate
    if steady is not None:
        print(
            f"eval path steady part (after its first batch): {steady:8.1f} images/s; "
            f"loader start-up {min(measured.startup):.2f} s; steady / forward-only {measured.steady_ratio:.3f}"
        )
    print(f"full hsi eval (+ parquet, metrics, reports, plots): {full:.2f} s")
    rounds = measured.round_ratios()
    print(
        f"ratio eval / forward-only throughput: {measured.ratio:.3f} best of each (target >= 0.9); "
        f"per round {', '.join(f'{r:.3f}' for r in rounds)}, median {rounds[len(rounds) // 2]:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
