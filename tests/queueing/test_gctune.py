"""queueing.gctune: what a worker process does to its garbage collector at start."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from queueing import gctune


@pytest.fixture
def collector() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


def test_the_default_freezes_start_up_and_raises_the_thresholds(settings, collector):
    assert settings.KQ_GC_THRESHOLD == (50000, 20, 100)  # the setting's default
    settings.KQ_GC_THRESHOLD = (1234, 5, 6)
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    gctune.tune()
    assert gc.get_threshold() == (1234, 5, 6)
    assert gc.get_freeze_count() > 0
    assert gc.isenabled()


def test_an_empty_setting_leaves_pythons_own(settings, collector):
    settings.KQ_GC_THRESHOLD = None
    gc.unfreeze()
    before = gc.get_threshold()
    gctune.tune()
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
