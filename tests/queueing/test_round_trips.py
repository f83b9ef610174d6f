"""What a cycle and a sync cost in round trips: a constant number of statements per kind
of change, whatever the number of workloads they move (issue 10; docs/realtime.md §4).

Counted: the product's database statements (on PostgreSQL an executemany counts as many
statements as rows) and Redis round trips, by tests/queueing/roundtrips.py. Not counted: the
simulated cluster's own rows (its calls stand for API requests in Kubernetes mode)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from queueing import actions, state
from queueing.admission import cycle_root
from queueing.choices import Phase
from queueing.cluster import set_cluster
from queueing.models import CycleLease, Quota, Workload
from queueing.state import placement
from queueing.state.annotate import write_annotations
from queueing.sync import sync_cluster
from tests import builders
from tests.builders import SYSTEM, submit
from tests.queueing.roundtrips import Count, counting

pytestmark = pytest.mark.django_db

# The product's statements at most, counted as below (PostgreSQL and SQLite alike): a
# cycle that admits (lease, quotas with ledgers, queues, the world's re-read, other
# trees' holdings, runtime history; fence and placement lock -- one statement on
# PostgreSQL --, the placement read, the phases' locked read, one UPDATE per kind, the
# timeline, ledgers, the record; release; the node view unchanged: no read), and a sync
# (the workloads; the phases' locked read, UPDATE, timeline and the moved rows' trees --
# one statement on PostgreSQL --; the time limits' check, at most once a second: these
# syncs are ten seconds apart). A forecasting cycle adds what the forecast reads of history.
WOKEN_CYCLE_AT_MOST = 11 if connection.vendor == "postgresql" else 15
SYNC_AT_MOST = 3 if connection.vendor == "postgresql" else 6
# A pass of three trees in which nothing moves (test_a_pass_of_three_trees_costs_what_it_must).
PASS_OF_THREE_AT_MOST = 20 if connection.vendor == "postgresql" else 22


def product(count: Count) -> int:
    return sum(mine(count).values())


def mine(count: Count) -> dict[str, int]:
    """PostgreSQL: an executemany counts its rows (each a statement on the wire); SQLite
    runs in the process (no round trips), one executemany counts once."""
    counted = count.sql_rows if connection.vendor == "postgresql" else count.sql
    return {w: n for w, n in counted.items() if not w.startswith("cluster.")}


def differ(a: Count, b: Count) -> dict[str, tuple[int, int]]:
    x, y = mine(a), mine(b)
    return {k: (x.get(k, 0), y.get(k, 0)) for k in {*x, *y} if x.get(k, 0) != y.get(k, 0)}


def _small_world() -> builders.World:
    """A 12-cpu tree on two 32-cpu nodes, its cluster installed (conftest unsets it)."""
    w = builders.world(
        nodes=2, node_cpu="32", root_cpu="12", quota_min={"cpu": "12"}, quota_max={"cpu": "12"}
    )
    set_cluster(w.cluster)
    return w


def _world() -> builders.World:
    w = _small_world()
    # 12 cpu held: "a" (2 cpu) ends at 10 s, "b" (10 cpu) at 20 s; 20 wait behind them.
    submit(w, "a", cpu="2", runtime=10)
    submit(w, "b", cpu="10", runtime=20)
    cycle_root("cluster", cluster=w.cluster, now=w.clock())
    sync_cluster(w.cluster, now=w.clock.advance(0.5))  # both run
    for i in range(20):
        submit(w, f"w{i}", cpu="1", runtime=1000)
    cycle_root("cluster", cluster=w.cluster, now=w.clock.advance(0.5))
    return w


@pytest.mark.parametrize("forecast", [False, True], ids=["woken", "forecasting"])
def test_a_cycle_costs_the_same_statements_whatever_it_admits(
    db, settings, forecast, django_capture_on_commit_callbacks, monkeypatch
):
    world_ = _world()
    settings.KQ_FORECAST_EVERY_S = 0.0 if forecast else 3600.0
    # Every cycle full, as on a quiet machine: on a loaded one (CI at load 16) a full cycle
    # took over FULL_CYCLE_CHEAP_S, the next one was heads-only (fewer statements) and the
    # counts differed by the clock, not by what the cycles admitted.
    monkeypatch.setattr(state.annotate, "FULL_CYCLE_CHEAP_S", float("inf"))

    def admit(at: float) -> tuple[int, Count]:
        sync_cluster(world_.cluster, now=world_.clock.advance(at))
        # What runs after the commit (the journal, the live stream) counts too.
        with counting() as count, django_capture_on_commit_callbacks(execute=True):
            report = cycle_root("cluster", cluster=world_.cluster, now=world_.clock())
        assert report is not None
        return len(report.admitted), count

    # The cycle before, its commit's callbacks run (as outside a test's transaction): the
    # tree's world knows what the waiting show, as in the steady state.
    with django_capture_on_commit_callbacks(execute=True):
        cycle_root("cluster", cluster=world_.cluster, now=world_.clock())
    admitted_few, few = admit(10.0)  # "a" ended: 2 admitted
    sync_cluster(world_.cluster, now=world_.clock.advance(1))  # they run
    cycle_root("cluster", cluster=world_.cluster, now=world_.clock())
    admitted_many, many = admit(9.0)  # "b" ended: 10 admitted
    assert (admitted_few, admitted_many) == (2, 10)
    assert product(few) == product(many), differ(few, many)
    assert few.round_trips == many.round_trips, (dict(few.redis), dict(many.redis))
    if not forecast:
        assert product(many) <= WOKEN_CYCLE_AT_MOST, dict(many.sql_rows)
    # On PostgreSQL the apply sends two batches (state.batch): the fenced placement lock
    # with the read under it, and the annotations (when any), quotas and record together.
    if connection.vendor == "postgresql":
        assert many.sql["state.batch.run"] == 2, dict(many.sql)
        assert "state.apply._record" not in many.sql
        assert "state.quotas._update_json" not in many.sql
        assert "state.annotate.annotations_statement" not in many.sql
        (record,) = [t for t in many.texts if 'INSERT INTO "queueing_cyclerun"' in t]
        assert record.count("; ") >= 1, record[:200]  # the ledgers (and quotas), the record


def test_a_sync_costs_the_same_statements_whatever_it_moves(db, django_capture_on_commit_callbacks):
    w = _small_world()
    submit(w, "one", cpu="1", runtime=10)
    for i in range(9):
        submit(w, f"many-{i}", cpu="1", runtime=20)
    cycle_root("cluster", cluster=w.cluster, now=w.clock())
    sync_cluster(w.cluster, now=w.clock.advance(0.5))  # all run

    def finish(at: float) -> tuple[int, Count]:
        with counting() as count, django_capture_on_commit_callbacks(execute=True):
            report = sync_cluster(w.cluster, now=w.clock.advance(at))
        return report.transitions, count

    moved_few, few = finish(10.0)
    moved_many, many = finish(10.0)
    assert (moved_few, moved_many) == (1, 9)
    assert product(few) == product(many), differ(few, many)
    assert few.round_trips == many.round_trips, (dict(few.redis), dict(many.redis))
    assert product(many) <= SYNC_AT_MOST, dict(many.sql_rows)


# --- the guards stay exact ------------------------------------------------------------


def test_annotations_never_overwrite_a_row_that_moved_on(world):
    waiting = submit(world, "waiting")
    moved = submit(world, "moved")
    Workload.objects.filter(pk=moved.pk).update(phase=Phase.ADMITTED, reason="Admitted.")
    at = world.clock()
    new = {
        "position": 3,
        "global_position": 4,
        "eta_p50": at + timedelta(minutes=5),
        "eta_p90": at + timedelta(minutes=9),
        "reason": "Waiting for quota.",
        "explanation": {"sentence": "Waiting for quota."},
        "eta": None,
        "first": None,
    }
    assert write_annotations([(waiting.pk, dict(new)), (moved.pk, dict(new))], at) == 2
    waiting.refresh_from_db()
    moved.refresh_from_db()
    assert (waiting.position, waiting.reason, waiting.eta_p90) == (
        3,
        "Waiting for quota.",
        at + timedelta(minutes=9),
    )
    assert (moved.phase, moved.position, moved.reason) == (Phase.ADMITTED, None, "Admitted.")


def test_an_unchanged_explanation_is_kept_as_it_is(world):
    from queueing.state.annotate import _UNCHANGED

    row = submit(world, "waiting")
    at = world.clock()
    first = {
        "position": 1,
        "global_position": 1,
        "eta_p50": None,
        "eta_p90": None,
        "reason": "Waiting for quota.",
        "explanation": {"sentence": "Waiting for quota.", "waiting_ahead": 0},
        "eta": None,
        "first": None,
    }
    write_annotations([(row.pk, first)], at)
    write_annotations([(row.pk, {**first, "position": 2, "explanation": _UNCHANGED})], at)
    row.refresh_from_db()
    assert (row.position, row.explanation) == (2, first["explanation"])
    write_annotations([(row.pk, {**first, "explanation": None, "reason": ""})], at)
    row.refresh_from_db()
    assert (row.explanation, row.reason) == (None, "")


def test_a_forecasting_cycle_reads_back_only_what_someone_else_wrote(
    db, django_capture_on_commit_callbacks
):
    from queueing import world as worlds

    w = _small_world()
    submit(w, "big", cpu="12", runtime=1000)  # holds the whole quota: the rest wait
    for i in range(5):
        submit(w, f"w{i}", cpu="1", runtime=100)

    def cycle() -> Count:
        with counting() as count, django_capture_on_commit_callbacks(execute=True):
            cycle_root("cluster", cluster=w.cluster, now=w.clock.advance(1))
        return count

    cycle()
    cycle()
    quiet = cycle()
    # What the waiting show, this process wrote: nothing of it is read back.
    assert "state.annotate.pending_annotations" not in quiet.sql, dict(quiet.sql)
    assert "forecasting.previous_etas" not in quiet.sql, dict(quiet.sql)
    row = Workload.objects.get(name="w3")
    shown = row.explanation
    assert shown
    assert shown["sentence"] == row.reason
    # Another writer (another process's cycle of the tree) changed its explanation only,
    # and journalled the row: the world reads it again, and the cycle restores it.
    Workload.objects.filter(pk=row.pk).update(explanation={"sentence": "elsewhere"})
    worlds.record({"cluster": [row.pk]})
    again = cycle()
    assert again.sql["state.annotate.pending_annotations"] == 1, dict(again.sql)
    row.refresh_from_db()
    assert row.explanation == shown


def test_the_placement_lock_is_one_statement_that_makes_its_row(world):
    from django.db import transaction

    CycleLease.objects.filter(name=placement.LOCK_NAME).delete()
    with counting() as count, transaction.atomic():
        placement.lock()
    assert count.statements == 1
    with transaction.atomic():
        placement.lock()
    assert CycleLease.objects.get(name=placement.LOCK_NAME).token == 2


def test_the_fence_and_the_placement_lock_are_one_statement_on_postgresql(world):
    from django.db import transaction

    from queueing import lease

    mine = lease.acquire("cycle:cluster", holder="me", ttl_s=60)
    assert mine is not None
    with counting() as count, transaction.atomic():
        placement.lock(fence=mine)
    assert count.statements == (1 if connection.vendor == "postgresql" else 2)
    token = CycleLease.objects.get(name=placement.LOCK_NAME).token
    lease.release(mine)
    lease.acquire("cycle:cluster", holder="other", ttl_s=60)
    with pytest.raises(lease.LeaseLost), transaction.atomic():
        placement.lock(fence=mine)
    assert CycleLease.objects.get(name=placement.LOCK_NAME).token == token  # rolled back


def test_a_lost_lease_still_writes_nothing_of_a_batched_cycle(world):
    from queueing import lease
    from queueing.engine import run_cycle

    for i in range(3):
        submit(world, f"w{i}", cpu="1")
    mine = lease.acquire("cycle:cluster", holder="me", ttl_s=60)
    snapshot, index = state.build_snapshot(
        "cluster", nodes=world.cluster.nodes(), now=world.clock()
    )
    result = run_cycle(snapshot)
    assert len(result.admissions) == 3
    lease.release(mine)
    lease.acquire("cycle:cluster", holder="other", ttl_s=60)
    with pytest.raises(lease.LeaseLost):
        state.apply(result, snapshot, index, mine, world.cluster)
    assert set(Workload.objects.values_list("phase", flat=True)) == {Phase.PENDING}
    assert not Workload.objects.exclude(position=None).exists()


def test_a_workload_cancelled_after_the_snapshot_is_refused_by_the_batched_write(world):
    from queueing.engine import run_cycle

    first = submit(world, "first", cpu="1")
    second = submit(world, "second", cpu="1")
    snapshot, index = state.build_snapshot(
        "cluster", nodes=world.cluster.nodes(), now=world.clock()
    )
    result = run_cycle(snapshot)
    actions.cancel_workload(SYSTEM, second)  # a concurrent change, committed first
    report = state.apply(result, snapshot, index, None, world.cluster)
    assert (report.admitted, report.conflicts) == ([first.pk], 1)
    assert Workload.objects.get(pk=second.pk).phase == Phase.CANCELLED


def test_the_trees_of_changed_workloads_are_one_query(world):
    from queueing import trees

    other_root = actions.create_quota(
        SYSTEM, name="other", tenant=None, parent=None, min={"cpu": "4"}, max={"cpu": "4"}
    )
    tenant = actions.create_tenant(SYSTEM, name="team-b")
    leaf = actions.create_quota(
        SYSTEM,
        name="team-b-q",
        tenant=tenant,
        parent=other_root,
        min={"cpu": "1"},
        max={"cpu": "4"},
        namespaces=["team-b"],
    )
    a = submit(world, "a")
    b = submit(world, "b", quota=leaf)
    with counting() as count:
        found = trees.roots_of_workloads([a.pk, b.pk, 999_999])
    assert count.statements == 1
    assert {root: sorted(ids) for root, ids in found.items()} == {
        "cluster": [a.pk],
        "other": [b.pk],
    }
    assert connection.vendor in ("postgresql", "sqlite")


def test_usage_is_sampled_once_a_minute_and_a_sample_taken_elsewhere_counts(
    world, django_capture_on_commit_callbacks
):
    from queueing.models import UsageLedger, UsageSample

    submit(world, "w", cpu="4", runtime=3600)
    start = world.clock()

    def cycle(at: float) -> Count:
        with counting() as count, django_capture_on_commit_callbacks(execute=True):
            cycle_root("cluster", cluster=world.cluster, now=start + timedelta(seconds=at))
        return count

    cycle(0)
    assert UsageSample.objects.count() == 2  # the root and the leaf
    quiet = cycle(30)
    assert "state.quotas.sample_usage" not in quiet.sql  # the process remembers the last one
    assert UsageSample.objects.count() == 2
    # Another worker sampled at 61 s: due here by memory, but the database says not yet.
    UsageSample.objects.create(quota=world.quota, at=start + timedelta(seconds=61))
    cycle(62)
    assert UsageSample.objects.count() == 3
    cycle(125)
    assert UsageSample.objects.count() == 5
    latest = UsageSample.objects.filter(quota=world.quota).latest("at")
    assert latest.decayed == UsageLedger.objects.get(quota=world.quota).usage
    assert latest.decayed.get("cpu", 0) > 0


@pytest.mark.django_db(transaction=True)
def test_the_upserted_placement_lock_still_serialises_two_applies():
    """Two transactions take the lock: the second waits for the first's commit (a row
    lock on PostgreSQL, the write lock on SQLite), the row made by whichever came first."""
    import threading

    from django.db import OperationalError, connections, transaction

    CycleLease.objects.filter(name=placement.LOCK_NAME).delete()
    held = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        try:
            with transaction.atomic():
                placement.lock()
                held.set()
                release.wait(30)
                order.append("first commits")
        finally:
            connections.close_all()

    def second() -> None:
        held.wait(30)
        try:
            for _ in range(100):  # SQLite answers "locked" after its timeout: try again
                try:
                    with transaction.atomic():
                        placement.lock()
                        order.append("second locked")
                    return
                except OperationalError:
                    continue
        finally:
            connections.close_all()

    one, two = threading.Thread(target=first), threading.Thread(target=second)
    one.start()
    two.start()
    two.join(0.5)  # it cannot get the lock while the first holds it
    assert two.is_alive()
    assert order == []
    release.set()
    one.join(30)
    two.join(30)
    assert order == ["first commits", "second locked"]
    assert CycleLease.objects.get(name=placement.LOCK_NAME).token == 2


# --- a pass of several trees ------------------------------------------------------------


def _three_trees() -> builders.World:
    """The world's tree and two more, each with one job running and one waiting (each
    quota full: a cycle admits nothing), the running ones on the nodes."""
    w = _small_world()
    for name in ("two", "three"):
        builders.tree(name, "4")
    for name in ("cluster", "two", "three"):
        leaf = w.quota if name == "cluster" else Quota.objects.get(name=f"{name}-q")
        cpu = "12" if name == "cluster" else "4"
        submit(w, f"{name}-run", cpu=cpu, runtime=1000, quota=leaf)
        submit(w, f"{name}-wait", cpu="1", runtime=1000, quota=leaf)
    return w


def test_a_pass_of_three_trees_costs_what_it_must(db, settings, django_capture_on_commit_callbacks):
    """A pass cycles every woken tree (a woken sync's, a tick's): its leases, quotas,
    journal reads and cycle notes are one statement or one round trip for all the trees
    (docs/realtime.md §4), not one per tree."""
    from queueing import wake
    from queueing.admission import CycleSummary, _cycle_roots

    settings.KQ_WAKE = True
    settings.KQ_FORECAST_EVERY_S = 3600.0
    wake.set_sender(lambda target, countdown_s: None)
    try:
        w = _three_trees()
        roots = ["cluster", "three", "two"]

        def one_pass(at: float) -> tuple[CycleSummary, Count]:
            summary = CycleSummary()
            with counting() as count, django_capture_on_commit_callbacks(execute=True):
                _cycle_roots(w.cluster, roots, w.clock.advance(at), summary)
            return summary, count

        first, _ = one_pass(0.0)
        assert first.admitted == 3  # the running ones
        sync_cluster(w.cluster, now=w.clock.advance(0.5))
        one_pass(0.5)
        summary, count = one_pass(0.5)  # nothing moved
        assert summary.roots == roots
        assert summary.admitted == 0
        counted = mine(count)
        # The leases: one statement on PostgreSQL (SQLite takes them one by one), given
        # back in one; the trees' quotas read once; nothing of them per tree.
        if connection.vendor == "postgresql":
            assert counted["lease.acquire_many"] == 1, counted
        assert "lease.acquire" not in counted, counted
        assert counted["lease.release_many"] == 1, counted
        assert "lease.release" not in counted, counted
        assert counted["state.snapshot.read_quotas_of"] == 1, counted
        # 26 statements per pass before the batching (each tree its lease, quotas and
        # release), 20 after; SQLite: 22 (its leases are taken one by one).
        assert product(count) <= PASS_OF_THREE_AT_MOST, counted
        if settings.REDIS_URL:
            # The journal after each world's cursor and the trees' cycle notes: one round
            # trip each for the pass (6 before: one of each per tree).
            assert dict(count.redis) == {"world.since_many": 1, "wake.cycled_many": 1}
    finally:
        wake.set_sender(None)


@pytest.mark.django_db(transaction=True)
def test_a_sync_that_finishes_and_registers_opens_no_transaction_on_postgresql(monkeypatch):
    """Its transitions and its registrations are one statement each: on PostgreSQL they
    run without BEGIN and COMMIT (a single statement is atomic); elsewhere in
    transactions. What the simulated cluster writes (its own rows) is not counted."""
    from queueing.cluster.base import JobRequest
    from tests.queueing.roundtrips import _where

    w = _small_world()
    for i in range(3):
        submit(w, f"w{i}", cpu="1", runtime=5)
    cycle_root("cluster", cluster=w.cluster, now=w.clock())
    sync_cluster(w.cluster, now=w.clock.advance(0.5))  # they run
    w.cluster.create_job(
        JobRequest(
            namespace="team-a",
            name="new",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 500}}],
        )
    )
    begun: list[str] = []
    original = connection.set_autocommit

    def set_autocommit(value: bool, *args: object, **kwargs: object) -> None:
        if not value:  # a transaction begins
            begun.append(_where())
        original(value, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(connection, "set_autocommit", set_autocommit)
    report = sync_cluster(w.cluster, now=w.clock.advance(10))
    assert (report.transitions, report.registered) == (3, 1)
    assert Workload.objects.filter(phase=Phase.SUCCEEDED).count() == 3
    assert Workload.objects.filter(name="new", phase=Phase.PENDING).count() == 1
    mine = [where for where in begun if not where.startswith("cluster.")]
    if connection.vendor == "postgresql":
        assert mine == []
    else:
        assert mine == ["sync._sync_jobs", "sync._register_all"], begun


# --- the placement lock and the read under it, one round trip -----------------------------


def test_the_read_under_the_placement_lock_is_one_more_statement_and_no_more_round_trips(
    world, monkeypatch
):
    """Two statements (the fenced lock, the other trees' holdings); on PostgreSQL one call
    to the database, which the trace's meters count as two statements, one round trip."""
    from django.db import transaction

    from queueing import lease, trace

    monkeypatch.setattr(trace, "_on", True)
    mine = lease.acquire("cycle:cluster", holder="me", ttl_s=60)
    assert mine is not None
    with counting() as count, transaction.atomic():
        meter = trace.Meter().start()  # inside: the test's savepoints are not counted
        _token, held = placement.lock_and_read([world.quota.id], fence=mine)
        assert held == {}
        cost = meter.stop()
    postgres = connection.vendor == "postgresql"
    assert count.statements == (1 if postgres else 3)
    assert cost["statements"] == (2 if postgres else 3)
    assert cost["round_trips"] == count.statements


def test_a_lost_lease_fails_the_pipelined_lock_and_read_and_takes_no_lock(world):
    from django.db import transaction

    from queueing import lease

    mine = lease.acquire("cycle:cluster", holder="me", ttl_s=60)
    assert mine is not None
    with transaction.atomic():
        placement.lock()
    token = CycleLease.objects.get(name=placement.LOCK_NAME).token
    lease.release(mine)
    lease.acquire("cycle:cluster", holder="other", ttl_s=60)
    with pytest.raises(lease.LeaseLost), transaction.atomic():
        placement.lock_and_read([world.quota.id], fence=mine)
    assert CycleLease.objects.get(name=placement.LOCK_NAME).token == token  # rolled back


@pytest.mark.django_db(transaction=True)
def test_the_read_under_the_lock_sees_what_was_committed_while_it_waited():
    """Another tree's apply holds the placement lock and admits onto a node; the apply
    that waited for the lock must read that holding (its statement starts, with its own
    snapshot, only once the lock is granted -- one statement for both would not). Its
    view of the holdings was read before the other took the lock (token 0, no lock row
    yet): the read's gate sees the other's taking and reads."""
    import threading

    from django.db import OperationalError, connections, transaction

    w = _small_world()
    other = builders.tree("two", "4")
    job = submit(w, "theirs", cpu="2", quota=other)
    CycleLease.objects.filter(name=placement.LOCK_NAME).delete()
    held = threading.Event()
    release = threading.Event()
    seen: list[placement.Usage] = []

    def first() -> None:
        try:
            with transaction.atomic():
                placement.lock()
                held.set()
                release.wait(30)
                Workload.objects.filter(pk=job.pk).update(
                    phase=Phase.ADMITTED, assignment={"node-0": {"cpu": 2000}}
                )
        finally:
            connections.close_all()

    def second() -> None:
        held.wait(30)
        try:
            for _ in range(100):  # SQLite answers "locked" after its timeout: try again
                try:
                    with transaction.atomic():
                        token, found = placement.lock_and_read([w.quota.id], unchanged_since=0)
                        assert token == 2
                        assert found is not None
                        seen.append(found)
                    return
                except OperationalError:
                    continue
        finally:
            connections.close_all()

    one, two = threading.Thread(target=first), threading.Thread(target=second)
    one.start()
    two.start()
    two.join(0.5)  # waiting for the lock
    assert two.is_alive()
    release.set()
    one.join(30)
    two.join(30)
    assert seen == [{"node-0": {"cpu": 2000}}]
