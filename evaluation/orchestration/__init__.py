"""Orchestration: whole evaluations, whatever starts them.

`pipeline` evaluates one model into its model folder (`eval_folder`: the folder's name and every
write into it); `runs`, `sweep` and `sweep_data` are what `hsi eval` does for one model or many (in
worker processes or on Ray), `model_list` the models it is given. The Python API evaluates through
the same pipeline: `inprocess` (`hsi.evaluate`), `external` (`hsi.open`, `hsi.score`) and `result`
(the `hsi.Evaluation` they return). `verify_entry` (`hsi leaderboard verify`) re-scores an entry
through `external`'s data, `rerun_entry` runs its model again (`--rerun`) and `verify_record`
writes what was proved (`--record`). The top of `evaluation`: only the probes build on it.
"""
