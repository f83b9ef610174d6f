"""The one transition function (queueing.actions.transitions) the cycle, the sync and the
actions share: one statement per kind of change, conditional on the phase read, the
timeline in one insert, one notification after the commit. Runs on SQLite by default
(the executemany path) and on PostgreSQL with DATABASE_URL (UPDATE ... FROM VALUES)."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from queueing import events
from queueing.actions import transitions
from queueing.actions.transitions import Move, transition_many
from queueing.choices import WAITING_PHASES, Phase
from queueing.models import Workload, WorkloadEvent

pytestmark = pytest.mark.django_db

TABLE = Workload._meta.db_table


def pending(world: Any, count: int, prefix: str = "w") -> list[int]:
    """``count`` Pending workloads in the world's quota, inserted at once."""
    rows = Workload.objects.bulk_create(
        Workload(
            tenant=world.tenant,
            quota=world.quota,
            queue=world.queue,
            name=f"{prefix}{i}",
            namespace="team-a",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 1000}}],
            total_request={"cpu": 1000},
            queue_order_at=world.clock(),
            position=i + 1,
            eta={"p50": 1.0},
        )
        for i in range(count)
    )
    return [w.pk for w in rows]


def admit(ids: list[int], now: Any) -> list[Move]:
    """Moves of one kind, as the cycle makes them: shared and per-row fields, an F()."""
    return [
        Move(
            wid,
            Phase.ADMITTED,
            tuple(WAITING_PHASES),
            "Admitted",
            f"Placed on node-{wid % 3}.",
            {
                "admitted_at": now,
                "assignment": {f"node-{wid % 3}": {"cpu": 1000}},
                "pool": "",
                "attempts": F("attempts") + 1,
                "wait_s": float(wid),
            },
            kind="admitted",
        )
        for wid in ids
    ]


def statements(queries: CaptureQueriesContext, verb: str) -> list[str]:
    """The SQL of the captured statements starting with ``verb`` (an executemany is one
    statement, logged as "N times: ..."), and of the ``verb`` parts of a statement of
    data-modifying CTEs ("WITH ... u0 AS (UPDATE ...), e AS (INSERT ...) SELECT ...")."""
    out = []
    for q in queries.captured_queries:
        sql = q["sql"].split(" times: ", 1)[1] if " times: " in q["sql"][:20] else q["sql"]
        if sql.lstrip().upper().startswith(verb):
            out.append(sql)
        elif sql.lstrip().upper().startswith("WITH"):
            out.extend(verb + part for part in sql.split(f" AS ({verb}")[1:])
    return out


def test_n_moves_of_one_kind_are_a_constant_number_of_statements(world):
    counts = []
    for n, prefix in ((3, "a"), (40, "b")):
        ids = pending(world, n, prefix)
        with CaptureQueriesContext(connection) as queries, transaction.atomic():
            outcome = transition_many(admit(ids, world.clock()), publish_changes=False)
        assert len(outcome.made) == n
        assert not outcome.conflicts
        counts.append(len(queries.captured_queries))
        updates = statements(queries, "UPDATE")
        assert len(updates) == 1, updates  # one UPDATE for the kind
        assert len(statements(queries, "INSERT")) == 1  # the timeline in one insert
    assert counts[0] == counts[1], counts
    if connection.vendor == "postgresql":
        # The locked read, the UPDATE and the timeline: one statement (beside the test's
        # savepoint and its release).
        assert counts == [3, 3], counts
        assert [q["sql"][:5] for q in queries.captured_queries] == ["SAVEP", "WITH ", "RELEA"]
    # What each row got: its own assignment, the shared time, the expression, the clears.
    row = Workload.objects.get(name="b7")
    assert row.phase == Phase.ADMITTED
    assert row.assignment == {f"node-{row.pk % 3}": {"cpu": 1000}}
    assert row.admitted_at == world.clock()
    assert row.attempts == 1
    assert row.wait_s == float(row.pk)
    assert (row.position, row.eta) == (None, None)  # holding quota: no place, no ETA
    assert WorkloadEvent.objects.filter(to_phase=Phase.ADMITTED).count() == 43


def test_fields_every_row_shares_are_set_once_and_only_the_others_row_by_row(world):
    ids = pending(world, 4)
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        transition_many(admit(ids, world.clock()), publish_changes=False)
    (sql,) = statements(queries, "UPDATE")
    if connection.vendor == "postgresql":
        # One statement joining the rows' own values (one JSON document, typed columns);
        # the shared ones are constants.
        assert "FROM jsonb_to_recordset(" in sql
        assert "RETURNING" in sql
        assert 'v."v_assignment"' in sql
        assert 'v."v_wait_s"' in sql
        assert 'v."v_admitted_at"' not in sql
        assert 'v."v_pool"' not in sql
        assert '"v_assignment" jsonb' in sql  # typed columns
        assert '"v_wait_s" double precision' in sql
    else:
        # SQLite: one executemany of the conditional update, 4 rows.
        (logged,) = [q["sql"] for q in queries.captured_queries if "UPDATE" in q["sql"]]
        assert logged.startswith("4 times: ")
        assert '"phase" = %s' in sql.split("WHERE")[1]


def test_a_row_changed_between_the_read_and_the_write_is_a_conflict_and_kept(world, monkeypatch):
    ids = pending(world, 5)
    raced = ids[2]
    read = transitions._read

    def read_then_race(wanted: set[int]) -> dict[int, tuple[str, int, int]]:
        seen = read(wanted)
        # A writer the database did not hold off (no row locks, or another path) moves
        # one row after the phases were read.
        Workload.objects.filter(pk=raced).update(phase=Phase.CANCELLED, reason="raced")
        return seen

    monkeypatch.setattr(transitions, "_read", read_then_race)
    # PostgreSQL reads, locks and writes in one statement (nothing can come between):
    # the steps one by one, as a row moved twice takes them, are what this races.
    monkeypatch.setattr(transitions, "_one_statement", lambda *_, **__: False)
    with transaction.atomic():
        outcome = transition_many(admit(ids, world.clock()), publish_changes=False)
    assert [m.workload_id for m in outcome.conflicts] == [raced]
    assert sorted(m.move.workload_id for m in outcome.made) == sorted(set(ids) - {raced})
    row = Workload.objects.get(pk=raced)
    assert (row.phase, row.reason, row.attempts) == (Phase.CANCELLED, "raced", 0)
    assert not WorkloadEvent.objects.filter(workload_id=raced).exists()
    assert Workload.objects.filter(phase=Phase.ADMITTED).count() == 4


def test_a_row_not_in_an_expected_phase_or_gone_conflicts_and_is_untouched(world):
    ids = pending(world, 3)
    Workload.objects.filter(pk=ids[0]).update(phase=Phase.RUNNING)
    moves = admit(ids, world.clock()) + admit([10**9], world.clock())  # one that is gone
    outcome = transition_many(moves, publish_changes=False)
    assert sorted(m.workload_id for m in outcome.conflicts) == [ids[0], 10**9]
    assert Workload.objects.get(pk=ids[0]).phase == Phase.RUNNING
    assert Workload.objects.get(pk=ids[0]).attempts == 0


def test_kinds_with_other_fields_are_one_statement_each_and_a_row_moved_twice_in_order(world):
    a, b, c = pending(world, 3)
    now = world.clock()
    moves = [
        *admit([a, b], now),
        Move(c, Phase.CANCELLED, tuple(WAITING_PHASES), "Cancelled", "by a test",
             {"finished_at": now}),
        # a second move of ``a`` sees the first one's phase
        Move(a, Phase.PREEMPTED, (Phase.ADMITTED,), "Reclaim", "for someone",
             {"message": "for someone"}),
    ]  # fmt: skip
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        outcome = transition_many(moves, at=now, publish_changes=False)
    assert not outcome.conflicts
    updates = statements(queries, "UPDATE")
    assert len(updates) == 3  # admitted, cancelled; then the second round's preempted
    assert Workload.objects.get(pk=a).phase == Phase.PREEMPTED
    assert list(
        WorkloadEvent.objects.filter(workload_id=a).values_list("from_phase", "to_phase")
    ) == [(Phase.PENDING, Phase.ADMITTED), (Phase.ADMITTED, Phase.PREEMPTED)]
    cancelled = Workload.objects.get(pk=c)
    # Ending clears what a waiting workload shows; the reason says why.
    assert (cancelled.position, cancelled.explanation, cancelled.reason) == (
        None,
        None,
        "by a test",
    )
    assert cancelled.finished_at == now


def test_one_notification_per_tenant_after_the_commit(
    world, monkeypatch, django_capture_on_commit_callbacks
):
    sent: list[tuple[int | None, dict[str, Any]]] = []
    monkeypatch.setattr(events, "send", lambda tenant, payload: sent.append((tenant, payload)))
    ids = pending(world, 6)
    with django_capture_on_commit_callbacks(execute=False) as callbacks, transaction.atomic():
        transition_many(admit(ids, world.clock()))
    assert sent == []  # nothing before the commit
    for callback in callbacks:
        callback()
    assert len(sent) == 1
    tenant, payload = sent[0]
    assert tenant == world.tenant.pk
    assert payload["workloads"] == sorted(ids)
    assert payload["queues"] == [world.queue.pk]


def test_a_field_that_is_no_column_is_refused_and_nothing_is_written(world):
    (wid,) = pending(world, 1)
    bad = Move(wid, Phase.ADMITTED, tuple(WAITING_PHASES), "Admitted", fields={"nope": 1})
    with pytest.raises(Exception, match="nope"), transaction.atomic():
        transition_many([bad])
    assert Workload.objects.get(pk=wid).phase == Phase.PENDING
    assert not WorkloadEvent.objects.exists()


def test_the_sync_finishing_many_jobs_is_a_constant_number_of_updates(world):
    from queueing.admission import tick
    from queueing.sync import sync_cluster
    from tests.builders import submit

    counts = []
    for n, prefix in ((2, "s"), (8, "t")):
        for i in range(n):
            submit(world, f"{prefix}{i}", cpu="1", runtime=5)
        tick(cluster=world.cluster, now=world.clock())  # admitted
        tick(cluster=world.cluster, now=world.clock.advance(1))  # running
        with CaptureQueriesContext(connection) as queries:
            report = sync_cluster(world.cluster, now=world.clock.advance(10))  # finished
        assert report.transitions == n
        counts.append(len([u for u in statements(queries, "UPDATE") if f'"{TABLE}" SET' in u]))
    assert counts[0] == counts[1] == 1, counts
    assert Workload.objects.filter(phase=Phase.SUCCEEDED).count() == 10


def test_a_cycle_admitting_more_workloads_sends_no_more_workload_updates(world):
    from queueing.admission import tick
    from tests.builders import submit

    updates: list[list[str]] = []
    for n, prefix in ((2, "c"), (7, "d")):
        for i in range(n):
            submit(world, f"{prefix}{i}", cpu="1", runtime=600)
        with CaptureQueriesContext(connection) as queries:
            summary = tick(cluster=world.cluster, now=world.clock.advance(1))
        assert summary.admitted == n
        updates.append([u[:120] for u in statements(queries, "UPDATE") if f'"{TABLE}" SET' in u])
        tick(cluster=world.cluster, now=world.clock.advance(1))  # they start: Running
    assert len(updates[0]) == len(updates[1]), updates
    assert Workload.objects.filter(phase=Phase.RUNNING).count() == 9


def test_the_statement_names_the_trees_of_the_rows_it_moved(world, monkeypatch):
    """On PostgreSQL the one statement names the moved rows' trees (trees.roots_cte), so
    the journal and the wakes read no tree of their own; what it names is what the read
    would answer: the root of each row, and the trees woken by a row that now waits or
    ended (not by one that was admitted)."""
    from queueing import actions, trees
    from queueing import world as worlds
    from tests.builders import SYSTEM

    other = actions.create_quota(
        SYSTEM, name="other", tenant=None, parent=None, min={"cpu": "4"}, max={"cpu": "4"}
    )
    leaf = actions.create_quota(
        SYSTEM,
        name="other-leaf",
        tenant=world.tenant,
        parent=other,
        min={"cpu": "1"},
        max={"cpu": "4"},
    )
    a, b = pending(world, 2)
    (c,) = pending(world, 1, prefix="c")
    Workload.objects.filter(pk=c).update(quota=leaf)
    moves = [
        *admit([a], world.clock()),
        Move(b, Phase.CANCELLED, tuple(WAITING_PHASES), "Cancelled"),
        Move(c, Phase.CANCELLED, tuple(WAITING_PHASES), "Cancelled"),
    ]
    expected = trees.roots_and_deciding([a, b, c])
    assert expected[1] == {"cluster", "other"}
    journaled: list[Any] = []
    monkeypatch.setattr(worlds, "enabled", lambda: True)
    monkeypatch.setattr(
        worlds, "record_now_and_on_commit", lambda roots, **kw: journaled.append((roots, kw))
    )
    if connection.vendor == "postgresql":
        monkeypatch.setattr(trees, "roots_and_deciding", _no_read)
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        outcome = transition_many(moves)
    assert len(outcome.made) == 3
    ((roots, kw),) = journaled
    assert {r: sorted(ids) for r, ids in roots.items()} == {
        r: sorted(ids) for r, ids in expected[0].items()
    }
    assert set(roots) - set(kw["quiet"]) == expected[1]
    if connection.vendor == "postgresql":
        assert outcome.trees is not None
        mine = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
        assert len(mine) == 1, mine  # locked read, writes, timeline and trees together


def _no_read(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the statement named the trees: no read of them")


def test_the_rows_own_values_are_written_exactly(world):
    """Each row's values arrive as they were given (on PostgreSQL they travel as one JSON
    document): timestamps to the microsecond with their offset, floats, JSON documents,
    NULLs, and text with quotes, backslashes and other scripts; the timeline's reasons too."""
    from datetime import timedelta

    ids = pending(world, 3)
    base = world.clock()
    given = {
        wid: {
            "started_at": base + timedelta(microseconds=123_457 * (i + 1)),
            "wait_s": 0.1 + i / 3,
            "assignment": {f"node-{i}": {"cpu": 1000 + i}, "x": [1, None, "é"]},
            "message": f'it\'s "{i}" \\ ünï ✓',
            "explanation": None if i == 1 else {"sentence": f"s{i}"},
        }
        for i, wid in enumerate(ids)
    }
    moves = [
        Move(
            wid, Phase.RUNNING, tuple(WAITING_PHASES), "Started", given[wid]["message"], given[wid]
        )
        for wid in ids
    ]
    with transaction.atomic():
        outcome = transition_many(moves, publish_changes=False)
    assert sorted(m.move.workload_id for m in outcome.made) == sorted(ids)
    for wid in ids:
        row = Workload.objects.get(pk=wid)
        for name, value in given[wid].items():
            assert getattr(row, name) == value, (name, getattr(row, name), value)
        assert row.phase == Phase.RUNNING
        event = WorkloadEvent.objects.get(workload_id=wid, to_phase=Phase.RUNNING)
        assert event.message == given[wid]["message"]
