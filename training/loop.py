"""`hsi train`'s loop: a timm model trained on a config's train split read with `stream()`, selected
per epoch on the held-out split's groups (through evaluation's predictions), checkpointed resumably
(`training.state`), under `torchrun` in DDP (rank 0 evaluates and writes). Data order and augmentation
derive from (seed, epoch), so a resumed run reaches the same weights bit for bit on the same device;
a resume refuses other settings or other data (the manifest's identity, not its path)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from builder.backends import loader_gate as gate
from builder.core.errors import InputError, UsageError
from builder.core.manifest import Manifest
from evaluation.model_formats.labels import config_wnids
from evaluation.model_formats.models import (
    MAX_INPUT_SIDE,
    LoadedModel,
    ModelOptions,
    Preprocessing,
    load_model,
    timm_preprocessing,
)
from evaluation.predicting.data import SourceSplit, read_dataset_manifest
from evaluation.predicting.predict import resolve_device, run_predictions
from training.data import Augmentation, TrainSamples, augment, collate_train, derived_seed, verify_training_data
from training.folder import RunFolder, run_folder
from training.gradmix import GradMixOptions, Mixer, step_generator
from training.groups import (
    GroupMetadataError,
    check_groups_cover,
    group_or_none,
    groups_of,
    selection_scores,
    training_group,
)
from training.state import (
    BEST,
    LAST,
    SETTINGS_NAME,
    BestState,
    LastState,
    checked,
    plain,
    read_best,
    read_last,
    recorded_epoch_seconds,
    restore,
    rng_states,
)

__all__ = ["BEST", "LAST", "SETTINGS_NAME", "FitResult", "TrainError", "TrainSettings", "fit", "rng_states"]

SELECT = ("worst-group", "mean")
AMPS = ("fp16", "bf16", "off")  # --amp's dtypes; off: --no-amp

# Settings that do not change the weights, so a resume may change them. Where the data is (`source`,
# the `config` flag) is not compared: what it is, the manifest's identity (`data_identity`), is.
NOT_COMPARED = ("out", "workers", "progress", "source", "config")


def improves(scores: Mapping, best: Mapping, select: str) -> bool:
    """Worst-group ties (the worst group often stays at 0 for epochs) go to the higher mean; a full tie
    keeps the earlier epoch."""
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
    checkpoint: str | None = None  # local weights to start from (through evaluation.model_formats.models)
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
    amp: str = "fp16"  # AMPS: mixed precision on CUDA (bf16 needs no loss scaling); off: float32
    channels_last: bool = True
    workers: int = 0
    progress: bool = False

    def __post_init__(self):
        if self.optimizer not in ("sgd", "adamw"):
            raise TrainError(f"--optimizer must be sgd or adamw, got {self.optimizer!r}")
        if self.schedule not in ("cosine", "step", "constant"):
            raise TrainError(f"--schedule must be cosine, step or constant, got {self.schedule!r}")
        if isinstance(self.amp, bool):  # the settings of runs from before --amp took a dtype
            object.__setattr__(self, "amp", "fp16" if self.amp else "off")
        if self.amp not in AMPS:
            raise TrainError(f"--amp must be one of {', '.join(AMPS)}, got {self.amp!r}")
        if self.select not in SELECT:
            raise TrainError(f"--select must be one of {', '.join(SELECT)}, got {self.select!r}")
        if self.epochs < 1 or self.batch_size < 1 or not (math.isfinite(self.lr) and self.lr > 0):
            raise TrainError("--epochs and --batch-size must be at least 1 and --lr a finite number above 0")
        for flag, value in (("--momentum", self.momentum), ("--weight-decay", self.weight_decay)):
            if not (math.isfinite(value) and value >= 0):
                raise TrainError(f"{flag} must be a finite number of at least 0, got {value}")
        if not (math.isfinite(self.step_gamma) and self.step_gamma > 0):
            raise TrainError(f"--step-gamma must be a finite number above 0, got {self.step_gamma}")
        if not 0 <= self.label_smoothing < 1:
            raise TrainError(f"--label-smoothing must lie in [0, 1), got {self.label_smoothing}")
        if self.warmup_epochs < 0 or self.step_epochs < 1 or self.shuffle_buffer < 1:
            raise TrainError("--warmup-epochs must be at least 0, --step-epochs and --shuffle-buffer at least 1")
        if self.input_size is not None and not 1 <= self.input_size <= MAX_INPUT_SIDE:
            raise TrainError(f"--input-size must lie in 1..{MAX_INPUT_SIDE} pixels, got {self.input_size}")
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
    model: Any  # torch module with the selected weights, in eval mode
    preprocessing: Preprocessing
    wnids: tuple[str, ...]
    best: dict | None
    history: list[dict]
    train_errors: dict[str, str | None] | None = None  # key -> group, misclassified in the last training pass
    stopped_early: bool = False
    epoch_seconds: list[float | None] = field(default_factory=list)  # every epoch's, a resumed run's from last.pt


# cuBLAS is deterministic only with a fixed workspace, read when CUDA's first cuBLAS handle is made.
CUBLAS_WORKSPACE = ":4096:8"


def rank_key() -> tuple:
    """("rank", r) under DDP, so each rank draws its own augmentation, boxes and dropout; () alone."""
    dist = distributed()
    return ("rank", dist.get_rank()) if dist is not None and dist.get_world_size() > 1 else ()


def seed_everything(seed: int) -> None:
    """Python, numpy and torch from `seed` (one stream per DDP rank), deterministic algorithms."""
    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    rank = rank_key()
    ranked = derived_seed(seed, "torch", *rank) if rank else seed
    random.seed(ranked)
    np.random.seed(ranked % (1 << 32))
    torch.manual_seed(ranked)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False


def build_model(settings: TrainSettings, num_classes: int, canvas: int | None) -> tuple[Any, Preprocessing]:
    """(module, preprocessing): random init, or weights loaded by evaluation with a fresh head."""
    import timm

    name = settings.model.removeprefix("timm:")
    if settings.pretrained or settings.checkpoint:
        options = ModelOptions(checkpoint=Path(settings.checkpoint) if settings.checkpoint else None)
        loaded = load_model(f"timm:{name}", options)  # raises ModelError with what to pass; never random
        module: Any = loaded.module
        if module.get_classifier().out_features != num_classes:
            module.reset_classifier(num_classes)
        pre = loaded.preprocessing
    else:
        if not timm.is_model(name):
            raise TrainError(f"timm has no model {name!r} (see timm.list_models())")
        module = gate.timm_model(name, pretrained=False, num_classes=num_classes)
        pre = timm_preprocessing(module)
    side = settings.input_size or canvas
    if side:
        pre = replace(pre, input_size=(side, side), source=f"{pre.source}, input {side} px (the canvas, uncropped)")
    return module, pre


def lr_factor(settings: TrainSettings, epoch: int) -> float:
    """A python float (never a numpy scalar: the optimiser's state, saved in last.pt, holds it)."""
    if epoch < settings.warmup_epochs:
        return (epoch + 1) / (settings.warmup_epochs + 1)
    if settings.schedule == "cosine":
        span = max(1, settings.epochs - settings.warmup_epochs)
        return float(0.5 * (1 + np.cos(np.pi * (epoch - settings.warmup_epochs) / span)))
    if settings.schedule == "step":
        return float(settings.step_gamma ** ((epoch - settings.warmup_epochs) // settings.step_epochs))
    return 1.0


def make_optimizer(settings: TrainSettings, params):
    import torch

    if settings.optimizer == "sgd":
        return torch.optim.SGD(params, lr=settings.lr, momentum=settings.momentum, weight_decay=settings.weight_decay)
    return torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)


def distributed() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def init_distributed(device):
    """Under torchrun join the process group once (NCCL on CUDA, gloo on CPU); returns this rank's device."""
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
    """Prediction rows of `split` through evaluation.predicting.predict (eval mode, no augmentation)."""
    was_training = module.training
    module.eval()
    run = run_predictions(
        LoadedModel(f"timm:{settings.model} (training)", module, pre),
        settings.source,
        settings.config,
        split,
        batch_size=max(settings.batch_size, 64),
        workers=settings.workers,
        device=settings.device,
        amp={"fp16": True, "bf16": "bf16"}.get(settings.amp, False),  # type: ignore[arg-type]  # "off": none
        progress=False,
        announce=lambda _: None,
    )
    module.train(was_training)
    return run


def split_scores(rows: list[dict], need_groups: bool = True) -> dict:
    """Mean and worst-group accuracy; without group metadata only the mean, unless groups are needed."""
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


def percent_or_na(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def _flat(data: Mapping, prefix: str = "") -> dict:
    flat = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def changed_settings(saved: Mapping, now: Mapping) -> list[str]:
    """`key: old -> new` for each compared value that differs (dotted keys, so a refusal names the value)."""
    old, new = _flat(saved), _flat(now)
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]


def describe_changes(changes: list[str]) -> str:
    data = [c for c in changes if c.startswith("data.")]
    other = [c for c in changes if not c.startswith("data.")]
    parts = [f"the dataset is not the one it trained on ({', '.join(data[:4])})"] if data else []
    return "; ".join(parts + ([f"settings changed ({', '.join(other[:6])})"] if other else []))


def check_resume(folder: RunFolder, compared: dict, resume: bool, overwrite: bool) -> dict | None:
    """The checkpoint to continue from, or None; refuses overwriting a run, and a resume with other settings or data."""
    last = folder.existing(LAST)
    if last is None or overwrite:
        return None
    if not resume:
        raise TrainError(
            f"{folder.path} already holds a training run ({LAST}); pass --resume to continue it or --overwrite "
            "to start again"
        )
    state = read_last(last, hint="pass --overwrite to start the run again, or train into a new --out")
    changes = changed_settings(state["settings"], compared)
    if changes:
        raise TrainError(
            f"cannot resume {folder.path}: {describe_changes(changes)}; resume with the run's own settings and data "
            f"(see {SETTINGS_NAME}) or train into a new --out"
        )
    return state


def data_identity(manifest: Mapping, settings: TrainSettings) -> dict:
    """The config, its fingerprint, and per split used its samples and a digest of its shards' sha256
    (so rebuilt data, or another dataset at the same path, is not taken for the same)."""
    typed = Manifest.from_json(manifest)
    splits = {}
    for name in sorted({settings.train_split, settings.val_split, settings.test_split} & set(typed.splits)):
        split = typed.splits[name]
        digest = hashlib.sha256("\n".join(s.sha256 for s in split.shards).encode()).hexdigest()
        splits[name] = {"samples": split.num_samples, "shards_sha256": digest}
    return {"config": typed.config, "fingerprint": typed.fingerprint, "splits": splits}


def check_selection_split(manifest: Mapping, settings: TrainSettings, split: str, flag: str) -> None:
    """Refuse, before any training, a split the run needs that is missing or holds no sample."""
    splits = Manifest.from_json(manifest).splits
    if split not in splits:
        raise TrainError(
            f"the config has no {split!r} split to {'select on' if flag == '--val-split' else 'score'} (it has "
            f"{sorted(splits)}); compose one with hsi compose --holdout train:0.1:val, or name another with {flag}"
        )
    if splits[split].num_samples == 0:
        raise TrainError(
            f"the {split!r} split of {settings.source} holds 0 samples, so no epoch can be "
            f"{'selected' if flag == '--val-split' else 'scored'}: compose it again with a larger --holdout "
            f"fraction or from more parts (hsi compose prints the images per split), or name another split with {flag}"
        )


def config_canvas(manifest: dict) -> int | None:
    """The canvas of the config's spec (its default lives in the spec type); None without a spec."""
    from builder.compose.spec import spec_from_json

    return spec_from_json(manifest["spec"]).canvas if manifest.get("spec") else None


def train_manifest(settings: TrainSettings) -> dict:
    """The config's manifest, read through the train split's shards; refuses a config without one."""
    from builder.formats.stream import StreamError, resolve_shards

    try:
        resolve_shards(settings.source, settings.config, settings.train_split)  # the split exists
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
    try:
        return read_dataset_manifest(SourceSplit(settings.source, settings.config, settings.train_split))
    except InputError as exc:  # not JSON, not an object, a field of the wrong kind
        raise TrainError(f"the dataset's _info.json is not a manifest hsi compose wrote ({exc})") from None


def fit(
    settings: TrainSettings,
    out: Path | RunFolder | None = None,
    *,
    repeats: Mapping[str, int] | None = None,
    record_errors: bool = False,
    resume: bool = False,
    overwrite: bool = False,
    stop_after_epoch: int | None = None,
    announce: Callable[[str], None] = print,
) -> FitResult:
    """Train one model into `out` (a folder claimed here, or a RunFolder of a claimed `--out`). `repeats`
    gives samples extra copies (JTT); `record_errors` keeps the keys misclassified in the last epoch's
    training pass; `stop_after_epoch` ends the work after that epoch as a kill would (resumable)."""
    import torch
    from torch.utils.data import DataLoader

    with run_folder(out if out is not None else settings.out) as folder:
        out = folder.path
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)  # before CUDA initialises
        device = init_distributed(resolve_device(settings.device))
        cuda = device.type == "cuda"
        seed_everything(settings.seed)
        manifest = train_manifest(settings)
        check_selection_split(manifest, settings, settings.val_split, "--val-split")
        compared = {**settings.compared(), "data": data_identity(manifest, settings)}
        folder.check_writable(SETTINGS_NAME, BEST, LAST)
        state = check_resume(folder, compared, resume, overwrite)  # before any training: a refusal costs nothing
        if settings.select == "worst-group":
            require_groups(settings, "--select worst-group")
        wnids = config_wnids(manifest)
        module, pre = build_model(settings, len(wnids), config_canvas(manifest))
        data = TrainSamples(
            SourceSplit(settings.source, settings.config, settings.train_split),
            pre,
            seed=settings.seed,
            shuffle_buffer=settings.shuffle_buffer,
            groups=settings.train_groups,
            sizes=settings.train_sizes,
            repeats=repeats,
        )
        val = SourceSplit(settings.source, settings.config, settings.val_split)
        test = SourceSplit(settings.source, settings.config, settings.test_split)
        verify_training_data(data, manifest, settings.train_split, val, announce, test)  # before any write or step
        module.to(device)
        if cuda and settings.channels_last:
            module.to(memory_format=torch.channels_last)
        optimizer = make_optimizer(settings, module.parameters())
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda e: lr_factor(settings, e))
        amp_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(settings.amp)
        use_amp = cuda and amp_dtype is not None
        scaler = torch.amp.GradScaler("cuda", enabled=use_amp and amp_dtype == torch.float16)  # bf16 needs none
        criterion = torch.nn.CrossEntropyLoss(label_smoothing=settings.label_smoothing)
        mean = torch.tensor(pre.mean, device=device).view(1, 3, 1, 1) * 255
        std = torch.tensor(pre.std, device=device).view(1, 3, 1, 1) * 255
        mixer = Mixer(settings.mixing, module, mean, std) if settings.mixing.active else None
        start, history, best, errors = 0, [], None, None
        epoch_seconds: list[float | None] = []
        if state is not None:
            parts = (("model", module), ("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler))
            restore(state, out / LAST, *parts)
            start, history, best, errors = state["epoch"], state["history"], state["best"], state.get("train_errors")
            epoch_seconds = recorded_epoch_seconds(state)
            announce(f"hsi train: resuming {out.name} after epoch {start}")
        elif is_main_process():
            folder.write_json(SETTINGS_NAME, {**settings.to_json(), "data": compared["data"]})
        dist = distributed()
        net = module
        if dist is not None:
            net = torch.nn.parallel.DistributedDataParallel(module, device_ids=[device.index] if cuda else None)
        train_groups_seen: set[str] = set()
        for epoch in range(start, settings.epochs):
            module.train()
            data.set_epoch(epoch)
            loader = DataLoader(
                data, batch_size=settings.batch_size, num_workers=settings.workers, collate_fn=collate_train,
                pin_memory=cuda,
            )  # fmt: skip
            rank = rank_key()
            generator = torch.Generator().manual_seed(derived_seed(settings.seed, "augment", epoch, *rank))
            wrong: list = []
            losses, seen = [], 0
            last_epoch = epoch == settings.epochs - 1
            started = time.perf_counter()
            with net.join() if dist is not None else nullcontext():
                for step, batch in enumerate(loader):
                    x = augment(batch.images, settings.augmentation, generator).to(device, non_blocking=True)
                    x = x.float().sub_(mean).div_(std)
                    if cuda and settings.channels_last:
                        x = x.contiguous(memory_format=torch.channels_last)
                    y = batch.labels.to(device, non_blocking=True)
                    autocast = lambda: torch.autocast(device.type, dtype=amp_dtype, enabled=use_amp)  # noqa: E731
                    with autocast(), mixer.recording() if mixer else nullcontext():
                        logits = net(x)
                        loss = criterion(logits, y)
                    clean_loss = loss
                    if mixer is not None:
                        draws = step_generator(settings.seed, epoch, step, rank)
                        loss = loss + mixer.extra_loss(net, x, y, loss, draws, autocast, settings.label_smoothing)
                    if record_errors and last_epoch:
                        miss = (logits.argmax(1) != y).cpu().numpy()
                        wrong.extend((k, group_or_none(m)) for k, m, bad in zip(batch.keys, batch.metas, miss) if bad)
                    if epoch == start and settings.select == "worst-group":
                        train_groups_seen.update(groups_of(batch.metas))
                    optimizer.zero_grad(set_to_none=True)
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                    losses.append(clean_loss.detach())  # no host sync per step: read once per epoch
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
            if is_main_process():
                val_rows = evaluate_split(module, pre, settings, settings.val_split).rows
                scores = split_scores(val_rows, need_groups=settings.select == "worst-group")
                if epoch == start and settings.select == "worst-group":
                    check_groups_cover(settings.val_split, scores["groups"], train_groups_seen)
                record = {
                    "epoch": epoch + 1,
                    "loss": float(np.mean(torch.stack(losses).double().cpu().numpy())),
                    "samples": seen,
                    "lr": optimizer.param_groups[0]["lr"],
                    "val": scores,
                }
                history.append(record)
                weights = module.state_dict()
                if best is None or improves(scores, best["val"], settings.select):
                    best = record
                    kept = {"model": weights, "epoch": epoch + 1, "val": plain(scores), "settings": compared}
                    folder.save_torch(BEST, checked(BestState, {**kept, "wnids": list(wnids)}, BEST))
                last = {
                    "model": weights,
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict(),
                    "rng": rng_states(),
                    "epoch": epoch + 1,
                    "history": plain(history),
                    "best": plain(best),
                    "train_errors": errors,
                    "settings": compared,
                    "epoch_seconds": list(epoch_seconds),
                }
                folder.save_torch(LAST, checked(LastState, last, LAST))
                announce(
                    f"hsi train: {out.name} epoch {epoch + 1}/{settings.epochs} loss {record['loss']:.4f} "
                    f"val mean {100 * scores['mean']:.1f} worst {percent_or_na(scores['worst_group'])}"
                )
            if dist is not None:
                dist.barrier()
            if stop_after_epoch is not None and epoch + 1 >= stop_after_epoch and epoch + 1 < settings.epochs:
                return FitResult(out, module, pre, wnids, best, history, errors, True, epoch_seconds)
        best_path = folder.existing(BEST)
        if best_path is None:
            raise TrainError(f"{out} holds no {BEST}: the run kept no epoch; pass --overwrite to train it again")
        restore(read_best(best_path), best_path, ("model", module), rng=False)
        module.eval()
        return FitResult(out, module, pre, wnids, best, history, errors, epoch_seconds=epoch_seconds)


def load_finished_run(settings: TrainSettings, run: Path, flag: str = "--erm-run") -> FitResult:
    """A finished run of these settings on this data, reused as it is (DFR's `--erm-run`): given as its
    seed folder or its method folder, its checkpoints read, never written, its selected weights loaded."""
    run = Path(run)
    candidates = (run, run / f"seed-{settings.seed}")
    folder = next((f for f in candidates if (f / LAST).is_file() or (f / LAST).is_symlink()), None)
    if folder is None:
        raise TrainError(
            f"{flag} {run} holds no training run ({LAST}, nor seed-{settings.seed}/{LAST}): pass the folder of a "
            "finished hsi train --method erm run (OUT/erm, or one of its seed-<s> folders), or leave the flag out "
            "to train one"
        )
    manifest = train_manifest(settings)
    compared = {**settings.compared(), "data": data_identity(manifest, settings)}
    hint = f"pass the folder of a finished hsi train run as {flag}, or leave the flag out to train one"
    state = read_last(folder / LAST, hint=hint)
    changes = changed_settings(state["settings"], compared)
    if changes:
        advice = (
            f"with --seeds, pass the method folder ({folder.parent}) so each seed reuses its own run"
            if all(c.startswith("seed:") for c in changes)
            else f"pass the same training flags as that run (its {SETTINGS_NAME} lists them), or leave {flag} out "
            "to train a model for this run"
        )
        raise TrainError(
            f"cannot reuse {flag} {folder}: it is not a run of these settings on this data: "
            f"{describe_changes(changes)}; {advice}"
        )
    if state["epoch"] < settings.epochs:
        raise TrainError(
            f"cannot reuse {flag} {folder}: it stopped after epoch {state['epoch']} of {settings.epochs}; finish it "
            f"first (the same hsi train command with --resume), or leave {flag} out to train a model for this run"
        )
    best = read_best(folder / BEST, hint=hint)
    wnids = config_wnids(manifest)
    module, pre = build_model(settings, len(wnids), config_canvas(manifest))
    restore(best, folder / BEST, ("model", module), rng=False)
    module.eval()
    errors, seconds = state.get("train_errors"), recorded_epoch_seconds(state)
    return FitResult(folder, module, pre, wnids, state["best"], state["history"], errors, epoch_seconds=seconds)


def _gather(keys: list) -> list:
    dist = distributed()
    if dist is None:
        return keys
    parts: list = [None] * dist.get_world_size()
    dist.all_gather_object(parts, keys)
    return [k for part in parts for k in part]
