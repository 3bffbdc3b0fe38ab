"""Training methods for `hsi train --method`: ERM, JTT (Just Train Twice) and DFR (deep feature
reweighting); each takes TrainSettings and a run folder and returns the model that scores the test split."""

METHODS = ("erm", "jtt", "dfr")
