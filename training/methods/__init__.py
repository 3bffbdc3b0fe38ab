"""Training methods for `hsi train --method`: ERM, JTT (Just Train Twice) and DFR (deep feature
reweighting); each trainer takes TrainSettings, a run folder, the `MethodOptions` and the `RunControl` of
`training.methods.options` and returns the model that scores the test split, with what it did."""

METHODS = ("erm", "jtt", "dfr")
