"""`hsi train`'s training loop: a timm model trained on a config's train split read with `stream()`,
evaluated on the held-out split per group each epoch (through the evaluation package's predictions),
checkpointed resumably, and finally scored on the test split into `predictions.parquet`.

- Model: `timm.create_model(NAME, num_classes=K)` from scratch; with `pretrained` or a local
  checkpoint, the weights come through `evaluation.models.load_model` (never a silent random init)
  and the classifier is reset to the config's K labels.
- Optimiser SGD (momentum) or AdamW; schedule per epoch: linear warm-up, then cosine or step decay.
- AMP and channels_last only on CUDA. Multi-GPU: run under `torchrun`; when torch.distributed is
  initialised the model is wrapped in DDP and `stream()` gives each rank its own shards; rank 0
  evaluates and writes.
- `last.pt` holds model, optimiser, scheduler, grad scaler, the python/numpy/torch RNG states, the
  epoch, the history and the best score; `best.pt` the weights kept by `--select`
  (worst-group ties go to the higher mean accuracy). A resumed run refuses settings that differ
  from the checkpoint's. Data order and augmentation derive from
  (seed, epoch), so a resumed run reaches the same weights bit for bit on the same device.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from builder.core.errors import InputError, UsageError

from .data import SourceSplit, read_dataset_manifest
from .groups import GroupMetadataError, check_groups_cover, groups_of, selection_scores, training_group
from .labels import config_wnids
from .methods.gradmix import GradMixOptions, Mixer, step_generator
from .models import LoadedModel, ModelOptions, Preprocessing, _timm_preprocessing, load_model
from .predict import resolve_device, run_predictions
from .training_data import Augmentation, TrainSamples, augment, collate_train, derived_seed

LAST, BEST, SETTINGS_NAME = "last.pt", "best.pt", "train_settings.json"
SELECT = ("worst-group", "mean")

# Settings that do not change the weights, so a resume may change them.
NOT_COMPARED = ("out", "workers", "progress")


def improves(scores: Mapping, best: Mapping, select: str) -> bool:
    """Whether an epoch's validation scores beat the best so far under `--select`. Worst-group ties
    (often: the worst group stays at 0 for several epochs) go to the higher mean accuracy, so a tie
    does not keep the first epoch merely because it came first; a full tie keeps the earlier epoch."""
    if select == "worst-group":
        return (scores["worst_group"], scores["mean"]) > (best["worst_group"], best["mean"])
    return scores["mean"] > best["mean"]


class TrainError(UsageError, ValueError):
    """Training settings or a run folder that cannot be used; the message says what to pass."""


@dataclass(frozen=True)
class TrainSettings:
    source: str
    out: str
    config: str | None = None
    model: str = "resnet18"
    pretrained: bool = False
    checkpoint: str | None = None  # local weights to start from (through evaluation.models)
    epochs: int = 10
    batch_size: int = 64
    lr: float = 0.1
    optimizer: str = "sgd"
    momentum: float = 0.9
    weight_decay: float = 5e-4
    schedule: str = "cosine"
    warmup_epochs: int = 0
    step_epochs: int = 30
    step_gamma: float = 0.1
    label_smoothing: float = 0.0
    augmentation: Augmentation = field(default_factory=Augmentation)
    mixing: GradMixOptions = field(default_factory=GradMixOptions)  # --augment gradmix|random-box
    seed: int = 0
    select: str = "worst-group"
    train_split: str = "train"
    val_split: str = "val"
    test_split: str = "test"
    train_groups: tuple[str, ...] | None = None
    train_sizes: tuple[int, ...] | None = None
    shuffle_buffer: int = 2000
    input_size: int | None = None  # default: the config's canvas
    device: str = "auto"
    amp: bool = True
    channels_last: bool = True
    workers: int = 0
    progress: bool = False

    def __post_init__(self):
        if self.optimizer not in ("sgd", "adamw"):
            raise TrainError(f"--optimizer must be sgd or adamw, got {self.optimizer!r}")
        if self.schedule not in ("cosine", "step", "constant"):
            raise TrainError(f"--schedule must be cosine, step or constant, got {self.schedule!r}")
        if self.select not in SELECT:
            raise TrainError(f"--select must be one of {', '.join(SELECT)}, got {self.select!r}")
        if self.epochs < 1 or self.batch_size < 1 or self.lr <= 0:
            raise TrainError("--epochs and --batch-size must be at least 1 and --lr positive")
        if not 0 < self.augmentation.crop_scale_min <= 1:
            raise TrainError(f"--crop-scale-min must lie in (0, 1], got {self.augmentation.crop_scale_min}")

    def to_json(self) -> dict:
        data = asdict(self)
        data["augmentation"] = self.augmentation.to_json()
        data.pop("mixing")
        if self.mixing.active:  # absent when off, so runs from before GradMix still resume
            data["mixing"] = self.mixing.to_json()
        return json.loads(json.dumps(data))

    def compared(self) -> dict:
        return {k: v for k, v in self.to_json().items() if k not in NOT_COMPARED}


@dataclass
class FitResult:
    out: Path
    model: object  # torch module with the selected weights, in eval mode
    preprocessing: Preprocessing
    wnids: tuple[str, ...]
    best: dict
    history: list[dict]
    train_errors: dict[str, str | None] | None = None  # key -> group, misclassified in the last training pass
    stopped_early: bool = False
    epoch_seconds: list[float] = field(default_factory=list)  # wall time of each training pass run by this process


def seed_everything(seed: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False


def rng_states() -> dict:
    import torch

    states = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict) -> None:
    import torch

    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def build_model(settings: TrainSettings, num_classes: int, canvas: int | None):
    """(module, preprocessing): random init, or weights loaded by evaluation.models with a fresh head."""
    import timm

    name = settings.model.removeprefix("timm:")
    if settings.pretrained or settings.checkpoint:
        options = ModelOptions(checkpoint=Path(settings.checkpoint) if settings.checkpoint else None)
        loaded = load_model(f"timm:{name}", options)  # raises ModelError with what to pass; never random
        module = loaded.module
        if module.get_classifier().out_features != num_classes:
            module.reset_classifier(num_classes)
        pre = loaded.preprocessing
    else:
        if not timm.is_model(name):
            raise TrainError(f"timm has no model {name!r} (see timm.list_models())")
        module = timm.create_model(name, pretrained=False, num_classes=num_classes)
        pre = _timm_preprocessing(module)
    side = settings.input_size or canvas
    if side:
        pre = replace(pre, input_size=(side, side), source=f"{pre.source}, input {side} px (the canvas, uncropped)")
    return module, pre


def lr_factor(settings: TrainSettings, epoch: int) -> float:
    if epoch < settings.warmup_epochs:
        return (epoch + 1) / (settings.warmup_epochs + 1)
    if settings.schedule == "cosine":
        span = max(1, settings.epochs - settings.warmup_epochs)
        return 0.5 * (1 + np.cos(np.pi * (epoch - settings.warmup_epochs) / span))
    if settings.schedule == "step":
        return settings.step_gamma ** ((epoch - settings.warmup_epochs) // settings.step_epochs)
    return 1.0


def make_optimizer(settings: TrainSettings, params):
    import torch

    if settings.optimizer == "sgd":
        return torch.optim.SGD(params, lr=settings.lr, momentum=settings.momentum, weight_decay=settings.weight_decay)
    return torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)


def distributed():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def init_distributed(device) -> object:
    """Under torchrun (WORLD_SIZE > 1) join the process group once, NCCL on CUDA and gloo on CPU; on
    CUDA each rank takes the GPU of its LOCAL_RANK. Returns the device this rank trains on."""
    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not dist.is_available():
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def is_main_process() -> bool:
    dist = distributed()
    return dist is None or dist.get_rank() == 0


def evaluate_split(module, pre: Preprocessing, settings: TrainSettings, split: str):
    """Prediction rows of `split` through evaluation.predict (eval mode, no augmentation)."""
    was_training = module.training
    module.eval()
    loaded = LoadedModel(f"timm:{settings.model} (training)", module, pre)
    run = run_predictions(
        loaded,
        settings.source,
        settings.config,
        split,
        batch_size=max(settings.batch_size, 64),
        workers=settings.workers,
        device=settings.device,
        amp=settings.amp,
        progress=False,
        announce=lambda _: None,
    )
    module.train(was_training)
    return run


def split_scores(rows: list[dict], need_groups: bool = True) -> dict:
    """Mean and worst-group accuracy; on data without group metadata only the mean (worst_group None),
    when the caller does not need groups (ERM selecting on the mean), else the metadata error."""
    ok = [r for r in rows if r["status"] == "ok"]
    correct = [bool(r["correct"]) for r in ok]
    try:
        groups = groups_of(r["meta"] for r in ok)
    except GroupMetadataError:
        if need_groups:
            raise
        mean = float(np.mean(np.asarray(correct, dtype=float))) if correct else 0.0
        return {"mean": mean, "worst_group": None, "worst_group_name": None, "groups": {}, "samples": len(ok)}
    return selection_scores(groups, correct)


def require_groups(settings: TrainSettings, why: str) -> None:
    """Refuse, before any training, data whose samples carry no group metadata when `why` needs groups."""
    from builder.formats.stream import stream

    for sample in stream(settings.source, settings.config, settings.train_split, keep_json=True):
        try:
            training_group(sample["json"])
        except GroupMetadataError as exc:
            raise GroupMetadataError(f"{why} needs each sample's group: {exc}") from None
        return


def _pct_or_na(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def _atomic_save(payload: dict, path: Path) -> None:
    import torch

    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def check_resume(out: Path, settings: TrainSettings, resume: bool, overwrite: bool) -> dict | None:
    """The checkpoint to continue from, or None; refuses a run folder that would be overwritten."""
    import torch

    last = out / LAST
    if not last.exists():
        return None
    if overwrite:
        return None
    if not resume:
        raise TrainError(
            f"{out} already holds a training run ({LAST}); pass --resume to continue it or --overwrite to start again"
        )
    state = torch.load(last, map_location="cpu", weights_only=False)
    saved, now = state["settings"], settings.compared()
    changed = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    if changed:
        detail = ", ".join(f"{k}: {saved.get(k)!r} -> {now.get(k)!r}" for k in changed[:6])
        raise TrainError(
            f"cannot resume {out}: settings changed ({detail}); resume with the run's own settings "
            f"(see {SETTINGS_NAME}) or train into a new --out"
        )
    return state


def train_manifest(settings: TrainSettings) -> dict:
    """The config's manifest, read through the train split's shards; refuses a config without one."""
    from builder.formats.stream import StreamError, resolve_shards

    try:
        shards, _ = resolve_shards(settings.source, settings.config, settings.train_split)
    except FileNotFoundError as exc:
        raise TrainError(
            f"{exc}; pass a composed config folder (hsi compose --out OUT prints it), a release "
            "folder or an hf:// address"
        ) from None
    except StreamError as exc:
        raise TrainError(
            f"cannot train on {settings.train_split!r}: {exc}. Compose a config with a train split "
            "(e.g. hsi compose --variant hard-spurious-imagenet-10 --holdout train:0.1:val, or "
            "--splits train) or name the split with --train-split"
        ) from None
    return read_dataset_manifest(shards)


def fit(
    settings: TrainSettings,
    out: Path | None = None,
    *,
    repeats: Mapping[str, int] | None = None,
    record_errors: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    stop_after_epoch: int | None = None,
    announce: Callable[[str], None] = print,
) -> FitResult:
    """Train one model; `repeats` gives error samples extra copies (JTT), `record_errors` keeps the keys
    misclassified in the last epoch's training pass (before each batch's step), `stop_after_epoch`
    ends the process's work after that epoch as a kill would (the run can be resumed)."""
    import torch
    from torch.utils.data import DataLoader

    out = Path(out or settings.out)
    device = init_distributed(resolve_device(settings.device))
    cuda = device.type == "cuda"
    seed_everything(settings.seed)
    manifest = train_manifest(settings)
    if settings.select == "worst-group":
        require_groups(settings, "--select worst-group")
    if settings.val_split not in manifest.get("splits", {}):
        raise TrainError(
            f"the config has no {settings.val_split!r} split to select on (it has "
            f"{sorted(manifest.get('splits', {}))}); compose one with hsi compose --holdout "
            f"train:0.1:val, or name another with --val-split"
        )
    wnids = config_wnids(manifest)
    module, pre = build_model(settings, len(wnids), (manifest.get("spec") or {}).get("canvas"))
    data = TrainSamples(
        SourceSplit(settings.source, settings.config, settings.train_split),
        pre,
        seed=settings.seed,
        shuffle_buffer=settings.shuffle_buffer,
        groups=settings.train_groups,
        sizes=settings.train_sizes,
        repeats=repeats,
    )
    module.to(device)
    if cuda and settings.channels_last:
        module.to(memory_format=torch.channels_last)
    optimizer = make_optimizer(settings, module.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: lr_factor(settings, e))
    scaler = torch.amp.GradScaler("cuda", enabled=cuda and settings.amp)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=settings.label_smoothing)
    mean = torch.tensor(pre.mean, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(pre.std, device=device).view(1, 3, 1, 1) * 255
    mixer = Mixer(settings.mixing, module, mean, std) if settings.mixing.active else None
    state = check_resume(out, settings, resume, overwrite)
    start, history, best, errors = 0, [], None, None
    if state is not None:
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scaler.load_state_dict(state["scaler"])
        set_rng_states(state["rng"])
        start, history, best, errors = state["epoch"], state["history"], state["best"], state.get("train_errors")
        announce(f"hsi train: resuming {out.name} after epoch {start}")
    elif is_main_process():
        out.mkdir(parents=True, exist_ok=True)
        (out / SETTINGS_NAME).write_text(json.dumps(settings.to_json(), indent=2, sort_keys=True) + "\n")
    dist = distributed()
    net = module
    if dist is not None:
        net = torch.nn.parallel.DistributedDataParallel(module, device_ids=[device.index] if cuda else None)
    train_groups_seen: set[str] = set()
    epoch_seconds: list[float] = []
    for epoch in range(start, settings.epochs):
        module.train()
        data.set_epoch(epoch)
        loader = DataLoader(
            data,
            batch_size=settings.batch_size,
            num_workers=settings.workers,
            collate_fn=collate_train,
            pin_memory=cuda,
        )
        generator = torch.Generator().manual_seed(derived_seed(settings.seed, "augment", epoch))
        wrong, losses, seen = [], [], 0
        last_epoch = epoch == settings.epochs - 1
        join = net.join() if dist is not None else _nothing()
        started = time.perf_counter()
        with join:
            for step, batch in enumerate(loader):
                x = augment(batch.images, settings.augmentation, generator).to(device, non_blocking=True)
                x = x.float().sub_(mean).div_(std)
                if cuda and settings.channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                y = batch.labels.to(device, non_blocking=True)
                autocast = lambda: torch.autocast(device.type, enabled=cuda and settings.amp)  # noqa: E731
                with autocast(), mixer.recording() if mixer else _nothing():
                    logits = net(x)
                    loss = criterion(logits, y)
                clean_loss = loss
                if mixer is not None:
                    loss = loss + mixer.extra_loss(
                        net, x, y, loss, step_generator(settings.seed, epoch, step), autocast, settings.label_smoothing
                    )
                if record_errors and last_epoch:
                    miss = (logits.argmax(1) != y).cpu().numpy()
                    wrong.extend((k, _group_or_none(meta)) for k, meta, m in zip(batch.keys, batch.metas, miss) if m)
                if epoch == start and settings.select == "worst-group":
                    train_groups_seen.update(groups_of(batch.metas))
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                losses.append(float(clean_loss.detach()))
                seen += len(batch.keys)
        epoch_seconds.append(time.perf_counter() - started)
        scheduler.step()
        if seen == 0:
            raise InputError(
                f"the {settings.train_split} split gave no training sample (check --train-groups "
                "and --train-sizes against the config's groups and sizes)"
            )
        if record_errors and last_epoch:
            errors = dict(sorted(_gather(wrong)))
        scores = None
        if is_main_process():
            val_rows = evaluate_split(module, pre, settings, settings.val_split).rows
            scores = split_scores(val_rows, need_groups=settings.select == "worst-group")
        if is_main_process():
            if epoch == start and settings.select == "worst-group":
                check_groups_cover(settings.val_split, scores["groups"], train_groups_seen)
            record = {
                "epoch": epoch + 1,
                "loss": float(np.mean(losses)),
                "samples": seen,
                "lr": optimizer.param_groups[0]["lr"],
                "val": scores,
            }
            history.append(record)
            if best is None or improves(scores, best["val"], settings.select):
                best = record
                _atomic_save(
                    {
                        "model": module.state_dict(),
                        "epoch": epoch + 1,
                        "val": scores,
                        "settings": settings.compared(),
                        "wnids": list(wnids),
                    },
                    out / BEST,
                )
            _atomic_save(
                {
                    "model": module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict(),
                    "rng": rng_states(),
                    "epoch": epoch + 1,
                    "history": history,
                    "best": best,
                    "train_errors": errors,
                    "settings": settings.compared(),
                },
                out / LAST,
            )
            announce(
                f"hsi train: {out.name} epoch {epoch + 1}/{settings.epochs} loss {record['loss']:.4f} "
                f"val mean {100 * scores['mean']:.1f} worst {_pct_or_na(scores['worst_group'])}"
            )
        if dist is not None:
            dist.barrier()
        if stop_after_epoch is not None and epoch + 1 >= stop_after_epoch and epoch + 1 < settings.epochs:
            return FitResult(
                out, module, pre, wnids, best, history, errors, stopped_early=True, epoch_seconds=epoch_seconds
            )
    selected = torch.load(out / BEST, map_location="cpu", weights_only=True)
    module.load_state_dict(selected["model"])
    module.eval()
    return FitResult(out, module, pre, wnids, best, history, errors, epoch_seconds=epoch_seconds)


def _group_or_none(meta: dict) -> str | None:
    try:
        return training_group(meta)
    except GroupMetadataError:
        return None


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _gather(keys: list) -> list:
    dist = distributed()
    if dist is None:
        return keys
    parts: list = [None] * dist.get_world_size()
    dist.all_gather_object(parts, keys)
    return [k for part in parts for k in part]
