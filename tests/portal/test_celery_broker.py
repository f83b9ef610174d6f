"""A worker outlives its Redis broker restarting (portal.celery.survive_broker_restarts).

Celery 5.7, on a lost connection, collects the connection and then closes it; closing a
channel that still holds unacknowledged messages (the cycler's woken cycles waiting for
their countdown) restores them through a client built from the collected connection,
and the AttributeError that follows stopped the worker as "Unrecoverable error" (seen in
tests/e2e/test_services_restart.py). Here that state is made on purpose.
"""

from __future__ import annotations

import logging
import subprocess

import pytest
from kombu import Connection

from portal.celery import survive_broker_restarts
from tests.services import embedded_redis


def test_restoring_unacked_messages_after_the_connection_was_collected_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    survive_broker_restarts()  # idempotent: portal.celery applied it at import
    with embedded_redis() as url:
        conn = Connection(url)
        channel = conn.default_channel
        with conn.SimpleQueue("kq-test") as queue:
            queue.put({"a": 1})
        assert channel.basic_get("kq-test", no_ack=False) is not None
        assert len(channel.qos._delivered) == 1  # held, unacknowledged
        # The broker goes away; Celery collects the connection (the transport forgets
        # it) and then closes the channel (which drops its pools first).
        _kill_redis(url)
        conn.collect(socket_timeout=1)
        assert channel.connection.client is None
        channel._disconnect_pools()
        unguarded = type(channel.qos).restore_unacked.__wrapped__
        with pytest.raises(AttributeError):  # what stopped the worker
            unguarded(channel.qos)
        channel._disconnect_pools()
        with caplog.at_level(logging.WARNING, logger="portal.celery"):
            channel.qos.restore_unacked()  # raised AttributeError before the guard
        assert "1 unacknowledged message(s) left to Redis" in caplog.text
        assert not channel.qos._delivered


def test_restoring_on_a_live_connection_is_untouched() -> None:
    with embedded_redis() as url:
        conn = Connection(url)
        channel = conn.default_channel
        with conn.SimpleQueue("kq-test-2") as queue:
            queue.put({"a": 1})
            assert channel.basic_get("kq-test-2", no_ack=False) is not None
            channel.qos.restore_unacked()  # back in the queue, as kombu does it
            assert queue.get(timeout=5).payload == {"a": 1}
        conn.release()


def _kill_redis(url: str) -> None:
    port = url.rsplit(":", 1)[1].split("/")[0]
    subprocess.run(["redis-cli", "-p", port, "shutdown", "nosave"], check=False, timeout=10)
