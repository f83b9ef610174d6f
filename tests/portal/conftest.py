from __future__ import annotations

from collections.abc import Iterator

import pytest

from queueing.cluster import set_cluster
from tests.sites import Site, make_site


@pytest.fixture
def site(db: None) -> Iterator[Site]:
    s = make_site()
    set_cluster(s.world.cluster)
    yield s
    set_cluster(None)
