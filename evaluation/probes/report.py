"""probes.json (every number) and probes.md (what a person reads) of one model, rendered from the
same dict; the cross-model files are written by `correlate`."""

from __future__ import annotations

from collections import Counter

from builder.core.markdown import code, inline
from builder.core.owned import OwnedFolder
from evaluation.analysis.report import md_table, write_json

PROBES_JSON, PROBES_MD = "probes.json", "probes.md"


def _num(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _table_section(title: str, summary: str, header: list[str], rows: list[list], result: dict) -> list[str]:
    """A '## title' section: one summary paragraph, one table, then the probe's notes."""
    notes = [f"- note: {note}" for note in result.get("notes") or []]
    return [f"## {title}", "", summary, "", md_table(header, rows), "", *notes]


def _spectral_lines(result: dict) -> list[str]:
    summary = (
        f"Clean top-1 after resize 256 / centre crop 224: {_num(result['clean_accuracy'])} "
        f"on {result['images']} images. LPP = {_num(result['lpp'])}, HPP = {_num(result['hpp'])} "
        f"(mean relative accuracy over c in {result['summary_cutoffs']}); "
        f"**spectral bias HPP / (LPP + HPP) = {_num(result['spectral_bias'])}** "
        "(above 0.5: relies more on high frequencies)."
    )
    high = {row["cutoff"]: row for row in result["highpass"]}
    rows = [
        [
            row["cutoff"],
            _num(row["accuracy"]),
            _num(row["relative"]),
            _num(high.get(row["cutoff"], {}).get("accuracy")),
            _num(high.get(row["cutoff"], {}).get("relative")),
        ]
        for row in result["lowpass"]
    ]
    header = ["c", "low-pass top-1", "relative", "high-pass top-1", "relative"]
    return _table_section("Spectral bias", summary, header, rows, result)


def _critical_band_lines(result: dict) -> list[str]:
    out = ["## Critical band", ""]
    rows = [[sd, *[_num(v) for v in row]] for sd, row in zip(result["noise_sds"], result["accuracy"])]
    out += [md_table(["noise SD", *[f"{c:g} c/img" for c in result["band_centres"]]], rows), ""]
    crit = result["criterion"]
    rule = (
        f"accuracy above {crit['level']:.0%}"
        if crit["kind"] == "absolute"
        else f"accuracy above {crit['level']:.0%} of the noise-free accuracy"
    )
    out.append(f"Thresholds per band (0 = the strongest noise is tolerated; {rule}): {result['thresholds']}.")
    fit = result.get("fit")
    if fit and not result["degenerate"]:
        out.append(
            f"Gaussian fit: A = {fit['A']:.3f}, mu = {fit['mu']:.3f}, sigma = {fit['sigma']:.3f}: "
            f"**bandwidth {result['bandwidth_octaves']:.2f} octaves, centre frequency "
            f"{result['centre_frequency']:.1f} cycles/image, peak noise sensitivity "
            f"{result['peak_noise_sensitivity']:.3f}**."
        )
    if result["degenerate"]:
        # A degenerate fit's parameters describe no channel: no figure is shown for them, only why.
        fitted = f" (fitted A = {fit['A']:.3f}, mu = {fit['mu']:.3f}, sigma = {fit['sigma']:.3f})" if fit else ""
        cause = f" because {result['cause']}" if result.get("cause") else ""
        out.append(
            f"Bandwidth n/a, centre frequency n/a, peak noise sensitivity n/a: **degenerate fit**{fitted}{cause}."
        )
        out.append("Why the fit is not a channel: " + "; ".join(result["degenerate"]) + ".")
        if result.get("suggestion"):
            out.append(f"Try: {result['suggestion']}.")
    return out + [""]


def _shape_lines(result: dict) -> list[str]:
    summary = (
        f"{result['cue_conflict_images']} cue-conflict images ({result['dropped_same_cue']} with shape = texture "
        f"dropped): {result['shape_hits']} shape hits, {result['texture_hits']} texture hits, {result['neither']} "
        f"neither; **shape bias {_num(result['shape_bias'])}** (1 = always the shape)."
    )
    rows = [
        [c, v["images"], v["shape_hits"], v["texture_hits"], _num(v["shape_bias"])]
        for c, v in result["per_category"].items()
    ]
    header = ["shape category", "images", "shape hits", "texture hits", "shape bias"]
    errors = result.get("errors") or []
    if errors:
        reasons = Counter(row["reason"] for row in errors)
        summary += (
            f" {len(errors)} stimuli skipped ("
            + ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
            + "; listed in probes.json under shape.errors)."
        )
    return _table_section("Shape bias", summary, header, rows, result)


def render_model_markdown(report: dict) -> str:
    model = report["model"]
    out = [
        f"# Bias probes of {code(model['spec'])}",
        "",
        f"- weights: {inline(model.get('checkpoint')) or 'as loaded'}"
        + (f" (sha256 `{model['checkpoint_sha256']}`)" if model.get("checkpoint_sha256") else ""),
        f"- preprocessing: {report['preprocessing']['description']}",
        "",
    ]
    if "val_images" in report:
        errors = report["val_images"]["errors"]
        out += [f"- ImageNet images: {report['val_images']['images']} ({len(errors)} undecodable)", ""]
    if "spectral" in report:
        out += _spectral_lines(report["spectral"])
    if "critical_band" in report:
        out += _critical_band_lines(report["critical_band"])
    if "shape" in report:
        out += _shape_lines(report["shape"])
    return "\n".join(out).rstrip() + "\n"


def write_model_report(out: OwnedFolder, folder: str, report: dict) -> None:
    """OUT/<folder>/probes.json and probes.md, through the command's owned output folder."""
    with out.writing(f"{folder}/{PROBES_JSON}") as tmp:
        write_json(tmp, report)
    out.write_text(f"{folder}/{PROBES_MD}", render_model_markdown(report))
