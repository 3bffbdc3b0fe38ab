"""The probe's schemas of the files it reads back rather than computes: its own probes.json (reused
when the model was already probed) and each model's eval.json in --eval-dir (written by `hsi eval`,
or copied in by anyone). Both are read through builder.core.untrusted, so a link, a syntax error,
a list where an object belongs or a string where a number belongs is one line naming the file and
the field, never a traceback after an hour of probing.

The values the cross-model table uses are taken out here, by the same checked reads, so what is
checked is exactly what is used."""

from __future__ import annotations

from pathlib import Path

from builder.core.untrusted import Fields, UntrustedInput, read_json

BIASES = ("shape_bias", "spectral_bias", "lpp", "hpp", "cb_bandwidth", "cb_centre_frequency", "cb_peak_sensitivity")


def _value(fields: Fields, key: str) -> float | None:
    """`key.value` of an estimate ({"value": ...}) in [0, 1], or None when absent or null."""
    return fields.object(key, None).number("value", None, low=0, high=1)


def bias_values(probes: object, source: Path | str = "probes.json") -> dict:
    """The per-model bias numbers of a probes report; a degenerate critical-band fit contributes none."""
    report = Fields(probes, source)
    values: dict = dict.fromkeys(BIASES)
    values["shape_bias"] = report.object("shape", None).number("shape_bias", None, low=0, high=1)
    spectral = report.object("spectral", None)
    values["spectral_bias"] = spectral.number("spectral_bias", None, low=0, high=1)
    values["lpp"] = spectral.number("lpp", None, low=0)
    values["hpp"] = spectral.number("hpp", None, low=0)
    band = report.object("critical_band", None)
    degenerate = band.list("degenerate", [])
    if band.has("fit") and not degenerate:
        band.object("fit")
        values.update(
            cb_bandwidth=band.number("bandwidth_octaves", low=0),
            cb_centre_frequency=band.number("centre_frequency", low=0),
            cb_peak_sensitivity=band.number("peak_noise_sensitivity", low=0),
        )
    return values


def eval_values(report: object, source: Path | str = "eval.json") -> dict:
    """Group accuracies (per group and per group@size), worst group, background-class share of the
    errors on foreign backgrounds, overall and clean top-1 from one eval.json."""
    metrics = Fields(report, source).object("metrics")
    values: dict = {"top1": _value(metrics.object("overall", None), "top1")}
    for row in metrics.objects("by_group", []):
        values[f"{row.string('group')}_top1"] = _value(row, "top1")
    for row in metrics.objects("by_group_size", []):
        values[f"{row.string('group')}@{row.integer('size', low=0)}_top1"] = _value(row, "top1")
    summary = metrics.object("groups_summary", None)
    worst = summary.object("worst_group", None)
    values["worst_group"] = worst.string("group", None)
    values["worst_group_top1"] = worst.number("value", None, low=0, high=1)
    background = metrics.object("background_class", None).object("overall", None)
    values["background_class_share"] = _value(background, "share_of_errors")
    values["clean_top1"] = _value(Fields(report, source).object("clean", None), "top1")
    return values


def eval_model(report: object, source: Path | str) -> dict:
    """The `model` identity of an eval.json (spec and checkpoint sha256), checked."""
    model = Fields(report, source).object("model")
    return {"spec": model.string("spec"), "checkpoint_sha256": model.string("checkpoint_sha256", None)}


def read_eval(path: Path) -> dict:
    """An eval.json of --eval-dir, refused in one line unless every field the probe uses is sound."""
    report = read_json(path, "eval.json")
    eval_values(report, path)
    eval_model(report, path)
    return report


def read_probes(path: Path, identity: dict) -> dict | None:
    """A probes.json this command wrote earlier: the report when it probed the same model with the
    same settings (None when it probed another, so it is probed again), refused in one line when it
    is not a report the probe can use."""
    report = read_json(path, "probes.json")
    try:
        if Fields(report, path).raw("identity", None) != identity:
            return None
        bias_values(report, path)
    except UntrustedInput as error:
        raise UntrustedInput(f"{error}; pass --overwrite to probe the model again") from None
    return report
