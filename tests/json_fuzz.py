"""Seeded mutations of a JSON document, for the fuzz tests of every reader of a stranger's JSON
(eval.json, _release.json, ...): a few values replaced by junk of another kind, or keys dropped or
renamed, at paths drawn from the document itself."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator, Sequence


def value_paths(node, prefix: tuple = ()) -> Iterator[tuple]:
    """Every path (keys and list indices) into `node`, the empty one first."""
    yield prefix
    children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in children:
        yield from value_paths(child, (*prefix, key))


def mutated(
    document,
    rng: random.Random,
    junk: Sequence,
    paths: Sequence[tuple],
    *,
    drop: float = 0.3,
    renames: Sequence[str] | None = None,
):
    """A copy of `document` with 1-3 changes at `paths`: with probability `drop` a key of an object is
    dropped (or renamed to one of `renames`), otherwise the value is replaced by one of `junk`."""
    document = copy.deepcopy(document)
    for _ in range(rng.randint(1, 3)):
        *route, last = rng.choice(paths)
        parent = document
        try:
            for key in route:
                parent = parent[key]
            if rng.random() < drop and isinstance(parent, dict):
                if renames:
                    parent[rng.choice(renames)] = parent.pop(last)
                else:
                    parent.pop(last, None)
            else:
                parent[last] = rng.choice(junk)
        except (KeyError, IndexError, TypeError):
            continue
    return document


def fuzz_reader(read, path, base, rng, junk, paths, *, trials=400, drop=0.2, renames=None, truncate=0.1) -> dict:
    """`read(path)` on `trials` mutations of `base` written to `path` (a share of them also cut off):
    how many were read and how many refused with an HsiError; any other exception fails the test."""
    import json

    from builder.core.errors import HsiError

    outcomes = {"read": 0, "refused": 0}
    for _ in range(trials):
        text = json.dumps(mutated(base, rng, junk, paths, drop=drop, renames=renames))
        if rng.random() < truncate:
            text = text[: rng.randint(0, len(text))]
        path.write_text(text)
        try:
            read(path)
            outcomes["read"] += 1
        except HsiError:
            outcomes["refused"] += 1
    return outcomes
