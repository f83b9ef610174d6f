"""The world of a tree kept in memory (queueing.world): incremental, and always what a
fresh read of the database says."""

from __future__ import annotations

import logging
import random
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils.timezone import now as timezone_now

from queueing import actions, state, world
from queueing.admission import cycle_root, tick
from queueing.choices import Phase
from queueing.models import CycleRun, Workload
from queueing.state.snapshot import WORLD_FIELDS
from queueing.world import LIVE, LocalJournal, TreeWorld, record_now_and_on_commit
from tests.builders import SYSTEM, submit

pytestmark = pytest.mark.django_db


def from_database(root_quota_ids: list[int]) -> dict[int, dict]:
    rows = Workload.objects.filter(quota_id__in=root_quota_ids, phase__in=list(LIVE))
    return {row["id"]: row for row in rows.values(*WORLD_FIELDS)}


@pytest.fixture
def journal():
    local = LocalJournal()
    world.set_journal(local)
    yield local
    world.set_journal(None)


def test_a_refresh_rereads_only_what_the_journal_names(
    world, journal, django_capture_on_commit_callbacks
):
    for i in range(6):
        submit(world, f"w{i}", cpu="4", runtime=30)
    with django_capture_on_commit_callbacks(execute=True):
        cycle_root("cluster", cluster=world.cluster, now=world.clock())  # builds it, admits 4
    tree = world_of("cluster")
    assert tree.rebuilds == 1
    quota_ids = state.tree_quota_ids("cluster")
    tree.refresh(quota_ids)  # what the next cycle starts with: the admissions, re-read
    # The four admitted; the two left waiting were annotated, which this world took in
    # place (world.record_cycle).
    assert tree.reread == 4
    assert tree.rows == from_database(quota_ids)
    # Changes of three kinds: a submission, a cancellation, jobs that start (the sync).
    new = submit(world, "late", cpu="4")
    actions.cancel_workload(SYSTEM, Workload.objects.get(name="w5"))
    world.clock.advance(1)
    tick(cluster=world.cluster, now=world.clock())
    tree.refresh(quota_ids)
    assert tree.rebuilds == 1  # never read whole again
    assert new.pk in tree.rows
    assert Workload.objects.get(name="w5").pk not in tree.rows
    assert tree.rows == from_database(quota_ids)
    assert {row["phase"] for row in tree.rows.values()} == {Phase.RUNNING, Phase.PENDING}


@pytest.mark.parametrize("commits", [False, True], ids=["in-a-transaction", "committed"])
def test_the_world_stays_what_the_database_says_through_random_histories(
    world, journal, commits, django_capture_on_commit_callbacks
):
    # "committed": what runs after each commit runs (the annotations taken in place).
    rng = random.Random(7)
    quota_ids = state.tree_quota_ids("cluster")
    names = 0
    for _step in range(40):
        choice = rng.random()
        if choice < 0.45:
            names += 1
            submit(
                world,
                f"r{names}",
                cpu=str(rng.choice([1, 2, 4, 8])),
                priority=rng.choice([0, 5, 10]),
                runtime=rng.choice([1, 5, 20]),
            )
        elif choice < 0.6:
            live = list(Workload.objects.filter(phase__in=list(LIVE)).order_by("id"))
            if live:
                actions.cancel_workload(SYSTEM, rng.choice(live))
        elif commits:
            with django_capture_on_commit_callbacks(execute=True):
                tick(cluster=world.cluster, now=world.clock.advance(rng.choice([0.5, 2, 6])))
        else:
            tick(cluster=world.cluster, now=world.clock.advance(rng.choice([0.5, 2, 6])))
        tree = world_of("cluster")
        tree.refresh(quota_ids)
        assert tree.rows == from_database(quota_ids)
    assert world_of("cluster").rebuilds == 1


def test_annotations_are_taken_in_place_and_other_worlds_read_them(
    world, journal, django_capture_on_commit_callbacks
):
    for i in range(6):
        submit(world, f"w{i}", cpu="4", runtime=30)
    quota_ids = state.tree_quota_ids("cluster")
    other = TreeWorld("cluster")  # another process's world of the same tree
    other.refresh(quota_ids)
    mine = world_of("cluster")
    mine.refresh(quota_ids)
    with django_capture_on_commit_callbacks(execute=True):
        report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    assert len(report.admitted) == 4
    waiting = Workload.objects.filter(phase=Phase.PENDING)
    assert waiting.count() == 2
    assert all(w.position is not None and w.reason for w in waiting)  # annotated
    mine.refresh(quota_ids)
    assert mine.reread == 4  # the admitted only: the annotations were taken in place
    assert mine.rows == from_database(quota_ids)
    other.refresh(quota_ids)
    assert other.reread == 6  # the admitted and the annotated
    assert other.rows == from_database(quota_ids)
    assert mine.rebuilds == other.rebuilds == 1


def world_of(root: str) -> world.TreeWorld:
    return world.world_of(root)


def test_an_id_read_before_its_commit_is_read_again(world, journal):
    # A reader in another process may take an id from the journal before the writer
    # commits (it sees the old row); a writer killed after its commit never records it
    # again. The world reads every id once more at its next refresh.
    first = submit(world, "a", cpu="4")
    quota_ids = state.tree_quota_ids("cluster")
    tree = world_of("cluster")
    tree.refresh(quota_ids)
    journal.append({"cluster": [first.pk]})
    tree.refresh(quota_ids)  # takes the id (the "commit" has not happened yet)
    Workload.objects.filter(pk=first.pk).update(phase=Phase.CANCELLED)  # now it commits
    tree.refresh(quota_ids)  # no new record: the second read sees it
    assert first.pk not in tree.rows
    assert tree.rebuilds == 1


def test_a_transaction_record_without_its_commit_record_is_read_again(world, journal):
    # The record made inside a transaction, then the writer killed between its commit
    # and its record after the commit: read at the next refresh all the same.
    first = submit(world, "a", cpu="4")
    quota_ids = state.tree_quota_ids("cluster")
    tree = world_of("cluster")
    tree.refresh(quota_ids)
    journal.append({"cluster": [first.pk]}, tx="t1")
    tree.refresh(quota_ids)  # takes the id before the commit
    Workload.objects.filter(pk=first.pk).update(phase=Phase.CANCELLED)  # the commit
    tree.refresh(quota_ids)  # no record after it: the second read sees it
    assert first.pk not in tree.rows
    assert tree.rebuilds == 1


def test_rows_whose_commit_was_recorded_before_the_refresh_are_read_once(
    world, journal, django_capture_on_commit_callbacks
):
    # The sync's moves, committed (and recorded after the commit) before the cycles
    # that follow it refresh: read once, not at the next refresh again.
    for i in range(3):
        submit(world, f"w{i}", cpu="1")
    quota_ids = state.tree_quota_ids("cluster")
    tree = world_of("cluster")
    tree.refresh(quota_ids)
    ids = list(Workload.objects.values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        Workload.objects.filter(pk__in=ids).update(priority=7)
        record_now_and_on_commit({"cluster": ids})
    tree.refresh(quota_ids)
    assert tree.reread == 3
    assert {row["priority"] for row in tree.rows.values()} == {7}
    tree.refresh(quota_ids)
    assert tree.reread == 0  # nothing new, nothing read again
    # Control: a record whose commit is not recorded yet is read again.
    with transaction.atomic():
        Workload.objects.filter(pk=ids[0]).update(priority=8)
        record_now_and_on_commit({"cluster": ids[:1]})  # its commit record dropped
    tree.refresh(quota_ids)
    tree.refresh(quota_ids)
    assert tree.reread == 1
    assert tree.rows[ids[0]]["priority"] == 8


def test_a_lost_journal_makes_the_world_rebuild(world, journal):
    submit(world, "a", cpu="4")
    quota_ids = state.tree_quota_ids("cluster")
    tree = world_of("cluster")
    tree.refresh(quota_ids)
    assert tree.rebuilds == 1
    tree.refresh(quota_ids)
    assert tree.rebuilds == 1  # positive control: nothing lost, no rebuild
    journal.reset()  # as if Redis restarted
    submit(world, "b", cpu="4")
    tree.refresh(quota_ids)
    assert tree.rebuilds == 2
    assert tree.rows == from_database(quota_ids)


def test_a_cycle_reads_no_workload_of_its_tree_but_those_the_journal_names(world, journal):
    for i in range(5):
        submit(world, f"w{i}", cpu="1", runtime=600)
    cycle_root("cluster", cluster=world.cluster, now=world.clock())  # builds the world
    submit(world, "new", cpu="1")
    with CaptureQueriesContext(connection) as queries:
        report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    assert len(report.admitted) == 1
    table = Workload._meta.db_table
    reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].lstrip().upper().startswith("SELECT") and f'"{table}"."pod_sets"' in q["sql"]
    ]
    # One read of rows: the journal's ids, by id.
    assert len(reads) == 1, reads
    assert f'"{table}"."id" IN' in reads[0]


def test_the_world_remembers_what_arrived_for_the_forecast(world, journal):
    # What the world read at its build is not an arrival it saw; what the journal
    # names afterwards, new to it, is -- once, and kept when it finishes (the forecast
    # replays work like the last ten minutes' arrivals, finished or not).
    old = submit(world, "old", cpu="1", runtime=600)
    tree = world_of("cluster")
    quota_ids = state.tree_quota_ids("cluster")
    tree.refresh(quota_ids)
    assert list(tree.arrived) == []
    new = submit(world, "new", cpu="2", runtime=60, priority=5)
    tree.refresh(quota_ids)
    assert [row["name"] for row in tree.arrived] == ["new"]
    actions.transition(new, Phase.BACKOFF, reason="test", requeue_at=None)
    actions.transition(old, Phase.BACKOFF, reason="test", requeue_at=None)
    tree.refresh(quota_ids)
    assert [row["name"] for row in tree.arrived] == ["new"]  # moves are no arrivals
    nodes = world.cluster.nodes()
    # Arrivals are dated by the database (their queue-order time), not the test's clock.
    at = Workload.objects.get(name="new").queue_order_at + timedelta(seconds=30)
    with CaptureQueriesContext(connection) as queries:
        snapshot, _ = state.build_snapshot("cluster", nodes=nodes, now=at, world=tree)
    got = [w for w in snapshot.recent_arrivals if w.name == "new"]
    assert len(got) == 1
    assert (got[0].priority, got[0].expected_runtime_s, got[0].request.get("cpu")) == (
        5,
        60.0,
        2000,
    )
    # Read from the world's rows: no query of the tree's workloads' pod sets.
    table = Workload._meta.db_table
    assert not [q for q in queries.captured_queries if f'"{table}"."pod_sets"' in q["sql"]]
    # Their rate is counted over the time the world has watched, not over the tree's
    # age: "old" was there before it (a worker just started would otherwise read the
    # arrivals of its first minute as those of the whole window).
    since = tree.watching_since
    assert since is not None
    assert Workload.objects.get(name="old").created_at < since
    assert snapshot.arrival_span_s == pytest.approx((at - since).total_seconds())
    # A rebuild keeps what the world has watched, and since when; what arrived since
    # the last read and the rebuild finds is an arrival too (the journal would have
    # named it), once.
    tree.invalidate()
    submit(world, "between", cpu="1", runtime=60)
    tree.refresh(quota_ids)
    assert tree.watching_since == since
    assert [row["name"] for row in tree.arrived] == ["new", "between"]
    tree.invalidate()
    tree.refresh(quota_ids)
    assert [row["name"] for row in tree.arrived] == ["new", "between"]


def test_heads_from_the_world_are_the_heads_from_the_database(world, journal, settings):
    made = [submit(world, f"w{i}", cpu="2", priority=i % 3, runtime=600) for i in range(12)]
    nodes = world.cluster.nodes()
    tree = world_of("cluster")
    tree.refresh(state.tree_quota_ids("cluster"))
    from_db, _ = state.build_snapshot("cluster", nodes=nodes, now=world.clock(), head=3)
    from_mem, index = state.build_snapshot(
        "cluster", nodes=nodes, now=world.clock(), head=3, world=tree
    )
    assert from_mem.workloads == from_db.workloads
    assert from_mem.unlisted_demand == from_db.unlisted_demand == {"team-a-q": {"cpu": 18000}}
    assert index.unlisted == 9
    # Backoff: two due (they compete), two later (they do not), one at the very front.
    later = world.clock() + timedelta(minutes=5)
    earlier = world.clock() - timedelta(minutes=5)
    for workload, requeue_at in zip(made[:4], (later, later, earlier, None), strict=True):
        actions.transition(workload, Phase.BACKOFF, reason="test", requeue_at=requeue_at)
    tree.refresh(state.tree_quota_ids("cluster"))
    assert tree.rebuilds == 1  # the journal carried the moves
    for head in (1, 3, 20):
        from_db, db_index = state.build_snapshot(
            "cluster", nodes=nodes, now=world.clock(), head=head
        )
        from_mem, index = state.build_snapshot(
            "cluster", nodes=nodes, now=world.clock(), head=head, world=tree
        )
        assert sorted(w.id for w in from_mem.workloads) == sorted(w.id for w in from_db.workloads)
        assert from_mem.unlisted_demand == from_db.unlisted_demand
        assert index.unlisted == db_index.unlisted
    assert index.unlisted == 0  # head 20: all ten competing are listed


def test_a_queues_front_is_kept_as_rows_come_and_go(world, journal):
    """A queue without Backoff or aged rows keeps its front (``QueueOrder.plain_front``)
    and moves it as rows come and go, ahead of it, in it or behind it: each select lists
    what a read of the database does."""
    made = [submit(world, f"f{i}", cpu=str(1 + i % 3), priority=i % 2) for i in range(6)]
    nodes = world.cluster.nodes()
    tree = world_of("cluster")
    quota_ids = state.tree_quota_ids("cluster")

    def heads(head: int) -> set[int]:
        tree.refresh(quota_ids)
        from_db, db_index = state.build_snapshot(
            "cluster", nodes=nodes, now=world.clock(), head=head
        )
        from_mem, index = state.build_snapshot(
            "cluster", nodes=nodes, now=world.clock(), head=head, world=tree
        )
        assert from_mem.workloads == from_db.workloads
        assert from_mem.unlisted_demand == from_db.unlisted_demand
        assert index.unlisted == db_index.unlisted
        return {w.id for w in from_mem.workloads}

    first = {made[1].pk, made[3].pk}  # priority 1 first, in the order they queued
    assert heads(2) == first
    (order,) = tree.queues.values()
    kept = order.front
    assert kept is not None
    behind = submit(world, "behind", cpu="1", priority=0)
    assert heads(2) == first  # a row behind the front leaves it as it was
    top = submit(world, "top", cpu="3", priority=9)
    assert heads(2) == {top.pk, made[1].pk}  # a row ahead of it pushes its last out
    actions.transition(top, Phase.CANCELLED, reason="test")
    assert heads(2) == first  # and that one moves up again when it goes
    actions.transition(made[1], Phase.CANCELLED, reason="test")
    assert heads(2) == {made[3].pk, made[5].pk}
    actions.transition(behind, Phase.CANCELLED, reason="test")
    assert heads(2) == {made[3].pk, made[5].pk}
    assert order.front is kept  # moved in place all along, never read again
    assert heads(8) == {made[i].pk for i in (0, 2, 3, 4, 5)}  # another head: read again
    assert order.front is not kept
    kept = order.front
    for i in (0, 3):  # a front holding the whole queue
        actions.transition(made[i], Phase.CANCELLED, reason="test")
    again = submit(world, "again", cpu="2", priority=0)
    assert heads(8) == {made[i].pk for i in (2, 4, 5)} | {again.pk}
    assert order.front is kept


@pytest.mark.parametrize("seed", range(20))
def test_a_kept_front_is_the_first_keys_of_its_queue_through_random_moves(seed):
    """``QueueOrder``'s kept front, moved as rows come and go in any order, stays the
    queue's first ``head`` keys and their total request (no database)."""
    from queueing.queueorder import QueueOrder

    rng = random.Random(seed)
    order = QueueOrder()
    live: dict[int, dict[str, Any]] = {}
    start = timezone_now()
    for step in range(300):
        if live and rng.random() < 0.45:
            order.remove(live.pop(rng.choice(sorted(live))))
        else:
            workload_id = step + 1
            row = {
                "id": workload_id,
                "priority": rng.choice([0, 1, 5]),
                "queue_order_at": start + timedelta(seconds=rng.randrange(50)),
                "phase": Phase.BACKOFF if rng.random() < 0.1 else Phase.PENDING,
                "quota_id": rng.choice([1, 2]),
                "total_request": {"cpu": rng.randrange(1, 9) * 1000, "memory": rng.randrange(3)},
            }
            live[workload_id] = row
            order.add(row)
        if rng.random() < 0.3:
            head = rng.choice([1, 3, 8]) if rng.random() < 0.2 else order.head or 3
            first, charged = order.plain_front(head)
            assert first == order.keys[:head]
            want: dict[int, dict[str, int]] = {}
            for key in first:
                row = live[key[2]]
                bucket = want.setdefault(row["quota_id"], {})
                for resource, amount in row["total_request"].items():
                    bucket[resource] = bucket.get(resource, 0) + amount
            got = {q: {r: a for r, a in b.items() if a} for q, b in charged.items()}
            assert {q: b for q, b in got.items() if b} == {
                q: {r: a for r, a in b.items() if a} for q, b in want.items() if any(b.values())
            }


def test_the_rows_read_again_are_those_the_orm_reads(world, journal):
    """``_rows_by_id`` (the refresh's re-read, compiled once) reads what
    ``filter(id__in=...).values(*WORLD_FIELDS)`` does, conversions included."""
    from queueing.world import _rows_by_id

    made = [submit(world, f"r{i}", cpu=str(3 + 2 * i), priority=i) for i in range(4)]
    cycle_root("cluster", cluster=world.cluster, now=world.clock())  # the last two admitted
    ids = [w.pk for w in made] + [10**9]
    orm = {row["id"]: row for row in Workload.objects.filter(id__in=ids).values(*WORLD_FIELDS)}
    for _ in range(2):  # compiled, then kept
        got = {row["id"]: row for row in _rows_by_id(ids)}
        assert got == orm
        assert [list(row) for row in got.values()] == [list(row) for row in orm.values()]
    assert {row["phase"] for row in orm.values()} == {Phase.ADMITTED, Phase.PENDING}
    assert any(row["admitted_at"] is not None for row in got.values())
    assert all(isinstance(row["pod_sets"], list) for row in got.values())


def test_a_re_read_whose_sql_is_not_the_expected_one_falls_back_to_the_orm(
    world, journal, monkeypatch, caplog
):
    """Should another Django write the ORM's statement otherwise, the re-read is the
    ORM's own query (built each time), said once, never an error in the cycle."""
    import queueing.world as world_mod

    made = [submit(world, f"f{i}", cpu="2") for i in range(2)]
    ids = [w.pk for w in made]
    monkeypatch.setattr(world_mod, "_IN", '"queueing_workload"."nothing" IN (%s)')
    monkeypatch.setattr(world_mod, "_compiled", threading.local())
    orm = list(Workload.objects.filter(id__in=ids).values(*WORLD_FIELDS))
    with caplog.at_level(logging.WARNING, logger="queueing.world"):
        assert world_mod._rows_by_id(ids) == orm
        assert world_mod._rows_by_id(ids) == orm
    said = [r for r in caplog.records if "not compiled once" in r.getMessage()]
    assert len(said) == 1


def test_a_conflict_sends_the_world_back_to_the_database(world, journal):
    first = submit(world, "a", cpu="4")
    tree = world_of("cluster")
    cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert tree.rebuilds == 1
    # A write behind the journal's back (as a lost notification would be): the world
    # still believes "b" waits, the database says it was cancelled.
    second = submit(world, "b", cpu="4")
    tree.refresh(state.tree_quota_ids("cluster"))
    tree.refresh(state.tree_quota_ids("cluster"))  # read twice (world.TreeWorld.again)
    Workload.objects.filter(pk=second.pk).update(phase=Phase.CANCELLED)
    report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    assert report.conflicts == 1
    assert report.admitted == []
    assert Workload.objects.get(pk=second.pk).phase == Phase.CANCELLED  # not admitted
    cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert tree.rebuilds == 2
    assert second.pk not in tree.rows
    assert first.pk in tree.rows


# -- heads in the engine's queue order (aged first) -------------------------------------


def _engine_heads(head: int, now) -> set[int]:
    """Each queue's first ``head`` competing workloads, sorted by the engine's own key."""
    from queueing.engine.aging import order_key
    from queueing.models import Queue

    bounds = dict(Queue.objects.values_list("id", "aging_bound_s"))
    competing = [
        w
        for w in Workload.objects.filter(phase__in=[Phase.PENDING, Phase.BACKOFF])
        if w.phase == Phase.PENDING or w.requeue_at is None or w.requeue_at <= now
    ]
    out: set[int] = set()
    for queue_id in {w.queue_id for w in competing}:
        mine = [
            _Row(w.pk, w.priority, w.queue_order_at.timestamp())
            for w in competing
            if w.queue_id == queue_id
        ]
        mine.sort(key=order_key(bounds[queue_id], now.timestamp()))
        out |= {r.id for r in mine[:head]}
    return out


class _Row:
    def __init__(self, wid: int, priority: int, queued: float) -> None:
        self.id, self.priority, self.queue_order_at = wid, priority, queued


def test_heads_are_the_first_in_the_engines_order_aged_first(world, journal):
    """A heads-only snapshot lists each queue's first workloads as the engine orders the
    queue (queueing.engine.aging.order_key): those that waited the queue's aging bound go
    first, in the order they queued, whatever their priority -- from the world and from
    the database alike."""
    rng = random.Random(11)
    now = world.clock()
    made = [
        submit(world, f"h{i}", cpu="1", priority=rng.choice([0, 5, 10]), runtime=600)
        for i in range(30)
    ]
    # Queued between 20 minutes and a minute ago: about half past the 300 s bound, some
    # exactly on it; a few backing off (two not due yet).
    for i, workload in enumerate(made):
        waited = 300.0 if i % 7 == 0 else rng.uniform(60, 1200)
        Workload.objects.filter(pk=workload.pk).update(
            queue_order_at=now - timedelta(seconds=waited)
        )
    for workload, requeue_at in zip(
        made[:4],
        (now + timedelta(minutes=5), None, now - timedelta(minutes=1), now + timedelta(minutes=1)),
        strict=True,
    ):
        actions.transition(workload, Phase.BACKOFF, reason="test", requeue_at=requeue_at)
    tree = world_of("cluster")
    tree.refresh(state.tree_quota_ids("cluster"))
    nodes = world.cluster.nodes()
    aged = {
        w.pk
        for w in Workload.objects.filter(phase__in=[Phase.PENDING, Phase.BACKOFF])
        if (now - w.queue_order_at).total_seconds() >= 300
    }
    for head in (1, 3, 8, 40):
        expected = _engine_heads(head, now)
        from_db, db_index = state.build_snapshot("cluster", nodes=nodes, now=now, head=head)
        from_mem, index = state.build_snapshot(
            "cluster", nodes=nodes, now=now, head=head, world=tree
        )
        waiting_db = {w.id for w in from_db.workloads if w.phase in (Phase.PENDING, Phase.BACKOFF)}
        waiting_mem = {
            w.id for w in from_mem.workloads if w.phase in (Phase.PENDING, Phase.BACKOFF)
        }
        assert waiting_db == waiting_mem == expected, head
        assert from_mem.unlisted_demand == from_db.unlisted_demand
        assert index.unlisted == db_index.unlisted
        if head == 8:
            assert expected <= aged  # eight aged ones lead the queue, whatever their priority
    # Positive control: with aging off the heads are the highest priorities again.
    world.queue.aging_bound_s = None
    world.queue.save(update_fields=["aging_bound_s"])
    from_db, _ = state.build_snapshot("cluster", nodes=nodes, now=now, head=3)
    top = {w.id for w in from_db.workloads if w.phase in (Phase.PENDING, Phase.BACKOFF)}
    assert {w.priority for w in Workload.objects.filter(pk__in=top)} == {10}
    assert top == _engine_heads(3, now)


@pytest.mark.parametrize("in_memory", [True, False], ids=["world", "database"])
@pytest.mark.parametrize("aging", [300.0, None], ids=["aging", "no-aging"])
def test_a_heads_only_cycle_admits_an_aged_low_priority_workload_past_its_head_limit(
    world, journal, settings, monkeypatch, in_memory, aging
):
    """Issue 11 (live): heads-only cycles listed each queue's first HEAD_ROWS by priority,
    so an aged low-priority workload behind them was seen only by full cycles."""
    settings.KQ_WORLD = in_memory
    settings.KQ_FORECAST_EVERY_S = 1000.0  # after the first, cycles only admit, from heads
    monkeypatch.setattr(state, "HEAD_ROWS", 2)
    world.queue.aging_bound_s = aging
    world.queue.save(update_fields=["aging_bound_s"])
    # 2 x 8 cpu nodes, quota max 16: a high-priority hog holds 14 cpu, 1 free per node.
    submit(world, "hog", cpu="7", count=2, priority=20, runtime=3600)
    first = cycle_root("cluster", cluster=world.cluster, now=world.clock())  # forecasting
    assert first is not None
    assert len(first.admitted) == 1
    # Four high-priority 4-cpu jobs that do not fit its quota, and behind them by
    # priority a 1-cpu job that fits and has waited past the queue's aging bound.
    now = world.clock.advance(1)
    high = [submit(world, f"high{i}", cpu="4", priority=10, runtime=600) for i in range(4)]
    old = submit(world, "old", cpu="1", priority=0, runtime=600)
    for workload, waited in [*((h, 10.0) for h in high), (old, 400.0)]:
        Workload.objects.filter(pk=workload.pk).update(
            queue_order_at=now - timedelta(seconds=waited)
        )
    world_of("cluster").invalidate()  # the rows were changed behind the journal's back
    report = cycle_root("cluster", cluster=world.cluster, now=now)
    assert report is not None
    run = CycleRun.objects.get(pk=report.cycle_id)
    assert run.stats["full"] == 0.0  # a heads-only cycle
    if aging is None:
        # Control: the heads are two high-priority jobs, which do not fit; the old one,
        # not aged without a bound, is not listed and not admitted.
        assert report.admitted == []
    else:
        assert report.admitted == [old.pk]
    assert Workload.objects.get(pk=old.pk).phase == (
        Phase.PENDING if aging is None else Phase.ADMITTED
    )


@pytest.mark.parametrize("kind", ["local", "redis"])
def test_the_journal_tells_which_ids_are_not_settled(kind, settings):
    """Both journals: an id is unsettled while its transaction's record after the commit
    is not among the entries read (or its record names no transaction)."""
    if kind == "redis":
        if not settings.REDIS_URL:
            pytest.skip("needs REDIS_URL")
        found = world.RedisJournal(settings.REDIS_URL)
        found.client.delete(found.key("t-settled"))
    else:
        found = LocalJournal()
    root = "t-settled"
    start = found.head(root)
    found.append({root: [1, 2]}, tx="a")  # inside transaction a
    found.append({root: [3]}, tx="b")  # inside transaction b
    found.append({root: [1, 2]}, tx="a", done=True)  # a committed
    found.append({root: [4]})  # an old writer's record: no transaction named
    found.append({root: [5]}, done=True)  # autocommitted
    found.append({root: [6]}, by="me", tx="c")  # the reader's own cycle
    cursor, ids, own, unsettled = found.since(root, start, reader="me")
    assert ids == {1, 2, 3, 4, 5}
    assert own == {6}
    assert unsettled == {3, 4}
    found.append({root: [3]}, tx="b", done=True)  # b committed
    _, ids, _, unsettled = found.since(root, cursor, reader="me")
    assert (ids, unsettled) == ({3}, set())
    if kind == "redis":
        found.client.delete(found.key(root))


@pytest.mark.parametrize("kind", ["local", "redis"])
def test_one_read_of_several_trees_journals_answers_as_a_read_of_each(kind, settings):
    """A pass reads the journal of all its trees at once (``since_many``): each answer is
    ``since``'s for that tree, its cursor, reader, trimmed or lost stream included."""
    roots = ["t-many-a", "t-many-b", "t-many-gone"]
    if kind == "redis":
        if not settings.REDIS_URL:
            pytest.skip("needs REDIS_URL")
        found: Any = world.RedisJournal(settings.REDIS_URL)
        found.client.delete(*(found.key(root) for root in roots))
    else:
        found = LocalJournal()
    a, b = found.head(roots[0]), found.head(roots[1])
    found.append({roots[0]: [1, 2], roots[1]: [7]}, done=True)
    found.append({roots[0]: [3]}, by="me-a", tx="x")
    found.append({roots[1]: [8]}, tx="y")
    middle = found.head(roots[1])
    found.append({roots[1]: [9]}, done=True)
    reads = {roots[0]: (a, "me-a"), roots[1]: (middle, "me-b"), roots[2]: ("5-0", "me")}
    many = found.since_many(reads)
    one = {root: found.since(root, cursor, reader=who) for root, (cursor, who) in reads.items()}
    assert many == one
    assert many[roots[0]][1:] == ({1, 2}, {3}, set())
    assert many[roots[1]][1] == {9}
    assert many[roots[2]][1] is None  # a cursor the journal cannot answer for: rebuild
    assert found.since_many({}) == {}
    assert found.since_many({roots[1]: (b, "")})[roots[1]][1] == {7, 8, 9}
    if kind == "redis":
        found.client.delete(*(found.key(root) for root in roots))
