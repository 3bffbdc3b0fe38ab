"""One model through the requested probes into OUT/<model>/probes.json and probes.md; a model
already probed with the same settings and weights is read back instead of re-run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from builder import __version__
from builder.core.owned import OwnedFolder
from evaluation.model_formats.models import LoadedModel, model_slug

from .report import PROBES_JSON, PROBES_MD, write_model_report
from .runner import ProbeModel, ValImages, load_val_images, probe_preprocessing
from .schema import read_probes

PROBES = ("spectral", "critical-band", "shape")
PROBE_SCHEMA = "hsi-probe/1"


@dataclass(frozen=True)
class ProbeSettings:
    probes: tuple[str, ...] = PROBES
    source: Path | None = None  # ImageNet root (spectral, critical band)
    split: str = "val"
    boxes: Path | None = None
    limit: int | None = None
    cue_conflict: Path | None = None
    criterion: str = "absolute"
    criterion_level: float = 0.5
    batch_size: int = 64
    device: str = "auto"
    seed: int = 0
    progress: bool = True  # how the run looks, not what it measures: not part of its identity

    def to_json(self) -> dict:
        data = asdict(self)
        data["probes"] = list(self.probes)
        for key in ("source", "boxes", "cue_conflict"):
            data[key] = Path(data[key]).name if data[key] is not None else None
        data.pop("device")
        data.pop("batch_size")
        data.pop("progress")
        return data


def _identity(loaded: LoadedModel, settings: ProbeSettings) -> dict:
    return {
        "model": {k: loaded.describe()[k] for k in ("spec", "checkpoint_sha256")},
        "preprocessing": {
            k: v for k, v in probe_preprocessing(loaded.preprocessing).to_json().items() if k != "description"
        },
        "settings": settings.to_json(),
    }


def read_existing(out: OwnedFolder, folder: str, identity: dict) -> dict | None:
    """The model's earlier report in OUT/<folder>/ when it has the same identity (else None)."""
    path = out.root / folder / PROBES_JSON
    return read_probes(path, identity) if path.exists() else None


class ValCache:
    """Val images decoded once per (input size, filter), shared by every model that needs them."""

    def __init__(self, settings: ProbeSettings, announce: Callable[[str], None]):
        self.settings, self.announce, self.cache = settings, announce, {}

    def get(self, loaded: LoadedModel) -> ValImages:
        pre = probe_preprocessing(loaded.preprocessing)
        key = (pre.input_size, pre.interpolation)
        if key not in self.cache:
            s = self.settings
            self.cache[key] = load_val_images(s.source, s.split, s.limit, pre, s.boxes, self.announce, s.progress)
        return self.cache[key]


def probe_model(
    loaded: LoadedModel,
    settings: ProbeSettings,
    out: OwnedFolder,
    val_cache: ValCache,
    overwrite: bool = False,
    announce: Callable[[str], None] = print,
) -> tuple[Path, dict]:
    """Run the probes of `settings` on one model into OUT/<model>/; returns that folder and the report."""
    from . import channel, critical_band, spectral
    from .shape import run_shape

    folder = model_slug(loaded.spec)
    for name in (PROBES_JSON, PROBES_MD):  # a link on the way or a user's file: refused before the probes run
        out.path(f"{folder}/{name}")
    identity = _identity(loaded, settings)
    existing = None if overwrite else read_existing(out, folder, identity)
    if existing is not None:
        announce(f"{loaded.spec}: already probed with these settings in {folder}/ (pass --overwrite to redo it)")
        return out.root / folder, existing
    model = ProbeModel(loaded, settings.device, settings.batch_size, announce, settings.progress)
    report: dict = {
        "schema": PROBE_SCHEMA,
        "toolkit": __version__,
        "identity": identity,
        "model": loaded.describe(),
        "settings": settings.to_json(),
        "preprocessing": probe_preprocessing(loaded.preprocessing).to_json(),
    }
    if "spectral" in settings.probes or "critical-band" in settings.probes:
        val = val_cache.get(loaded)
        report["val_images"] = {"images": len(val.labels), "errors": val.errors}
    if "spectral" in settings.probes:
        announce(f"{loaded.spec}: spectral bias on {len(val.labels)} images")
        report["spectral"] = spectral.run_spectral(model, val, settings.batch_size)
    if "critical-band" in settings.probes:
        announce(f"{loaded.spec}: critical band on {len(val.labels)} images")
        matrix = critical_band.accuracy_matrix(model, val, settings.batch_size, settings.seed)
        band = channel.summarise(matrix, settings.criterion, settings.criterion_level)
        report["critical_band"] = {"images": len(val.labels), **band}
        if band["degenerate"]:
            announce(
                f"{loaded.spec}: critical band: degenerate fit, no bandwidth reported: {band['cause']}"
                + (f"; try: {band['suggestion']}" if band.get("suggestion") else "")
            )
    if "shape" in settings.probes:
        announce(f"{loaded.spec}: shape bias on {settings.cue_conflict}")
        report["shape"] = run_shape(
            model,
            settings.cue_conflict,
            probe_preprocessing(loaded.preprocessing, crop=False),
            settings.batch_size,
            bar=lambda total: model.bar(total, "shape bias"),
        )
    write_model_report(out, folder, report)
    return out.root / folder, report
