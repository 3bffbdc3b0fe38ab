"""Entries and leaderboards: what ranks one model's evaluation against others'.

`entries` writes and reads a model's `entry.json` (what a leaderboard lists and `hsi leaderboard
verify` re-scores), `hub_results` the Hub's evaluation-results file beside it, and `leaderboard` the
leaderboard.md and .csv of an `hsi eval --out` folder and the check that skips a model already
evaluated. Builds on `predicting` and `analysis`; runs no model.
"""
