"""A worker keeps its database connection between tasks, and replaces a broken one.

Celery's Django fixup closes every connection before and after each task unless
CELERY_DB_REUSE_MAX is set (portal/settings.py): the worker connected anew per task.
portal.celery checks the kept connection before each task instead. Here a real worker
(Celery's test worker, in a thread of this process, with the app's fixup and signals)
runs tasks that say which connection they ran on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import connection, connections
from django.db.backends.signals import connection_created

from portal.celery import app

pytestmark = pytest.mark.django_db(transaction=True)

_ran: list[tuple[str, Any]] = []
_created: list[int] = []  # thread idents of the connections made


@app.task(name="tests.kq_backend")
def _backend() -> None:
    """Which connection this task ran on: the backend's pid (PostgreSQL), else the
    driver's connection object."""
    try:
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT pg_backend_pid()")
                _ran.append(("ok", cursor.fetchone()[0]))
            else:
                cursor.execute("SELECT 1")
                _ran.append(("ok", id(connection.connection)))
    except Exception as exc:
        _ran.append(("failed", repr(exc)))


@app.task(name="tests.kq_close")
def _close() -> None:
    """The worker thread's connection goes with it (the test database is dropped later)."""
    connections.close_all()
    _ran.append(("closed", None))


def _count(sender: Any = None, **kwargs: Any) -> None:
    _created.append(threading.get_ident())


def _wait_for(n: int, timeout_s: float = 30.0) -> list[tuple[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while len(_ran) < n and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_ran) >= n, _ran
    return list(_ran)


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    from celery import signals
    from celery.fixups.django import DjangoFixup

    # PostgreSQL's setting (portal/settings.py), whatever an earlier test of this process
    # or SQLite's default (0: close at each task) left.
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 60)
    _ran.clear()
    _created.clear()
    connection_created.connect(_count)
    try:
        with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
            yield
            before = len(_ran)
            _close.delay()
            _wait_for(before + 1)
    finally:
        connection_created.disconnect(_count)
        # The fixup connected its task signals at the worker's start, for good: the other
        # tests of this process run no worker.
        for fixup in app._fixups or []:
            if isinstance(fixup, DjangoFixup):
                signals.task_prerun.disconnect(fixup.worker_fixup.on_task_prerun)
                signals.task_postrun.disconnect(fixup.worker_fixup.on_task_postrun)


def test_celery_reads_the_reuse_setting(settings) -> None:
    from celery.fixups.django import DjangoWorkerFixup

    assert settings.CELERY_DB_REUSE_MAX == 10_000
    assert DjangoWorkerFixup(app).db_reuse_max == 10_000


def test_tasks_in_one_worker_share_one_connection(worker: None) -> None:
    me = threading.get_ident()
    for _ in range(8):
        _backend.delay()
    ran = _wait_for(8)
    assert [state for state, _ in ran] == ["ok"] * 8
    assert len({ident for _, ident in ran}) == 1, ran
    assert len([t for t in _created if t != me]) == 1, _created


def test_a_connection_the_server_ended_is_replaced_before_the_next_task(worker: None) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("a server that ends connections: PostgreSQL")
    _backend.delay()
    (_, pid), *_ = _wait_for(1)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        assert cursor.fetchone()[0] is True
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the backend exits after the signal
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
            if cursor.fetchone()[0] == 0:
                break
            time.sleep(0.02)
    _backend.delay()
    _backend.delay()
    ran = _wait_for(3)
    assert [state for state, _ in ran] == ["ok"] * 3, ran
    assert ran[1][1] != pid  # a new backend
    assert ran[2][1] == ran[1][1]  # and kept again
