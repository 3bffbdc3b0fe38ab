"""The public Python API, the one stable surface (everything else is internal):

- `hsi.open(source, config=None, split=None)` -> `hsi.Dataset`: one split's samples, metadata and groups,
  and `.eval(predictions)`;
- `hsi.score(predictions, data)` -> `hsi.Evaluation`: predictions made anywhere, scored;
- `hsi.evaluate(model, data, **settings)` -> `hsi.Evaluation`: a module, a numpy callable, a callable
  answering in words (`outputs="text"`) or a spec;
- `hsi.zero_shot_classifier(model, tokenizer, templates=..., classnames=None)` -> a module `hsi.evaluate`
  takes: CLIP zero-shot logits over the data's classes, per prompt set when given several;
- `hsi.stream(source, config, split, ...)`: the shards as a training stream.

Each is loaded on first use, so `import hsi` stays light (no torch, no pandas). The package also
holds the `hsi` command line and the demo pipeline, the top of the stack: it imports every layer
and holds no logic of its own, so the layers below never import a command."""

from builder import __version__

__all__ = ["__version__", "open", "Dataset", "score", "evaluate", "Evaluation", "stream", "zero_shot_classifier"]

# public name -> (module, attribute), imported when first used
_LAZY = {
    "open": ("evaluation.orchestration.external", "open_dataset"),
    "Dataset": ("evaluation.orchestration.external", "Dataset"),
    "score": ("evaluation.orchestration.external", "score"),
    "Evaluation": ("evaluation.orchestration.result", "Evaluation"),
    "evaluate": ("evaluation.orchestration.inprocess", "evaluate"),
    "stream": ("builder.formats.stream", "stream"),
    "zero_shot_classifier": ("evaluation.zero_shot.classifier", "public_zero_shot_classifier"),
}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'hsi' has no attribute {name!r}")
    import importlib

    module, attribute = _LAZY[name]
    return getattr(importlib.import_module(module), attribute)


def __dir__() -> list[str]:
    # The lazy names too: dir(), tab completion and Sphinx's autodoc list what __all__ promises.
    return sorted({*globals(), *__all__})
