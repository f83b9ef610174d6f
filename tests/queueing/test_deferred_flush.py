"""A cycle whose cluster calls run in the background commits without waiting for the
WAL's flush, and its calls make that commit durable before the first of them
(lease.DEFER_FLUSH, lease.FlushingFence)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from queueing import lease
from queueing.admission import cycle_root
from queueing.cluster import set_cluster
from queueing.cluster.base import JobRef
from queueing.models import CycleLease, Workload
from queueing.state import calls, placement
from tests import builders
from tests.builders import submit

pytestmark = [
    pytest.mark.skipif(connection.vendor != "postgresql", reason="synchronous_commit"),
    pytest.mark.django_db(transaction=True),
]


def _statements(run: Any) -> tuple[Any, list[str]]:
    sent: list[str] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        out = run()
    return out, sent


def test_the_fence_writes_the_lease_row_once_before_the_first_call():
    held = lease.acquire("cycle:t", holder="w1", ttl_s=60)
    assert held is not None
    fence = lease.FlushingFence(held)
    _, sent = _statements(fence.check)
    assert len(sent) == 1
    assert sent[0].startswith("UPDATE")
    assert fence.flushed
    _, sent = _statements(fence.check)
    assert sent == []  # once: the WAL is flushed up to the apply's commit
    row = CycleLease.objects.get(name="cycle:t")
    assert (row.holder, row.token, row.expires_at) == (held.holder, held.token, held.expires_at)


def test_the_fence_of_a_lost_lease_refuses_before_any_call():
    held = lease.acquire("cycle:t", holder="w1", ttl_s=60)
    assert held is not None
    CycleLease.objects.filter(name="cycle:t").update(holder="w2", token=held.token + 1)
    with pytest.raises(lease.LeaseLost):
        lease.FlushingFence(held).check()
    with transaction.atomic():  # nothing deferred in a transaction: a plain fence
        mine = lease.acquire("cycle:u", holder="w1", ttl_s=60)
        assert mine is not None
        fence = lease.FlushingFence(mine)
        _, sent = _statements(fence.check)
        assert sent == []


def _show() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


def test_a_fence_statement_defers_the_flush_of_its_own_transaction_only():
    held = lease.acquire("cycle:t", holder="w1", ttl_s=60)
    assert held is not None
    assert lease.can_defer_flush() is False  # autocommit: nothing to defer
    with transaction.atomic():
        with transaction.atomic():
            assert lease.can_defer_flush() is False  # a savepoint: the outer commit decides
        assert lease.can_defer_flush() is True
        lease.check(held)
        assert _show() == "on"
        lease.check(held, defer_flush=True)
        assert _show() == "off"
    assert _show() == "on"
    with transaction.atomic():
        placement.lock(fence=held, defer_flush=True)
        assert _show() == "off"
    with transaction.atomic():
        placement.lock(fence=held)
        assert _show() == "on"
    CycleLease.objects.filter(name="cycle:t").update(holder="w2")
    with transaction.atomic(), pytest.raises(lease.LeaseLost):
        lease.check(held, defer_flush=True)


def _deferring(sql: str) -> bool:
    """The fence's statement of an apply that defers its commit's flush."""
    return "FOR UPDATE" in sql and lease.DEFER_FLUSH in sql and lease._NO_FLUSH not in sql


class _Background:
    """The simulated cluster, its calls in the background (as an API server's are), each
    noting whether the fence had flushed before it. Two calls at a time: the process's
    write pool it makes stays narrower than test_cluster_writes expects to widen."""

    write_concurrency = 2

    def __init__(self, inner: Any, log: list[str]) -> None:
        self._inner = inner
        self._log = log

    def admit(self, ref: JobRef, *, node_selector: Any = None) -> None:
        self._log.append(f"admit {ref.name}")
        self._inner.admit(ref, node_selector=node_selector)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_cycle_with_background_calls_flushes_before_them(monkeypatch):
    world = builders.world()
    set_cluster(world.cluster)
    try:
        log: list[str] = []
        real_check = lease.FlushingFence.check
        lock = threading.Lock()

        def check(self: lease.FlushingFence) -> None:
            flushed = self.flushed
            real_check(self)
            if not flushed:
                with lock:
                    log.append("flush")

        monkeypatch.setattr(lease.FlushingFence, "check", check)
        cluster = _Background(world.cluster, log)
        assert calls.can_run_in_background(cluster)
        for i in range(3):
            submit(world, f"j{i}")
        report, sent = _statements(
            lambda: cycle_root("cluster", cluster=cluster, now=world.clock(), background=True)
        )
        assert report is not None
        assert any(_deferring(sql) for sql in sent)
        assert report.pending is not None
        report.pending.result(timeout=30)
        assert len(report.admitted) == 3
        assert log[0] == "flush"
        assert sorted(log[1:]) == ["admit j0", "admit j1", "admit j2"]
        assert Workload.objects.filter(phase="Admitted").count() == 3
        # The lease was given back after the calls, as ever.
        assert CycleLease.objects.get(name="cycle:cluster").holder == ""
    finally:
        set_cluster(None)
        # The background thread keeps its connection between runs: closed, for teardown.
        calls._pool().submit(_close_connections).result(timeout=30)


def _close_connections() -> None:
    from django.db import connections

    connections.close_all()


def test_a_cycle_with_its_calls_in_the_callers_thread_keeps_its_flush():
    world = builders.world()
    set_cluster(world.cluster)
    try:
        submit(world, "j0")
        report, sent = _statements(
            lambda: cycle_root("cluster", cluster=world.cluster, now=world.clock(), background=True)
        )
        assert report is not None
        assert len(report.admitted) == 1
        assert not any(_deferring(sql) for sql in sent)
    finally:
        set_cluster(None)


def test_a_sync_writes_without_the_flush_and_flushes_before_its_first_repair():
    from queueing.choices import Phase
    from queueing.models import SimJob
    from queueing.sync import sync_cluster

    world = builders.world()
    set_cluster(world.cluster)
    try:
        started = submit(world, "started")
        Workload.objects.filter(pk=started.pk).update(phase=Phase.ADMITTED)
        sneaky = submit(world, "sneaky")
        now = world.clock()
        for name in ("started", "sneaky"):
            SimJob.objects.filter(name=name).update(
                suspended=False, state="Running", started_at=now
            )
        held = lease.acquire("sync", ttl_s=60)
        assert held is not None
        report, sent = _statements(lambda: sync_cluster(world.cluster, now=now, lease=held))
        assert report.transitions == 1
        assert report.resuspended == 1
        moved = [i for i, sql in enumerate(sent) if "FOR UPDATE" in sql and "jsonb" in sql]
        assert len(moved) == 1
        assert lease._NO_FLUSH in sent[moved[0]]
        fenced = [i for i, sql in enumerate(sent) if sql.startswith("UPDATE") and "lease" in sql]
        assert len(fenced) == 1  # the fence's write, once, after the transition
        assert fenced[0] > moved[0]
        suspended = [i for i, sql in enumerate(sent) if "simjob" in sql.lower() and "UPDATE" in sql]
        assert suspended
        assert min(suspended) > fenced[0]  # the repair's cluster write came after the flush
        assert Workload.objects.get(pk=started.pk).phase == Phase.RUNNING
        assert Workload.objects.get(pk=sneaky.pk).phase == Phase.PENDING
        assert SimJob.objects.get(name="sneaky").suspended
    finally:
        set_cluster(None)
