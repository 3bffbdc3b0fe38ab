"""The `hsi` command line and the demo pipeline: the top of the stack. It imports every layer and
holds no logic of its own, so the layers below never import a command."""

from builder import __version__

__all__ = ["__version__"]
