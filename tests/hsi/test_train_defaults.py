"""`hsi train --workers` defaults to 4 DataLoader workers, or fewer where the process has fewer cores."""

from __future__ import annotations

import argparse

from hsi.commands import train


def test_loader_workers_follow_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setattr(train.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert train.default_loader_workers() == 2
    monkeypatch.setattr(train.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert train.default_loader_workers() == 4
    parser = argparse.ArgumentParser()
    monkeypatch.setattr(train.os, "sched_getaffinity", lambda pid: {3}, raising=False)
    train.add_arguments(parser)
    assert parser.get_default("workers") == 1
