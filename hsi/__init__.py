"""The `hsi` command line and the demo pipeline: the top of the stack. It imports every layer and
holds no logic of its own, so the layers below never import a command.

The public Python API: `hsi.evaluate(model, data)` and `hsi.score(predictions, data)`, each ->
`hsi.Evaluation`. It is loaded on first use, so `import hsi` stays light (no torch, no pandas)."""

from builder import __version__

__all__ = ["__version__", "evaluate", "score", "Evaluation"]


def __getattr__(name: str):
    if name in ("score", "Evaluation"):
        from evaluation import external

        return getattr(external, name)
    if name == "evaluate":
        from evaluation import inprocess

        return inprocess.evaluate
    raise AttributeError(f"module 'hsi' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The lazy names too: dir(), tab completion and Sphinx's autodoc list what __all__ promises.
    return sorted({*globals(), *__all__})
