"""`hsi train`: `loop` (the train loop, checkpoints in `state`), `data` (streamed samples, augmentation),
`folder` (where a run writes), `run` (one method and seed end to end), `methods/` (ERM, JTT, DFR from one
table), `gradmix` (GradMix and random-box mixing), `summary` (the report) and `scgs_classifier` (the
classifier `hsi scgs` takes). Training measures through `evaluation`; nothing there imports from here."""
