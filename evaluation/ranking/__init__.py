"""Entries and leaderboards: what ranks one model's evaluation against others', and the one reader
of an evaluation folder they and the cards read through.

`entries` writes and reads a model's `entry.json` (what a leaderboard lists and `hsi leaderboard
verify` re-scores), `hub_results` the Hub's evaluation-results file beside it, and `leaderboard` the
leaderboard.md and .csv of an `hsi eval --out` folder and the check that skips a model already
evaluated. `eval_reader` reads a finished evaluation folder (eval.json checked by `report_fields`,
entry.json, predictions, plots) for the leaderboards, the site, `release --results` and `leaderboard
verify`. `provenance` is the one rule for what a result may claim of itself (its preprocessing's
status: applied, declared or unknown; its weights), `verification_record` what `hsi leaderboard
verify` proved (its checks by name, verification.json). Builds on `predicting` and `analysis`; runs
no model.
"""
