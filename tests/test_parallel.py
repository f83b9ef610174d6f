"""tests/parallel.py: each xdist worker's Redis database."""

from __future__ import annotations

import pytest

from tests.parallel import worker_redis_url


def test_worker_k_gets_the_database_index_plus_k() -> None:
    assert worker_redis_url("redis://127.0.0.1:6379/0", "gw0", 2) == "redis://127.0.0.1:6379/0"
    assert worker_redis_url("redis://127.0.0.1:6379/0", "gw1", 2) == "redis://127.0.0.1:6379/1"
    assert worker_redis_url("redis://:pw@h:1/4", "gw1", 2) == "redis://:pw@h:1/5"
    assert worker_redis_url("redis://h:1", "gw1", 2) == "redis://h:1/1"


def test_a_restarted_worker_takes_the_slot_of_the_one_it_replaces() -> None:
    assert worker_redis_url("redis://h:1/0", "gw2", 2) == "redis://h:1/0"


def test_a_url_without_a_database_index_is_refused() -> None:
    with pytest.raises(ValueError, match="redis://host:port/<index>"):
        worker_redis_url("unix:///tmp/redis.sock?db=0", "gw1", 2)
