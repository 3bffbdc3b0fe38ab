"""Prompt sets: which sentences a class name is put into before the text encoder embeds it.

Built-in sets (`--templates openai,simple,no-scale`):

- `openai`: the 80 ImageNet templates of the CLIP paper (Radford et al. 2021), as published in the
  CLIP repository's notebook "Prompt_Engineering_for_ImageNet.ipynb" (open_clip's
  zero_shot_metadata.OPENAI_IMAGENET_TEMPLATES).
- `simple`: the 7 the authors kept by sequential forward selection over the 80 (open_clip's
  SIMPLE_IMAGENET_TEMPLATES). Two of them name scale ("a photo of the large {}.", "a photo of the
  small {}."); the notebook remarks that "different scales (large and small)" were selected for.
- `no-scale`: the 80 without the 8 that name the object's scale or the photo's framing
  (`REMOVED_FOR_SCALE`, each with its reason). On this benchmark, where objects are pasted small and
  off-centre, such a template is a confound: "a photo of a small {}" may rescue a 56 px object for
  reasons that have nothing to do with recognising it. `KEPT_BORDERLINE` lists templates that were
  considered and kept, each with why.

A YAML file of one's own (any name ending in .yaml or .yml) holds either a list of templates (the
set is named after the file's stem) or a mapping from set names to lists. Each template holds the
class name as `{}` exactly once (the notebook's convention) and no other brace.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from builder.core.errors import UsageError, first_few, printable, shown
from builder.core.untrusted import UntrustedInput, describe, read_yaml, regular_file

from .published import PLACEHOLDER, openai_templates, simple_templates

BUILT_IN_SETS = ("openai", "simple", "no-scale")
DEFAULT_SETS = BUILT_IN_SETS
YAML_SUFFIXES = (".yaml", ".yml")
SET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_TEMPLATE_CHARACTERS = 300  # far above any published template (~40), far below a pasted essay
MAX_TEMPLATES = 1000  # per set; the largest published ensemble has 80
MAX_SETS = 32  # in one run: far above any comparison a report can show
MAX_FILE_BYTES = 4 << 20  # a template file: room for several full sets, refused before it is read

_SIZE = "names the object's size, which this benchmark varies on purpose"
_CROPPED = "names framing: a cropped photo, where the object is cut by the frame"
_CLOSE_UP = "names framing: a close-up, where the object fills the frame"

# The 8 of the 80 that name scale or framing, in the published order, each with why it is removed.
REMOVED_FOR_SCALE: tuple[tuple[str, str], ...] = (
    ("a cropped photo of the {}.", _CROPPED),
    ("a close-up photo of a {}.", _CLOSE_UP),
    ("a cropped photo of a {}.", _CROPPED),
    ("a close-up photo of the {}.", _CLOSE_UP),
    ("a photo of a large {}.", _SIZE + " (large)"),
    ("a photo of the small {}.", _SIZE + " (small)"),
    ("a photo of the large {}.", _SIZE + " (large)"),
    ("a photo of a small {}.", _SIZE + " (small)"),
)

# Read as possibly about scale, and kept: what they name is not the object's size or the framing.
KEPT_BORDERLINE: tuple[tuple[str, str], ...] = (
    ("a photo of the hard to see {}.", "names visibility (dark, blurred, hidden as much as small), not size"),
    ("a photo of a hard to see {}.", "names visibility (dark, blurred, hidden as much as small), not size"),
    ("a photo of many {}.", "names a count of objects, not the size of one"),
    ("a photo of one {}.", "names a count of objects, not the size of one"),
    ("a low resolution photo of the {}.", "names the image's quality, not the object's size"),
    ("a low resolution photo of a {}.", "names the image's quality, not the object's size"),
    ("a pixelated photo of the {}.", "names the image's quality, not the object's size"),
    ("a pixelated photo of a {}.", "names the image's quality, not the object's size"),
)


class TemplateSetError(UsageError, ValueError):
    """A --templates value that names no prompt set, or names one twice."""


def no_scale_templates() -> tuple[str, ...]:
    """The 80 templates without those in `REMOVED_FOR_SCALE`, in the published order."""
    removed = {template for template, _ in REMOVED_FOR_SCALE}
    return tuple(template for template in openai_templates() if template not in removed)


def built_in_set(name: str) -> tuple[str, ...]:
    sets = {"openai": openai_templates, "simple": simple_templates, "no-scale": no_scale_templates}
    if name not in sets:
        raise TemplateSetError(
            f"--templates: {shown(name)} is no prompt set (built in: {', '.join(BUILT_IN_SETS)}; "
            f"or a YAML file ending in {' or '.join(YAML_SUFFIXES)})"
        )
    return sets[name]()


def fill(template: str, class_name: str) -> str:
    """`template` with the class name in place of its `{}` (str.format would also read other braces)."""
    return template.replace(PLACEHOLDER, class_name, 1)


def check_template(template: object, error) -> str:
    """`template` when it is a one-line string holding `{}` once and no other brace; else `error(problem)`."""
    if not isinstance(template, str):
        raise error(f"expected a template string, got {describe(template)}")
    if not template.strip():
        raise error("a template is blank")
    if len(template) > MAX_TEMPLATE_CHARACTERS:
        raise error(f"{shown(template)} is longer than {MAX_TEMPLATE_CHARACTERS} characters")
    if not template.isprintable():
        raise error(f"{shown(template)} is not one line of printable text")
    count = template.count(PLACEHOLDER)
    if count != 1:
        what = "has no {} placeholder" if count == 0 else f"has {count} {{}} placeholders"
        raise error(f"{shown(template)} {what}: write the class name's place as {{}}, once")
    if "{" in template.replace(PLACEHOLDER, "") or "}" in template.replace(PLACEHOLDER, ""):
        raise error(f"{shown(template)} has a brace besides its {{}} placeholder: write the class name's place as {{}}")
    return template


def check_templates(templates: Iterable[object], error) -> tuple[str, ...]:
    """A non-empty tuple of checked, distinct templates; `error(problem, index)` builds the refusal."""
    templates = list(templates)
    if not templates:
        raise error("lists no templates", None)
    if len(templates) > MAX_TEMPLATES:
        raise error(f"lists {len(templates)} templates, more than {MAX_TEMPLATES}", None)
    seen: set[str] = set()
    for index, template in enumerate(templates):
        check_template(template, lambda problem, i=index: error(problem, i))
        if template in seen:
            # a repeated template would silently count twice in the class's mean embedding
            raise error(f"{shown(template)} is listed twice", index)
        seen.add(template)
    return tuple(templates)


def read_template_file(path: Path | str) -> dict[str, tuple[str, ...]]:
    """The prompt sets of a YAML file: a list of templates (named after the file's stem) or a
    mapping from set names to lists. Every problem is one line naming the file and the entry."""
    path = Path(path)
    where = printable(str(path))
    size = regular_file(path, "template file").stat().st_size
    if size > MAX_FILE_BYTES:
        raise UntrustedInput(
            f"{where}: template file is {size} bytes, more than {MAX_FILE_BYTES}; no prompt set needs it"
        )
    data = read_yaml(path, "template file")  # refuses links, folders, non-UTF-8 and syntax errors

    def refusal(key: str):
        def error(problem: str, index: int | None = None) -> UntrustedInput:
            field = key if index is None else f"{key}[{index}]"
            return UntrustedInput(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")

        return error

    if isinstance(data, list):
        stem_error = refusal("the file's stem, which names its set")
        check_set_name(path.stem, stem_error)
        return {path.stem: check_templates(data, refusal(""))}
    if not isinstance(data, Mapping) or not data:
        held = "an empty mapping" if isinstance(data, Mapping) else describe(data)
        raise UntrustedInput(
            f"{where}: template file holds {held}; give a list of templates, or a mapping from set names to lists"
        )
    sets = {}
    for name, templates in data.items():
        check_set_name(name, refusal(""))
        if not isinstance(templates, list):
            raise refusal(name)(f"expected a list of templates, got {describe(templates)}")
        sets[name] = check_templates(templates, refusal(name))
    return sets


def check_set_name(name: object, error) -> str:
    """`name` when it can name a prompt set of one's own (not a built-in's name); else `error(problem)`."""
    if not isinstance(name, str) or not SET_NAME.fullmatch(name):
        raise error(
            f"the set name {describe(name)} is not 1-64 letters, digits, '_', '.' or '-' that start with a letter "
            "or a digit"
        )
    if name in BUILT_IN_SETS:
        raise error(f"the set name {name!r} is a built-in set's; name yours otherwise")
    return name


def resolve_template_sets(spec: str | Sequence[str] = DEFAULT_SETS) -> dict[str, tuple[str, ...]]:
    """The prompt sets a `--templates` value names, in its order: comma-separated built-in names
    (`openai`, `simple`, `no-scale`) and YAML files. A set named twice is refused."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    items = [item.strip() for item in items if item.strip()]
    if not items:
        raise TemplateSetError(f"--templates names no prompt set (built in: {', '.join(BUILT_IN_SETS)})")
    sets: dict[str, tuple[str, ...]] = {}
    for item in items:
        found = read_template_file(item) if item.lower().endswith(YAML_SUFFIXES) else {item: built_in_set(item)}
        twice = [name for name in found if name in sets]
        if twice:
            raise TemplateSetError(f"--templates names the prompt set {first_few(twice)} twice")
        sets.update(found)
        if len(sets) > MAX_SETS:
            raise TemplateSetError(f"--templates names more than {MAX_SETS} prompt sets; compare fewer in one run")
    return sets


def templates_from(value: str | Sequence[str]) -> tuple[str, tuple[str, ...]]:
    """(name, templates) of one prompt set given as `zero_shot_classifier`'s `templates=`: a set
    name or YAML file that holds exactly one set, or a list of template strings (named "custom")."""
    if isinstance(value, str):
        sets = resolve_template_sets(value)
        if len(sets) != 1:
            raise TemplateSetError(
                f"templates={shown(value)} names {len(sets)} prompt sets ({first_few(sets)}); one is scored by "
                "zero_shot_classifier, several by zero_shot_classifiers"
            )
        return next(iter(sets.items()))
    templates = check_templates(
        value, lambda problem, index: TemplateSetError(f"templates{'' if index is None else f'[{index}]'}: {problem}")
    )
    return "custom", templates


def template_sets_from(value: str | Sequence[str] | Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """The prompt sets `zero_shot_classifiers` scores: a `--templates` value, or {name: templates}
    (a built-in name only for that set's own templates, as `resolve_template_sets` gives them)."""
    if not isinstance(value, Mapping):
        return resolve_template_sets(value)
    if not value:
        raise TemplateSetError("template_sets is empty; name at least one prompt set")
    sets = {}
    for name, templates in value.items():
        if name in BUILT_IN_SETS and tuple(templates) == built_in_set(name):
            sets[name] = built_in_set(name)  # a built-in set as resolve_template_sets gives it
            continue
        check_set_name(name, lambda problem: TemplateSetError(f"template_sets: {problem}"))
        sets[name] = check_templates(
            templates,
            lambda problem, index, n=name: TemplateSetError(
                f"template_sets[{n!r}]{'' if index is None else f'[{index}]'}: {problem}"
            ),
        )
    return sets
