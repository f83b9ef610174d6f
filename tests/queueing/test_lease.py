"""The cycle's leases taken and given back a pass at a time (queueing.lease: acquire_many,
release_many, keep), with the fencing of each tree exactly as a lease taken alone."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from queueing import admission, lease
from queueing.admission import CycleSummary, _cycle_roots
from queueing.choices import Phase
from queueing.models import CycleLease, Workload
from tests import builders
from tests.builders import submit

pytestmark = pytest.mark.django_db


def test_a_pass_takes_its_leases_with_the_tokens_acquire_would_give():
    # "a": taken and released once (token 1); "b": held by another; "c": its holder's
    # lease expired; "d": never taken (no row).
    first = lease.acquire("a", holder="w1", ttl_s=60)
    assert first is not None
    assert first.token == 1
    lease.release(first)
    assert lease.acquire("b", holder="other", ttl_s=60) is not None
    assert lease.acquire("c", holder="gone", ttl_s=60) is not None
    CycleLease.objects.filter(name="c").update(expires_at=timezone.now() - timedelta(seconds=1))
    taken = lease.acquire_many(["a", "b", "c", "d"], holder="w1", ttl_s=60)
    assert {name: held.token for name, held in taken.items()} == {"a": 2, "c": 2, "d": 1}
    assert {held.holder for held in taken.values()} == {"w1"}
    rows = {r.name: (r.holder, r.token) for r in CycleLease.objects.all()}
    assert rows == {"a": ("w1", 2), "b": ("other", 1), "c": ("w1", 2), "d": ("w1", 1)}
    # The same as one at a time: the next take of each counts on from there.
    assert lease.acquire("d", holder="w1", ttl_s=60).token == 2  # type: ignore[union-attr]
    assert lease.acquire_many([], holder="w1") == {}


def test_a_pass_gives_back_only_the_leases_it_still_holds():
    taken = lease.acquire_many(["a", "b", "c"], holder="w1", ttl_s=60)
    assert set(taken) == {"a", "b", "c"}
    # "b" expired and another worker took it: the pass's release leaves it held.
    CycleLease.objects.filter(name="b").update(expires_at=timezone.now() - timedelta(seconds=1))
    theirs = lease.acquire("b", holder="w2", ttl_s=60)
    assert theirs is not None
    lease.release_many(taken.values())
    rows = {r.name: r.holder for r in CycleLease.objects.all()}
    assert rows == {"a": "", "b": "w2", "c": ""}
    from django.db import transaction

    with transaction.atomic():
        lease.check(theirs)  # still theirs
    with pytest.raises(lease.LeaseLost), transaction.atomic():
        lease.check(taken["b"])


def test_a_lease_taken_ahead_is_renewed_when_half_its_time_is_gone():
    held = lease.acquire_many(["a"], holder="w1", ttl_s=60)["a"]
    assert lease.keep(held, ttl_s=60) is held  # fresh: no statement, the same lease
    later = held.expires_at - timedelta(seconds=40)
    CycleLease.objects.filter(name="a").update(expires_at=later)
    aged = lease.Lease(name="a", holder="w1", token=held.token, expires_at=later)
    kept = lease.keep(aged, ttl_s=60)
    assert kept is not None
    assert (kept.token, kept.expires_at > later) == (held.token, True)
    # Expired and taken by another meanwhile: lost.
    CycleLease.objects.filter(name="a").update(expires_at=timezone.now() - timedelta(seconds=1))
    assert lease.acquire("a", holder="w2", ttl_s=60) is not None
    assert lease.keep(aged, ttl_s=60) is None


def test_a_tree_whose_lease_the_pass_lost_writes_nothing_and_the_others_are_cycled(
    world, monkeypatch
):
    """The fencing of a pass's leases is each tree's: a tree whose lease another worker
    took over while the pass cycled the trees before it writes nothing of its cycle, and
    the pass's release leaves the other worker's lease alone."""
    other = builders.tree("other")
    submit(world, "mine", cpu="1")
    submit(world, "theirs", cpu="1", quota=other)
    real = admission.engine_cycle
    stolen: list[lease.Lease] = []

    def engine_cycle(snapshot: Any, **kwargs: Any) -> Any:
        if any(q.name == "other" for q in snapshot.quotas):
            # Between the snapshot and the apply of "other", the pass's lease ran out (a
            # stall) and another worker took it.
            CycleLease.objects.filter(name="cycle:other").update(
                expires_at=timezone.now() - timedelta(seconds=1)
            )
            took = lease.acquire("cycle:other", holder="another-worker", ttl_s=60)
            assert took is not None
            stolen.append(took)
        return real(snapshot, **kwargs)

    monkeypatch.setattr(admission, "engine_cycle", engine_cycle)
    summary = CycleSummary()
    _cycle_roots(world.cluster, ["cluster", "other"], world.clock(), summary)
    assert len(stolen) == 1  # positive control: the engine of "other" ran
    assert summary.roots == ["cluster"]
    assert summary.skipped == ["other"]
    assert dict(Workload.objects.values_list("name", "phase")) == {
        "mine": Phase.ADMITTED,
        "theirs": Phase.PENDING,
    }
    row = CycleLease.objects.get(name="cycle:other")
    assert (row.holder, row.token) == ("another-worker", stolen[0].token)
    assert CycleLease.objects.get(name="cycle:cluster").holder == ""  # given back


def test_a_tree_held_by_another_worker_is_skipped_and_left_to_its_holder(world):
    other = builders.tree("other")
    submit(world, "mine", cpu="1")
    submit(world, "theirs", cpu="1", quota=other)
    theirs = lease.acquire("cycle:other", holder="another-worker", ttl_s=60)
    assert theirs is not None
    summary = CycleSummary()
    _cycle_roots(world.cluster, ["cluster", "other"], world.clock(), summary)
    assert (summary.roots, summary.skipped) == (["cluster"], ["other"])
    row = CycleLease.objects.get(name="cycle:other")
    assert (row.holder, row.token) == ("another-worker", theirs.token)
    assert Workload.objects.get(name="theirs").phase == Phase.PENDING


def test_an_error_mid_pass_gives_back_every_lease_of_the_pass(world, monkeypatch):
    builders.tree("other")
    builders.tree("third")
    real = admission.cycle_root

    def cycle_root(root: str, **kwargs: Any) -> Any:
        if root == "other":
            raise RuntimeError("the database went away")
        return real(root, **kwargs)

    monkeypatch.setattr(admission, "cycle_root", cycle_root)
    with pytest.raises(RuntimeError):
        _cycle_roots(world.cluster, ["cluster", "other", "third"], world.clock(), CycleSummary())
    # "cluster" was cycled, "other" failed, "third" never reached: all free again.
    held = dict(CycleLease.objects.filter(name__startswith="cycle:").values_list("name", "holder"))
    assert held == {"cycle:cluster": "", "cycle:other": "", "cycle:third": ""}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_lease_row_locked_by_another_transaction_is_skipped_not_waited_for():
    """Another worker's apply holds its lease row locked to its commit (lease.check): the
    pass leaves that lease rather than wait behind the apply for a lease it would find
    held anyway (a waiting take would get it once the lock goes: it is free here)."""
    from django.db import connections, transaction

    lease.acquire_many(["a", "b"], holder="w0", ttl_s=60)
    CycleLease.objects.update(holder="", expires_at=None)
    locked = threading.Event()
    done = threading.Event()

    def holder() -> None:
        try:
            with transaction.atomic():
                list(CycleLease.objects.select_for_update().filter(name="b"))
                locked.set()
                done.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert locked.wait(10)
        taken = lease.acquire_many(["a", "b"], holder="w1", ttl_s=60)
    finally:
        done.set()
        thread.join(30)
    assert set(taken) == {"a"}
    assert lease.acquire_many(["b"], holder="w1", ttl_s=60)["b"].token == 2


def _statements(run: Any) -> list[str]:
    sent: list[str] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep):
        run()
    return sent


def _show_synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


@pytest.mark.skipif(connection.vendor != "postgresql", reason="synchronous_commit: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_leases_are_taken_and_given_back_without_waiting_for_the_flush():
    """In autocommit, takes and releases turn ``synchronous_commit`` off for their own
    statement (lease._NO_FLUSH); a renewal before a cluster write still waits for it. Inside a caller's transaction nothing is
    turned off: that transaction's commit stays as durable as its author made it."""
    from django.db import transaction

    one = lease.acquire("sync", holder="w1", ttl_s=60)
    assert one is not None
    sent = _statements(lambda: lease.acquire_many(["a", "b"], holder="w1", ttl_s=60))
    assert len(sent) == 1
    assert lease._NO_FLUSH in sent[0]
    taken = CycleLease.objects.filter(holder="w1").count()
    assert taken == 3
    many = [
        lease.Lease(r.name, r.holder, r.token, r.expires_at)
        for r in CycleLease.objects.filter(name__in=["a", "b"])
    ]
    sent = _statements(lambda: lease.release_many(many))
    assert len(sent) == 1
    assert lease._NO_FLUSH in sent[0]
    sent = _statements(lambda: lease.release(one))
    assert len(sent) == 1
    assert lease._NO_FLUSH in sent[0]
    assert set(CycleLease.objects.values_list("holder", flat=True)) == {""}
    # A single take (the sync's lease) skips it too; a renewal still flushes.
    sent = _statements(lambda: lease.acquire("sync", holder="w1", ttl_s=60))
    assert len(sent) == 1
    assert lease._NO_FLUSH in sent[0]
    again = lease.acquire_many(["a"], holder="w1", ttl_s=60)["a"]
    sent = _statements(lambda: lease.renew(again, ttl_s=60))
    assert sent
    assert not any(lease._NO_FLUSH in sql for sql in sent)
    # Inside a transaction: left to its commit.
    with transaction.atomic():
        sent = _statements(lambda: lease.release(again))
        assert not any(lease._NO_FLUSH in sql for sql in sent)
        assert _show_synchronous_commit() == "on"
    assert CycleLease.objects.get(name="a").holder == ""


@pytest.mark.skipif(connection.vendor != "postgresql", reason="synchronous_commit: PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_the_no_flush_condition_holds_for_the_rows_it_writes_and_lasts_one_transaction():
    """The condition is true (the row is written) and turns ``synchronous_commit`` off for
    its transaction only; a statement that matches no row leaves it on (no WAL)."""
    from django.db import transaction

    lease.acquire_many(["a"], holder="w1", ttl_s=60)
    table = CycleLease._meta.db_table
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET holder = '' WHERE name = 'missing' AND {lease._NO_FLUSH}"  # noqa: S608
            )
        assert _show_synchronous_commit() == "on"
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET holder = '' WHERE name = 'a' AND {lease._NO_FLUSH}"  # noqa: S608
            )
            assert cursor.rowcount == 1
        assert _show_synchronous_commit() == "off"
    assert _show_synchronous_commit() == "on"
    assert CycleLease.objects.get(name="a").holder == ""
