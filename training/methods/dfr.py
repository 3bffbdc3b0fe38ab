"""DFR^Val_Tr, deep feature reweighting (Kirichenko, Izmailov, Wilson, ICLR 2023, arXiv:2204.02937), as
the authors' `dfr_evaluate_spurious.py` does it: the ERM model's pooled features (eval mode) feed an
L1 logistic regression (liblinear, one-vs-rest) on standardised features, fitted on the held-out split
only. C is tuned on half of it (fitted on the other, group-balanced, half; best worst-group accuracy);
then `refits` fits on fresh group-balanced subsamples are averaged into one linear head. The scaler is
fitted on the train split's features by default, as theirs is (`heldout`: on the held-out features).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evaluation.predicting.data import EvalBatches, SourceSplit, make_loader
from training.data import prove_splits
from training.folder import RunFolder, run_folder
from training.groups import balanced_indices, check_groups_cover, groups_of
from training.loop import (
    FitResult,
    TrainError,
    TrainSettings,
    fit,
    is_main_process,
    load_finished_run,
    resolve_device,
    train_manifest,
)
from training.methods.options import MethodOptions, RunControl

SCALERS = ("train", "heldout")
DFR_NAME = "dfr.json"


def pooled_features(module, x):
    """timm's pooled pre-logits features (the classifier's input)."""
    return module.forward_head(module.forward_features(x), pre_logits=True)


def extract_features(module, pre, settings: TrainSettings, split: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(features N x D, labels, groups) of a split, eval mode, no augmentation, in key order."""
    import torch

    device = resolve_device(settings.device)
    module.eval().to(device)
    mean = torch.tensor(pre.mean, device=device).view(1, 3, 1, 1) * 255
    std = torch.tensor(pre.std, device=device).view(1, 3, 1, 1) * 255
    dataset = EvalBatches(SourceSplit(settings.source, settings.config, split), pre, max(64, settings.batch_size))
    feats, labels, metas, keys = [], [], [], []  # type: ignore[var-annotated]
    with torch.inference_mode():
        for batch in make_loader(dataset, settings.workers, pin_memory=False):
            if batch.images is None:
                continue
            x = batch.images.to(device).float().sub_(mean).div_(std)
            feats.append(pooled_features(module, x).float().cpu().numpy())
            labels.extend(r["cls"] for r in batch.rows)
            metas.extend(r["meta"] for r in batch.rows)
            keys.extend(r["key"] for r in batch.rows)
    order = np.argsort(np.asarray(keys), kind="stable")
    groups = groups_of(metas)
    return np.concatenate(feats)[order], np.asarray(labels)[order], [groups[i] for i in order]


def fit_linear(x: np.ndarray, y: np.ndarray, c: float, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """(K x D weights, K biases) of an L1 logistic regression; absent classes get a very low bias."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    classes = np.unique(y)
    weights = np.zeros((num_classes, x.shape[1]))
    bias = np.full(num_classes, -1e4)
    if len(classes) == 2:  # one binary model: logits [0, w.x + b]
        model = LogisticRegression(l1_ratio=1.0, solver="liblinear", C=c, random_state=0).fit(x, y)
        bias[classes] = [0.0, float(model.intercept_[0])]
        weights[classes[1]] = model.coef_[0]
        return weights, bias
    model = OneVsRestClassifier(LogisticRegression(l1_ratio=1.0, solver="liblinear", C=c, random_state=0)).fit(x, y)
    for cls, estimator in zip(model.classes_, model.estimators_):
        weights[cls], bias[cls] = estimator.coef_[0], estimator.intercept_[0]
    return weights, bias


def worst_group_accuracy(pred: np.ndarray, y: np.ndarray, groups: np.ndarray) -> float:
    return float(min((pred[groups == g] == y[groups == g]).mean() for g in np.unique(groups)))


def tune_c(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, grid: Sequence[float], num_classes: int, rng: np.random.Generator
) -> tuple[float, dict]:
    """The C with the best worst-group accuracy on one half, fitted on the other, balanced, half."""
    from sklearn.preprocessing import StandardScaler

    order = rng.permutation(len(x))
    half = len(x) // 2
    score_idx, fit_idx = order[:half], order[half:]
    check_groups_cover("held-out tuning half", np.unique(groups[fit_idx]), np.unique(groups))
    fit_idx = fit_idx[balanced_indices(groups[fit_idx], rng)]
    scaler = StandardScaler().fit(x[fit_idx])
    x_fit, x_score = scaler.transform(x[fit_idx]), scaler.transform(x[score_idx])
    scores = {}
    for c in grid:
        w, b = fit_linear(x_fit, y[fit_idx], c, num_classes)
        scores[c] = worst_group_accuracy((x_score @ w.T + b).argmax(1), y[score_idx], groups[score_idx])
    best = max(grid, key=lambda c: (scores[c], -grid.index(c)))
    return best, {str(c): s for c, s in scores.items()}


def averaged_head(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, c: float, refits: int, num_classes: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Mean weights and biases of `refits` fits, each on a fresh group-balanced subsample (x standardised)."""
    fits = [
        fit_linear(x[idx], y[idx], c, num_classes) for idx in (balanced_indices(groups, rng) for _ in range(refits))
    ]
    return np.mean([w for w, _ in fits], axis=0), np.mean([b for _, b in fits], axis=0)


@dataclass
class DfrModel:
    """The backbone's features -> standardise -> the averaged linear head, as one torch module."""

    backbone: object
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray
    bias: np.ndarray

    def module(self):
        import torch

        class Head(torch.nn.Module):
            def __init__(inner, spec: DfrModel):
                super().__init__()
                inner.backbone = spec.backbone
                inner.register_buffer("mean", torch.tensor(spec.mean, dtype=torch.float32))
                inner.register_buffer("scale", torch.tensor(spec.scale, dtype=torch.float32))
                inner.linear = torch.nn.Linear(spec.weights.shape[1], spec.weights.shape[0])
                with torch.no_grad():
                    inner.linear.weight.copy_(torch.tensor(spec.weights, dtype=torch.float32))
                    inner.linear.bias.copy_(torch.tensor(spec.bias, dtype=torch.float32))

            def forward(inner, x):
                return inner.linear((pooled_features(inner.backbone, x).float() - inner.mean) / inner.scale)

        return Head(self).eval()


def train_dfr(
    settings: TrainSettings, out: Path | RunFolder, options: MethodOptions, control: RunControl
) -> tuple[FitResult, dict]:
    """ERM (or the finished ERM run `options.erm_run`, reused as it is), then DFR on the held-out split."""
    from sklearn.preprocessing import StandardScaler

    grid, refits, scaler, erm_run = options.dfr_c, options.dfr_refits, options.dfr_scaler, options.erm_run
    if scaler not in SCALERS:
        raise TrainError(f"--dfr-scaler must be one of {', '.join(SCALERS)}, got {scaler!r}")
    if refits < 1 or not grid:
        raise TrainError("--dfr-refits must be at least 1 and --dfr-c must list at least one C")
    if not all(math.isfinite(c) and c > 0 for c in grid):
        listed = ",".join(map(str, grid))
        raise TrainError(f"--dfr-c lists inverse strengths, each a finite number above 0, got {listed}")
    with run_folder(out) as folder:
        folder.check_writable(DFR_NAME)
        if erm_run is not None:
            erm = load_finished_run(settings, erm_run, "--erm-run")
            # no fit proves the data here: the splits the head is fitted on and scored on, before any is read
            splits = [settings.val_split, settings.train_split, settings.test_split]
            prove_splits(settings.source, settings.config, splits, train_manifest(settings), control.announce)
        else:
            erm = fit(settings, folder.child("erm"), **control.fit_keywords())
        k = len(erm.wnids)
        x_val, y_val, groups = extract_features(erm.model, erm.preprocessing, settings, settings.val_split)
        g_val = np.asarray(groups)
        rng = np.random.default_rng(settings.seed)
        best_c, tuning = tune_c(x_val, y_val, g_val, list(grid), k, rng)
        if scaler == "train":
            x_fit_scaler = extract_features(erm.model, erm.preprocessing, settings, settings.train_split)[0]
        else:
            x_fit_scaler = x_val
        standard = StandardScaler().fit(x_fit_scaler)
        weights, bias = averaged_head(standard.transform(x_val), y_val, g_val, best_c, refits, k, rng)
        head = DfrModel(erm.model, standard.mean_, standard.scale_, weights, bias).module()
        info = {
            "method": "dfr",
            "c": best_c,
            "tuning_worst_group": tuning,
            "refits": refits,
            "scaler": scaler,
            "heldout_split": settings.val_split,
            "heldout_samples": int(len(y_val)),
            "balanced_group_size": int(min(np.unique(g_val, return_counts=True)[1])),
            "erm_best_epoch": erm.best["epoch"] if erm.best else None,
        }
        if is_main_process():
            folder.write_json(DFR_NAME, info)
        done = f"DFR C={best_c} ({refits} refits, scaler on {scaler}); tuning worst-group {tuning}"
        control.announce(f"hsi train: {done}")
        return FitResult(folder.path, head, erm.preprocessing, erm.wnids, erm.best, erm.history), info
