"""The cycle against the database and the simulated cluster."""

from __future__ import annotations

import json
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from queueing import actions, forecasting, lease, state
from queueing.admission import cycle_root, tick
from queueing.choices import HOLDING_PHASES, Phase
from queueing.engine import run_cycle
from queueing.models import CycleRun, Queue, Quota, SimJob, UsageLedger, Workload
from tests import builders
from tests.builders import SYSTEM, submit

pytestmark = pytest.mark.django_db


def phases() -> dict[str, str]:
    return dict(Workload.objects.values_list("name", "phase"))


def test_the_cycle_admits_within_quota_and_explains_the_rest(world):
    # quota max 16 cpu, nodes 2 x 8 cpu
    for i in range(5):
        submit(world, f"w{i}", cpu="4", runtime=600)
    summary = tick(cluster=world.cluster, now=world.clock())
    assert summary.admitted == 4
    assert summary.pending == 1
    admitted = Workload.objects.filter(phase=Phase.ADMITTED)
    assert sum(w.total_request["cpu"] for w in admitted) == 16000
    assert SimJob.objects.filter(suspended=False).count() == 4
    waiting = Workload.objects.get(phase=Phase.PENDING)
    assert waiting.position == 1
    assert waiting.global_position == 1
    assert waiting.reason
    assert waiting.explanation["kind"] in ("quota", "nodes")
    run = CycleRun.objects.get()
    assert (run.admitted, run.pending) == (4, 1)


def test_admitted_jobs_run_finish_and_free_their_quota(world):
    for i in range(5):
        submit(world, f"w{i}", cpu="4", runtime=60)
    tick(cluster=world.cluster, now=world.clock())
    tick(cluster=world.cluster, now=world.clock.advance(1))
    assert list(phases().values()).count(Phase.RUNNING) == 4
    tick(cluster=world.cluster, now=world.clock.advance(60))
    counted = list(phases().values())
    assert counted.count(Phase.SUCCEEDED) == 4
    assert counted.count(Phase.ADMITTED) == 1
    assert UsageLedger.objects.get(quota=world.quota).usage["cpu"] > 0


def test_priority_orders_a_queue(world):
    submit(world, "low", cpu="8", count=2, priority=1)
    submit(world, "high", cpu="8", count=2, priority=100)
    tick(cluster=world.cluster, now=world.clock())
    assert phases() == {"low": Phase.PENDING, "high": Phase.ADMITTED}


def test_a_decision_from_a_stale_snapshot_never_double_admits(world):
    workload = submit(world, "racy", cpu="4")
    snapshot, index = state.build_snapshot(
        "cluster", nodes=world.cluster.nodes(), now=world.clock()
    )
    result = run_cycle(snapshot)
    assert [a.workload_id for a in result.admissions] == [workload.pk]
    first = state.apply(result, snapshot, index, None, world.cluster)
    second = state.apply(result, snapshot, index, None, world.cluster)  # same decisions again
    assert (len(first.admitted), len(second.admitted), second.conflicts) == (1, 0, 1)
    assert SimJob.objects.get(name="racy").admissions == 1


def test_a_cancelled_workload_is_not_admitted_by_a_stale_decision(world):
    workload = submit(world, "gone", cpu="4")
    snapshot, index = state.build_snapshot(
        "cluster", nodes=world.cluster.nodes(), now=world.clock()
    )
    result = run_cycle(snapshot)
    actions.cancel_workload(SYSTEM, workload)
    report = state.apply(result, snapshot, index, None, world.cluster)
    assert report.admitted == []
    assert Workload.objects.get(pk=workload.pk).phase == Phase.CANCELLED


def test_only_the_lease_holder_cycles_and_a_lost_lease_writes_nothing(world):
    submit(world, "w", cpu="4")
    held = lease.acquire("cycle:cluster", holder="other-worker", ttl_s=60)
    assert held is not None
    assert cycle_root("cluster", cluster=world.cluster, now=world.clock()) is None
    # A worker whose lease was taken over cannot apply what it computed.
    mine = lease.acquire("cycle:cluster", holder="other-worker", ttl_s=60)
    snapshot, index = state.build_snapshot(
        "cluster", nodes=world.cluster.nodes(), now=world.clock()
    )
    result = run_cycle(snapshot)
    lease.release(mine)
    lease.acquire("cycle:cluster", holder="third-worker", ttl_s=60)
    with pytest.raises(lease.LeaseLost):
        state.apply(result, snapshot, index, mine, world.cluster)
    assert phases() == {"w": Phase.PENDING}


def test_snapshot_queries_do_not_grow_with_workloads(world):
    def count() -> int:
        forecasting.clear_cache()  # both counts read the learnt inputs afresh
        with CaptureQueriesContext(connection) as queries:
            state.build_snapshot("cluster", nodes=world.cluster.nodes(), now=world.clock())
        return len(queries)

    submit(world, "one")
    few = count()
    for i in range(30):
        submit(world, f"more-{i}")
    assert count() == few


def test_preemption_evicts_then_admits_after_the_cluster_confirms(world):
    submit(world, "low-a", cpu="8", priority=1, runtime=3600)
    submit(world, "low-b", cpu="8", priority=1, runtime=3600)
    tick(cluster=world.cluster, now=world.clock())
    tick(cluster=world.cluster, now=world.clock.advance(1))
    assert set(phases().values()) == {Phase.RUNNING}
    submit(world, "urgent", cpu="8", priority=1000)
    tick(cluster=world.cluster, now=world.clock.advance(1))
    after = phases()
    assert after["urgent"] == Phase.PENDING  # never admitted while its victim still runs
    assert sorted(after.values()).count(Phase.PREEMPTED) == 1
    for _ in range(3):
        tick(cluster=world.cluster, now=world.clock.advance(1))
    final = phases()
    assert final["urgent"] in (Phase.ADMITTED, Phase.RUNNING)
    victim = next(name for name in ("low-a", "low-b") if final[name] == Phase.PENDING)
    assert SimJob.objects.get(name=victim).suspended


def test_run_cycle_command_prints_one_json_line(world, capsys):
    from queueing.cluster import set_cluster

    set_cluster(world.cluster)
    submit(world, "cmd", cpu="1")
    call_command("run_cycle")
    line = capsys.readouterr().out.strip()
    assert "\n" not in line
    summary = json.loads(line)
    assert summary["admitted"] == 1
    assert {"admitted", "preempted", "pending", "duration_ms"} <= set(summary)


def test_quota_state_is_stored_for_pages(world):
    submit(world, "w", cpu="4")
    tick(cluster=world.cluster, now=world.clock())
    quota = Quota.objects.get(pk=world.quota.pk)
    assert quota.used == {"cpu": 4000}
    assert quota.runtime == {"cpu": 4000}  # its demand: runtime quota follows the ask


def test_a_second_tenant_borrows_idle_capacity(world):
    quota_b = builders.tenant_quota(world, "team-b", min={"cpu": "8"}, max={"cpu": "16"})
    for i in range(4):
        builders.submit(world, f"b{i}", cpu="4", quota=quota_b)
    tick(cluster=world.cluster, now=world.clock())
    # team-a is idle: team-b may use all 16 cpu (its max)
    assert Workload.objects.filter(quota=quota_b, phase=Phase.ADMITTED).count() == 4


def test_between_costly_full_passes_only_the_front_of_a_queue_is_re_annotated(world, monkeypatch):
    import time

    for i in range(4):
        submit(world, f"run{i}", cpu="4", runtime=3600)  # the quota is full
    cycle_root("cluster", cluster=world.cluster, now=world.clock())
    for i in range(30):
        submit(world, f"wait{i:02d}", cpu="4", runtime=60)
    cycle_root("cluster", cluster=world.cluster, now=world.clock.advance(1))

    def position(name: str) -> int | None:
        return Workload.objects.get(name=name).position

    assert [position(f"wait{i:02d}") for i in (0, 19, 29)] == [1, 20, 30]

    # A full pass just cost a minute: the next cycles look at the front and the new.
    monkeypatch.setitem(state._full_cycles, "cluster", (time.monotonic(), 60.0))
    submit(world, "urgent", cpu="4", runtime=60, priority=10)
    cycle_root("cluster", cluster=world.cluster, now=world.clock.advance(1))
    assert position("urgent") == 1
    assert position("wait00") == 2  # the front moves at once
    assert position("wait29") == 30  # the back waits for the next full pass

    monkeypatch.setitem(state._full_cycles, "cluster", (time.monotonic() - 3600, 60.0))
    cycle_root("cluster", cluster=world.cluster, now=world.clock.advance(1))
    assert position("wait29") == 31


def test_a_heads_only_snapshot_lists_the_front_of_each_queue_and_counts_the_rest(world):
    for i in range(4):
        submit(world, f"run{i}", cpu="4", runtime=3600)
    tick(cluster=world.cluster, now=world.clock())
    for i in range(10):
        submit(world, f"low{i}", cpu="1", runtime=60)
    urgent = submit(world, "urgent", cpu="2", runtime=60, priority=5)
    snapshot, index = state.build_snapshot(
        "cluster", nodes=world.cluster.nodes(), now=world.clock(), head=3
    )
    waiting = [w for w in snapshot.workloads if w.phase == Phase.PENDING]
    # The head in the engine's queue order: priority first, then time, then id.
    assert {w.name for w in waiting} == {"urgent", "low0", "low1"}
    assert sum(1 for w in snapshot.workloads if w.phase in ("Admitted", "Running")) == 4
    assert index.unlisted == 8
    assert dict(snapshot.unlisted_demand) == {"team-a-q": {"cpu": 8000}}
    assert urgent.pk in index.rows

    full_snapshot, _ = state.build_snapshot(
        "cluster", nodes=world.cluster.nodes(), now=world.clock()
    )
    assert run_cycle(snapshot).runtime_quota == run_cycle(full_snapshot).runtime_quota


def test_a_heads_only_cycle_records_every_pending_workload(world, monkeypatch):
    import time

    for i in range(4):
        submit(world, f"run{i}", cpu="4", runtime=3600)
    for i in range(300):
        submit(world, f"w{i:03d}", cpu="1", runtime=60)
    monkeypatch.setitem(state._full_cycles, "cluster", (time.monotonic(), 60.0))
    report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    run = CycleRun.objects.get(pk=report.cycle_id)
    assert run.stats["full"] == 0.0
    assert run.pending == 304 - len(report.admitted)  # 176 of them were not listed


def held_per_node() -> dict[str, int]:
    held: dict[str, int] = {}
    for assignment in Workload.objects.filter(phase__in=HOLDING_PHASES).values_list(
        "assignment", flat=True
    ):
        for node, resources in (assignment or {}).items():
            held[node] = held.get(node, 0) + int(resources.get("cpu", 0))
    return held


def test_two_trees_cycled_at_once_never_overfill_a_shared_node(world):
    # Two trees of 16 cpu each over the same two 8-cpu nodes, each with 16 cpu of work.
    other = builders.tree("other", "16")
    mine = [submit(world, f"a{i}", cpu="4") for i in range(4)]
    theirs = [submit(world, f"b{i}", cpu="4", quota=other) for i in range(4)]
    nodes = world.cluster.nodes()
    # Both snapshots are read before either tree applies: each sees empty nodes.
    snap_a, index_a = state.build_snapshot("cluster", nodes=nodes, now=world.clock())
    snap_b, index_b = state.build_snapshot("other", nodes=nodes, now=world.clock())
    result_a, result_b = run_cycle(snap_a), run_cycle(snap_b)
    assert len(result_a.admissions) == len(result_b.admissions) == 4  # 32 cpu on 16
    first = state.apply(result_a, snap_a, index_a, None, world.cluster)
    second = state.apply(result_b, snap_b, index_b, None, world.cluster)
    assert sorted(first.admitted) == sorted(w.pk for w in mine)
    assert second.admitted == []
    assert second.displaced == sorted(w.pk for w in theirs)
    assert held_per_node() == {"node-1": 8000, "node-2": 8000}  # millicores
    assert set(Workload.objects.filter(quota=other).values_list("phase", flat=True)) == {
        Phase.PENDING
    }
    assert SimJob.objects.filter(suspended=False).count() == 4


def _applies(monkeypatch) -> list:
    """Every apply's report from now on (``state.apply`` wrapped)."""
    from queueing import admission

    reports: list = []
    apply = state.apply

    def recorded(*args, **kwargs):
        reports.append(apply(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(admission.state, "apply", recorded)
    return reports


def test_a_pass_cycles_the_trees_whose_calls_still_run_last(world, monkeypatch):
    # The first tree's last cluster calls still run (the API server has not answered
    # them): the pass cycles the other tree first instead of waiting for them, and the
    # pass's time being up then, leaves the first for the next pass.
    import threading
    from concurrent.futures import Future

    from queueing import admission
    from queueing.admission import CycleSummary, _cycle_roots

    other = builders.tree("other", "16")
    submit(world, "a0", cpu="4")
    submit(world, "b0", cpu="4", quota=other)
    running: Future[None] = Future()
    monkeypatch.setitem(admission._tree_calls, "cluster", running)
    later = threading.Timer(0.3, running.set_result, [None])  # answered meanwhile
    later.start()
    summary = CycleSummary()
    try:
        left = _cycle_roots(
            world.cluster, ["cluster", "other"], world.clock(), summary, until=time.perf_counter()
        )
    finally:
        later.cancel()
    assert summary.roots == ["other"]
    assert left == ["cluster"]


def test_a_pass_nobody_else_placed_in_reads_no_holdings_under_the_lock(world, monkeypatch):
    # Two trees over the same two 8-cpu nodes, each with 8 cpu of work: both fit. Cycled
    # in one pass, each apply takes the placement lock right after the pass's view of the
    # holdings (the pass's read, then the first tree's own admissions): nothing can have
    # grown, and neither reads the holdings again under the lock.
    from queueing.admission import CycleSummary, _cycle_roots

    other = builders.tree("other", "16")
    mine = [submit(world, f"a{i}", cpu="4") for i in range(2)]
    theirs = [submit(world, f"b{i}", cpu="4", quota=other) for i in range(2)]
    reports = _applies(monkeypatch)
    summary = CycleSummary()
    _cycle_roots(world.cluster, ["cluster", "other"], world.clock(), summary)
    assert summary.admitted == 4
    assert [(r.placement_read, len(r.admitted)) for r in reports] == [(False, 2), (False, 2)]
    assert reports[1].placement_token == reports[0].placement_token + 1
    assert sorted(
        Workload.objects.filter(phase__in=HOLDING_PHASES).values_list("id", flat=True)
    ) == (sorted(w.pk for w in [*mine, *theirs]))
    assert held_per_node() == {"node-1": 8000, "node-2": 8000}


def test_a_placement_by_another_worker_after_the_pass_read_is_read_under_the_lock(
    world, monkeypatch
):
    # The pass reads the holdings; then another worker's cycle of a third tree places 12
    # cpu on the shared nodes (taking the placement lock); then this pass's tree applies
    # admissions made for empty nodes. The lock's token is not the one after the pass's,
    # so the holdings are read under it and what no longer fits is withdrawn.
    other = builders.tree("other", "16")
    third = builders.tree("third", "16")
    mine = [submit(world, f"a{i}", cpu="4") for i in range(4)]
    for i in range(3):
        submit(world, f"c{i}", cpu="4", quota=third)
    nodes = world.cluster.nodes()
    shared = state.PassReads()
    snapshot, index = state.build_snapshot("cluster", nodes=nodes, now=world.clock(), shared=shared)
    assert shared.placement_token is not None
    result = run_cycle(snapshot)
    assert len(result.admissions) == 4  # 16 cpu on empty nodes
    snap_c, index_c = state.build_snapshot("third", nodes=nodes, now=world.clock())
    placed = state.apply(run_cycle(snap_c), snap_c, index_c, None, world.cluster)
    assert len(placed.admitted) == 3
    report = state.apply(
        result, snapshot, index, None, world.cluster, unchanged_since=shared.placement_token
    )
    assert report.placement_read
    assert report.placement_token == shared.placement_token + 2
    assert len(report.admitted) == 1
    assert len(report.displaced) == 3
    assert held_per_node() == {"node-1": 8000, "node-2": 8000}
    assert Workload.objects.filter(pk__in=[w.pk for w in mine], phase=Phase.PENDING).count() == 3
    del other


def test_room_left_by_another_tree_is_still_used(world):
    # Positive control of the check above: the other tree grew on the nodes since the
    # snapshot (so the admissions are replayed), but there is room for both.
    other = builders.tree("other", "16")
    submit(world, "a0", cpu="4")
    theirs = submit(world, "b0", cpu="4", quota=other)
    nodes = world.cluster.nodes()
    snap_a, index_a = state.build_snapshot("cluster", nodes=nodes, now=world.clock())
    snap_b, index_b = state.build_snapshot("other", nodes=nodes, now=world.clock())
    result_a, result_b = run_cycle(snap_a), run_cycle(snap_b)
    state.apply(result_a, snap_a, index_a, None, world.cluster)
    second = state.apply(result_b, snap_b, index_b, None, world.cluster)
    assert (second.admitted, second.displaced) == ([theirs.pk], [])
    assert sum(held_per_node().values()) == 8000


def test_woken_cycles_between_forecasts_admit_and_leave_positions_alone(
    world, settings, monkeypatch
):
    settings.KQ_FORECAST_EVERY_S = 1.0
    monkeypatch.setattr(state.annotate, "_forecasts", {})
    monkeypatch.setattr(state.annotate, "_forecast_costs", {})
    # Heads-only cycles from now (a full cycle always forecasts).
    monkeypatch.setitem(state._full_cycles, "cluster", (time.monotonic(), 60.0))
    submit(world, "big", cpu="8", count=2, runtime=600)
    waiting = submit(world, "waits", cpu="8", count=2, runtime=600)
    cycle_root("cluster", cluster=world.cluster, now=world.clock())  # forecasts
    assert Workload.objects.get(pk=waiting.pk).position == 1
    small = submit(world, "small", cpu="1", runtime=600)
    late = submit(world, "late", cpu="8", count=2, runtime=600)
    report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    assert report.admitted == []  # the root is full: nothing fits, not even small
    assert report.annotated == 0  # within a second of the last forecast: none written
    assert Workload.objects.get(pk=late.pk).position is None
    # A second later the forecast runs again and the newcomers get their places.
    state.annotate._forecast_costs.clear()  # this machine's speed decides nothing here
    state.annotate._forecasts["cluster"] -= 1.0
    report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    assert report.annotated >= 2
    assert Workload.objects.get(pk=late.pk).position is not None
    assert Workload.objects.get(pk=small.pk).position is not None


def test_forecasts_take_at_most_their_share_of_the_time(settings, monkeypatch):
    settings.KQ_FORECAST_EVERY_S = 1.0
    now = time.monotonic()
    monkeypatch.setattr(state.annotate, "_forecasts", {"a": now - 2.0, "b": now - 9.0})
    monkeypatch.setattr(state.annotate, "_forecast_costs", {"a": 0.01, "b": 0.01})
    # Cheap forecasts: every KQ_FORECAST_EVERY_S.
    assert state.forecast_due("a")
    assert state.forecast_due("b")
    # Forecasts of 1 s each: the two trees' together (2 s) take at most a quarter of
    # the time, so each comes round every 8 s.
    state.annotate._forecast_costs.update(a=1.0, b=1.0)
    assert not state.forecast_due("a")
    assert state.forecast_due("b")
    assert state.forecast_due("new")  # never forecast here: due at once
    state.forecast_done("a", 0.01)
    state.forecast_done("b", 0.01)
    assert not state.forecast_due("a")  # within KQ_FORECAST_EVERY_S of the last


def test_a_cycle_without_the_forecast_does_not_read_the_previous_etas(world, settings, monkeypatch):
    from queueing import forecasting

    settings.KQ_FORECAST_EVERY_S = 1.0
    monkeypatch.setattr(state.annotate, "_forecasts", {})
    monkeypatch.setattr(state.annotate, "_forecast_costs", {})
    monkeypatch.setitem(state._full_cycles, "cluster", (time.monotonic(), 60.0))
    reads: list[int] = []
    real = forecasting.previous_etas

    def counted(ids, quota_ids, *, many):  # type: ignore[no-untyped-def]
        reads.append(1)
        return real(ids, quota_ids, many=many)

    monkeypatch.setattr(forecasting, "previous_etas", counted)
    submit(world, "big", cpu="8", count=2, runtime=600)
    submit(world, "waits", cpu="8", count=2, runtime=600)
    cycle_root("cluster", cluster=world.cluster, now=world.clock())  # forecasts
    assert len(reads) == 1  # the positive control: a forecasting cycle reads them
    submit(world, "late", cpu="8", count=2, runtime=600)
    report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    assert report.annotated == 0
    assert len(reads) == 1
    state.annotate._forecast_costs.clear()  # this machine's speed decides nothing here
    state.annotate._forecasts["cluster"] -= 1.0
    cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert len(reads) == 2


def test_every_cycle_checks_the_quota_invariants_and_records_a_break(world, monkeypatch):
    from queueing import admission
    from queueing.engine.invariants import check_cycle

    checked: list[list[str]] = []

    def spy(snapshot, result):
        found = check_cycle(snapshot, result)
        checked.append(found)
        return found

    monkeypatch.setattr(admission, "check_cycle", spy)
    for i in range(5):
        submit(world, f"w{i}", cpu="4", runtime=600)
    tick(cluster=world.cluster, now=world.clock())
    assert checked == [[]]  # checked once for the one tree, and nothing broke
    assert CycleRun.objects.get().errors == []
    # A decision that breaks one is an error of that cycle, in its record.
    monkeypatch.setattr(
        admission, "check_cycle", lambda s, r: ["runtime quota of team-a-q (cpu 20000) exceeds"]
    )
    tick(cluster=world.cluster, now=world.clock.advance(1))
    last = CycleRun.objects.order_by("-id").first()
    assert last is not None
    assert last.errors == ["invariant: runtime quota of team-a-q (cpu 20000) exceeds"]


def test_what_other_trees_hold_is_summed_whatever_the_shapes(world):
    """placement.held_elsewhere: the holding rows' assignments summed per node and
    resource; what is not an object of objects holds nothing."""
    from queueing.state import placement

    rows = [
        ({"n1": {"cpu": 2000, "memory": 1024}, "n2": {"cpu": 500}}, Phase.RUNNING),
        ({"n1": {"cpu": 1500, "nvidia.com/gpu": 1}}, Phase.ADMITTED),
        ({"n2": {"cpu": "250"}}, Phase.RUNNING),  # an amount as text
        ({"n1": {}}, Phase.RUNNING),  # a node with nothing
        ([], Phase.RUNNING),  # not an object: holds nothing
        ({"n1": {"cpu": 9999}}, Phase.SUCCEEDED),  # holds nothing any more
        ({"n1": {"cpu": 7000}}, Phase.PENDING),
    ]
    quota_id = 0
    for i, (assignment, phase) in enumerate(rows):
        made = submit(world, f"w{i}", cpu="1")
        quota_id = made.quota_id
        Workload.objects.filter(pk=made.pk).update(assignment=assignment, phase=phase)
    decoded: placement.Usage = {}
    for assignment in Workload.objects.filter(phase__in=HOLDING_PHASES).values_list(
        "assignment", flat=True
    ):
        for node, held in (assignment or {}).items():
            bucket = decoded.setdefault(node, {})
            for resource, amount in held.items():
                bucket[resource] = bucket.get(resource, 0) + int(amount)
    summed = {node: dict(held) for node, held in placement.held_elsewhere([]).items()}
    assert summed == {n: h for n, h in decoded.items() if h}
    assert summed == {"n1": {"cpu": 3500, "memory": 1024, "nvidia.com/gpu": 1}, "n2": {"cpu": 750}}
    # The tree's own quotas are left out: here every row.
    assert dict(placement.held_elsewhere([quota_id])) == {}


def test_a_cycle_reads_its_own_trees_quotas_with_their_ledgers(world):
    # Three levels under "other" (root -> "other-q" -> "deep") beside the world's tree.
    leaf = builders.tree("other", "16")
    deep = actions.create_quota(
        SYSTEM, name="deep", tenant=leaf.tenant, parent=leaf, min={"cpu": "4"}, max={"cpu": "4"}
    )
    UsageLedger.objects.create(quota=deep, usage={"cpu": 1.5}, updated_at=world.clock())
    mine = {q["name"]: q for q in state.read_quotas("other")}
    assert set(mine) == {"other", "other-q", "deep"}
    assert mine["deep"]["ledger_usage"] == {"cpu": 1.5}
    assert mine["other"]["ledger_id"] is None
    assert {q["name"] for q in state.read_quotas("cluster")} == set(
        Quota.objects.exclude(name__in=mine).values_list("name", flat=True)
    )
    assert len(state.read_quotas()) == Quota.objects.count()
    # A cycle decodes only its tree's quotas: one read, its rows the tree's.
    with CaptureQueriesContext(connection) as queries:
        cycle_root("other", cluster=world.cluster, now=world.clock())
    reads = [q["sql"] for q in queries.captured_queries if "kq_tree" in q["sql"]]
    assert len(reads) == 1, reads


def test_a_pass_of_two_trees_reads_queues_and_holdings_once_and_counts_its_own_admissions(world):
    # Two trees of 16 cpu over the same two 8-cpu nodes, each with 16 cpu of work, cycled
    # in one pass (a woken sync's trees): the second tree's snapshot comes from the
    # pass's one read of the holdings, plus what the first tree admitted in the pass --
    # its engine sees the nodes full and places nothing (without ``took`` it would place
    # on the same room and have every admission withdrawn under the lock).
    from queueing.admission import CycleSummary, _cycle_roots

    other = builders.tree("other", "16")
    mine = [submit(world, f"a{i}", cpu="4") for i in range(4)]
    for i in range(4):
        submit(world, f"b{i}", cpu="4", quota=other)
    summary = CycleSummary()
    with CaptureQueriesContext(connection) as queries:
        _cycle_roots(world.cluster, ["cluster", "other"], world.clock(), summary)
    assert summary.roots == ["cluster", "other"]
    assert summary.admitted == 4
    assert summary.conflicts == 0
    assert sorted(
        Workload.objects.filter(phase__in=HOLDING_PHASES).values_list("id", flat=True)
    ) == sorted(w.pk for w in mine)
    assert held_per_node() == {"node-1": 8000, "node-2": 8000}
    last = CycleRun.objects.filter(root="other").latest("id")
    assert last.stats["displaced"] == 0.0
    sqls = [q["sql"] for q in queries.captured_queries]
    queue_table = connection.ops.quote_name(Queue._meta.db_table)
    assert sum(1 for sql in sqls if sql.startswith("SELECT") and f" FROM {queue_table}" in sql) == 1
    # The holdings: read once for the pass. The apply that admitted (the first tree's;
    # the second admitted nothing, took no lock) took the placement lock right after the
    # pass's read, so it reads nothing under it: on PostgreSQL the read goes in one
    # message with the lock's statement (state.batch), gated on the lock's token; on
    # SQLite it is not sent.
    statements = [part for sql in sqls for part in sql.split("; ")]
    table = connection.ops.quote_name(Workload._meta.db_table)
    holdings = [
        sql
        for sql in statements
        if sql.startswith(f'SELECT {table}."assignment"')  # the read under the lock
        or sql.startswith("SELECT * FROM (SELECT")  # the same, gated on the lock's token
        or sql.startswith("SELECT COALESCE((SELECT")  # the pass's, with the token
    ]
    assert len(holdings) == (2 if connection.vendor == "postgresql" else 1), holdings


def urgent_awaiting(world, low_b_cpu: str) -> Workload:
    """An 8-cpu job fills one 8-cpu node, one of ``low_b_cpu`` the other (both priority
    1, ending within the preemption grace period); then an urgent 8-cpu job arrives and
    a cycle runs. The urgent job, refreshed."""
    submit(world, "low-a", cpu="8", priority=1, runtime=30)
    submit(world, "low-b", cpu=low_b_cpu, priority=1, runtime=30)
    tick(cluster=world.cluster, now=world.clock())
    tick(cluster=world.cluster, now=world.clock.advance(1))
    urgent = submit(world, "urgent", cpu="8", priority=1000, runtime=30)
    tick(cluster=world.cluster, now=world.clock.advance(1))
    urgent.refresh_from_db()
    return urgent


def test_a_preemptor_awaiting_finishing_work_is_stored_as_such_and_read_back(world):
    # Two 8-cpu jobs fill the 16-cpu quota and end within the preemption grace period;
    # an urgent one awaits them instead of evicting one: it is nominated *and* awaiting,
    # which the next snapshot carries (an awaiting preemptor freezes no aged claim,
    # engine.cyclestate). Admitted, it is neither.
    urgent = urgent_awaiting(world, "8")
    assert urgent.phase == Phase.PENDING
    assert urgent.explanation["limit"] == "finishing"
    assert (urgent.nominated, urgent.awaiting) == (True, True)
    snapshot, _ = state.build_snapshot("cluster", nodes=world.cluster.nodes(), now=world.clock())
    spec = next(w for w in snapshot.workloads if w.id == urgent.pk)
    assert (spec.nominated, spec.awaiting) == (True, True)
    for _ in range(40):
        tick(cluster=world.cluster, now=world.clock.advance(1))
    urgent.refresh_from_db()
    assert urgent.phase in (Phase.ADMITTED, Phase.RUNNING, Phase.SUCCEEDED)
    assert (urgent.nominated, urgent.awaiting) == (False, False)


def test_the_cycle_record_keeps_the_free_room_held_for_a_waiting_preemptor(world):
    # 16 cpu on two 8-cpu nodes: an 8-cpu job fills one, a 4-cpu one half the other.
    # The urgent 8-cpu job awaits the 4-cpu one (it ends within the grace period) and
    # the free 4 cpu beside it are kept for it: the cluster page shows that room as
    # kept, not idle (portal.queries.node_holds).
    urgent = urgent_awaiting(world, "4")
    assert (urgent.phase, urgent.nominated, urgent.awaiting) == (Phase.PENDING, True, True)
    low_b = Workload.objects.get(name="low-b")
    (node,) = low_b.assignment
    run = CycleRun.objects.order_by("-started_at", "-id").first()
    assert run is not None
    assert run.holds == [
        {"node": node, "workload_id": urgent.pk, "kind": "reservation", "resources": {"cpu": 4000}}
    ]
    for _ in range(40):
        tick(cluster=world.cluster, now=world.clock.advance(1))
    latest = CycleRun.objects.order_by("-started_at", "-id").first()
    assert latest is not None
    assert latest.holds == []


def test_a_share_no_waiting_work_can_use_is_lent_and_the_workload_says_by_whom(world):
    # 16 cpu shared by team-a and team-b (no mins, equal weights: 8 each). a runs 2 and
    # waits with a 7-pod gang (needs 9), b runs 6 and waits with an 8-pod gang (needs
    # 14): neither fits its share and 8 cpu are idle. a's gang borrows the 1 cpu of
    # b's share that b's gang cannot use (engine.lending) and its reason says so.
    actions.update_quota(SYSTEM, world.quota, min={})
    quota_b = builders.tenant_quota(world, "team-b", min={}, max={"cpu": "16"})
    submit(world, "a-run", cpu="2", runtime=3600)
    submit(world, "b-run", cpu="6", runtime=3600, quota=quota_b)
    tick(cluster=world.cluster, now=world.clock())
    submit(world, "a-gang", cpu="1", count=7, runtime=600)
    submit(world, "b-gang", cpu="1", count=8, runtime=600, quota=quota_b)
    tick(cluster=world.cluster, now=world.clock.advance(1))
    a_gang = Workload.objects.get(name="a-gang")
    assert a_gang.phase == Phase.ADMITTED
    assert a_gang.reason == (
        "Admitted on 1 cpu lent by team-b-q -- room their waiting work could not use "
        "this cycle -- and placed on nodes."
    )
    assert Workload.objects.get(name="b-gang").phase == Phase.PENDING
    assert Quota.objects.get(pk=world.quota.pk).runtime == {"cpu": 9000}
