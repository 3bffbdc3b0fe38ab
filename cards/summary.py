"""What a dataset card is rendered from: one `ConfigSummary` per config (its manifest and
validation report), the changelog entries, and the dataset's names and citation."""

from __future__ import annotations

from dataclasses import dataclass, field

from builder.core.errors import HsiError
from builder.core.taxonomy import sorted_groups

DATASET_NAME = "hard-spurious-imagenet"
PRETTY_NAME = "Hard-Spurious-ImageNet"
DEFAULT_CONFIG = "hard-spurious-imagenet"
LICENSE_NAME = "imagenet-terms-of-access"
LICENSE_LINK = "https://image-net.org/download.php"
TASK_CATEGORIES = ["image-classification"]
TAGS = ["imagenet", "robustness", "spurious-correlations", "distribution-shift", "webdataset"]

CITATION = """@article{fatima2025cornercases,
  title   = {Corner Cases: How Size and Position of Objects Challenge ImageNet-Trained Models},
  author  = {Fatima, Mishal and Jung, Steffen and Keuper, Margret},
  journal = {Transactions on Machine Learning Research},
  year    = {2025},
  url     = {https://openreview.net/forum?id=Yqf2BhqfyZ},
  note    = {arXiv:2505.03569}
}"""


class CardError(HsiError, ValueError):
    """The card's metadata would not load as declared (bad YAML, configs or features)."""


@dataclass(frozen=True)
class ConfigSummary:
    """What the card needs to know about one config, read from its manifest and validation report."""

    name: str
    manifest: dict
    validation: dict
    previews: tuple[str, ...] = ()  # release-relative paths of preview sheets
    default: bool = False
    classes_present: int | None = None  # distinct class_index of the samples (counted by cards.release)

    @property
    def splits(self) -> list[str]:
        return sorted(self.manifest["splits"])

    def data_files(self, split: str) -> list[str]:
        return [f"data/{self.name}/{name}" for name in self.manifest["splits"][split]["filenames"]]

    @property
    def class_names(self) -> list[str]:
        return list(self.manifest["class_names"])

    @property
    def schema_version(self) -> object:
        """The composite schema version its manifest records (what fields its samples hold)."""
        return self.manifest.get("schema_version")

    @property
    def num_classes(self) -> int | None:
        """Classes that have samples: the manifest's per-class counts when it has them, else what the
        release counted in the shards; None when neither is known."""
        per_class = set()
        for split in self.splits:
            counts = (self.manifest["splits"][split].get("counts") or {}).get("class", {})
            per_class |= {k for k, n in counts.items() if n}
        return len(per_class) if per_class else self.classes_present

    @property
    def groups(self) -> list[str]:
        found = set()
        for split in self.splits:
            counts = (self.manifest["splits"][split].get("counts") or {}).get("group", {})
            found |= {g for g, n in counts.items() if n}
        return sorted_groups(found)


@dataclass(frozen=True)
class ChangelogEntry:
    version: str
    changes: tuple[str, ...] = field(default_factory=tuple)


def shipped_variant(spec: dict | None) -> str | None:
    """The shipped variant whose spec this is (name and shard size aside), or None for a custom spec."""
    from builder.compose.spec import NAMED_VARIANTS, load_variant

    ignored = {"name", "shard_size"}
    own = {k: v for k, v in (spec or {}).items() if k not in ignored}
    for name in NAMED_VARIANTS:
        if {k: v for k, v in load_variant(name).to_json().items() if k not in ignored} == own:
            return name
    return None


def is_paper_benchmark(configs: list[ConfigSummary]) -> bool:
    return all(shipped_variant(c.manifest.get("spec")) is not None for c in configs)


def default_title(configs: list[ConfigSummary]) -> str:
    return PRETTY_NAME if is_paper_benchmark(configs) else f"{PRETTY_NAME} toolkit: a custom build"


def split_fill_scores(manifest: dict) -> dict[str, dict]:
    """{split: fill-score summary} of the splits whose manifest entry carries one."""
    return {
        split: entry["fill_scores"]
        for split, entry in sorted(manifest["splits"].items())
        if isinstance(entry.get("fill_scores"), dict)
    }
