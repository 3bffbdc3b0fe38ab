"""Training the paper's baselines on a composed config: `hsi train`.

- `loop`: the train loop (timm model, optimiser, schedule, AMP, DDP under torchrun), per-epoch
  selection on the held-out split, resumable checkpoints (`state`: tensors and plain values only).
- `data`: the streamed training samples and their augmentation; `folder`: where a run writes.
- `run`: one method and seed end to end (train, then score the test split into predictions).
- `methods/`: ERM, JTT and DFR, dispatched from one table (`methods.METHODS`); `gradmix`: the
  GradMix and random-box mixing any method can train with (`--augment`), applied in the loop.
- `summary`: `hsi train --report` (seeds, error bars, paired comparisons, per-run eval reports).
- `scgs_classifier`: the classifier `hsi scgs` takes from a training checkpoint or a model spec.

Training measures through `evaluation` (its predictions and reports); nothing in `evaluation`
imports from here.
"""
