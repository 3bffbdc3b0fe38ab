"""Hard-Spurious-ImageNet builder: sources, extract, compose, shards and the `hsi` command line."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("hard-spurious-imagenet")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"
