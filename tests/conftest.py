from __future__ import annotations

from collections.abc import Iterator

import pytest

from queueing.cluster import set_cluster
from tests import builders


@pytest.fixture
def world(db: None) -> Iterator[builders.World]:
    """A cluster root, two 8-cpu nodes, one tenant with one leaf quota and its queue."""
    w = builders.world()
    set_cluster(w.cluster)
    yield w
    set_cluster(None)


@pytest.fixture(autouse=True)
def _reset_cluster() -> Iterator[None]:
    yield
    set_cluster(None)
