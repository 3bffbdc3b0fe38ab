"""Seeding by name: every random choice in the toolkit derives from (seed, key), never from an order
or a worker, so the same inputs give the same bytes whatever the worker count or runner."""

from __future__ import annotations

import hashlib

import numpy as np


def sample_rng(seed: int, key: str) -> np.random.Generator:
    """A generator that depends only on (seed, key): the same sample gets the same draws anywhere."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def stable_rank(seed: int, purpose: str, key: str) -> str:
    """A sort key that shuffles items reproducibly and independently of their listing order."""
    return hashlib.sha256(f"{seed}:{purpose}:{key}".encode()).hexdigest()
