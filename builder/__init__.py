"""Hard-Spurious-ImageNet builder: the layers that make the benchmark from ImageNet: `core` (errors,
records, config, manifests, names, shards, locks, folders, runners, the stage template), `formats`
(the on-disk contracts and the `stream()` reader), `backends` (the one model registry), and the
stages `extract`, `compose` (with `variants/` as data) and `augment` (SCGS). The command line is
the separate top-level package `hsi`."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hard-spurious-imagenet")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
