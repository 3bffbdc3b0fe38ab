"""The zero-shot data CLIP's authors published, read from the copy open-clip-torch ships.

Radford et al., "Learning Transferable Visual Models From Natural Language Supervision" (ICML 2021)
published, in the CLIP repository's notebook `notebooks/Prompt_Engineering_for_ImageNet.ipynb`,
the 80 ImageNet prompt templates, the 7 found by forward selection over them (the "simple" set),
and curated names for the 1000 ImageNet classes in the standard index order. open-clip-torch ships
the same lists in `open_clip/zero_shot_metadata.py` (OPENAI_IMAGENET_TEMPLATES as functions of the
class name, SIMPLE_IMAGENET_TEMPLATES, IMAGENET_CLASSNAMES); the tests check them against digests of
the notebook's lists, by count and by content.

That module is plain data, so it is loaded on its own from the installed package: importing
`open_clip` itself would build its whole model registry (seconds) just to read 1,087 strings.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from builder.core.errors import HsiError

METADATA_FILE = "zero_shot_metadata.py"
PLACEHOLDER = "{}"  # where the class name goes in a template, as in the CLIP notebook (str.format's {})


class PublishedDataUnavailable(HsiError):
    """open-clip-torch, which carries CLIP's published templates and class names, is not installed."""


@functools.lru_cache(maxsize=1)
def _metadata() -> dict:
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        raise PublishedDataUnavailable(
            "CLIP's prompt templates and ImageNet class names come from open-clip-torch, which is not installed: "
            "pip install open-clip-torch"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / METADATA_FILE
    module_spec = importlib.util.spec_from_file_location("hsi_open_clip_zero_shot_metadata", path)
    if module_spec is None or module_spec.loader is None or not path.is_file():
        raise PublishedDataUnavailable(f"open-clip-torch is installed but has no {METADATA_FILE}: reinstall it")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return vars(module)


def _as_templates(functions) -> tuple[str, ...]:
    # open_clip stores each template as `lambda c: f"...{c}..."`; applied to "{}" it gives the
    # notebook's own string form back
    return tuple(function(PLACEHOLDER) for function in functions)


def openai_templates() -> tuple[str, ...]:
    """The 80 ImageNet templates of the CLIP paper, in the published order."""
    return _as_templates(_metadata()["OPENAI_IMAGENET_TEMPLATES"])


def simple_templates() -> tuple[str, ...]:
    """The 7 templates the CLIP authors selected from the 80 by sequential forward selection."""
    return _as_templates(_metadata()["SIMPLE_IMAGENET_TEMPLATES"])


def clip_class_names() -> tuple[str, ...]:
    """The 1000 curated ImageNet class names of the CLIP notebook, by class index (sorted-wnid order)."""
    return tuple(_metadata()["IMAGENET_CLASSNAMES"])
