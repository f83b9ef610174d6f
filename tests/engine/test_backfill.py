"""Backfill into a drain: work that ends before an aged gang can start uses its room.

A drain (``Cycle.starving``) holds, for the rest of a cycle, the free room of the nodes
an aged gang will start on, until the work on them ends. Without backfill that room
stayed idle even for work that would have ended long before the gang could start: in
the demo's overloaded worlds the drains held 88 cpu of the 496-cpu pool on average
(demo-waves seed 6). Work with a declared runtime (a limit) that ends by the time the
gang can start at the latest may use it, as Slurm backfills only jobs with a time
limit; work that would end later, or whose end is not known, may not.
"""

from __future__ import annotations

import dataclasses

import pytest

from queueing.engine import run_cycle
from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, Scenario, simulate
from queueing.engine.types import (
    CycleResult,
    EngineConfig,
    NodeSpec,
    PodSet,
    QueueSpec,
    QuotaNode,
    Snapshot,
    Taint,
    WorkloadSpec,
)

from .builders import node, quota, running, snapshot, workload

NOW = 1000.0
EPOCH = 1_700_000_000.0
CYCLE_S = 2.0
TAINT = Taint("dedicated", "gpu", "NoSchedule")


def drained_world(runtime: float | None, *, backfill: bool = True) -> Snapshot:
    """Two 16-cpu nodes, 12 cpu of each held until NOW + 100 at the latest; an aged
    2 x 16-cpu gang (strict order) drains the free 4 cpu of both; a 4-cpu job of
    another queue with declared runtime ``runtime`` waits. A tainted node neither
    tolerates makes the cluster's quota roomy: both are short of nodes only."""
    return snapshot(
        quotas=[
            quota("root"),
            quota("big", "root", min={"cpu": 64}),
            quota("small", "root", min={"cpu": 16}),
        ],
        nodes=[
            node("n0", {"cpu": 16}),
            node("n1", {"cpu": 16}),
            node("t", {"cpu": 128}, taints=[TAINT]),
        ],
        workloads=[
            running(1, "big", "n0", req={"cpu": 12}, started_at=NOW, expected_runtime_s=100.0),
            running(2, "big", "n1", req={"cpu": 12}, started_at=NOW, expected_runtime_s=100.0),
            workload(3, "big", req={"cpu": 16}, count=2, expected_runtime_s=50.0, ts=1.0),
            workload(4, "small", req={"cpu": 4}, expected_runtime_s=runtime, ts=NOW),
        ],
        queues=[
            QueueSpec("big", policy="Block", aging_bound_s=300.0),
            QueueSpec("small", policy="Priority", aging_bound_s=300.0),
        ],
        now=NOW + 10,
        config=EngineConfig(backfill=backfill),
    )


def test_work_that_ends_before_the_gang_can_start_backfills_its_drain() -> None:
    got = run_cycle(drained_world(60.0))  # ends at NOW + 70, the gang starts at NOW + 100
    assert [a.workload_id for a in got.admissions] == [4]
    # The gang still waits, for the same nodes, by the same bound.
    assert got.explanations[3].starts_by == pytest.approx(NOW + 100)


@pytest.mark.parametrize(
    ("runtime", "backfill"),
    [
        (120.0, True),  # would end at NOW + 130: after the gang can start
        (None, True),  # no declared runtime: when it ends is not known
        (60.0, False),  # backfill off: the drain holds its room
    ],
)
def test_work_that_may_not_backfill_waits_for_the_gang(
    runtime: float | None, backfill: bool
) -> None:
    got = run_cycle(drained_world(runtime, backfill=backfill))
    assert got.admissions == ()
    assert got.explanations[4].kind == "nodes"


class _Starts:
    def __init__(self, gang: int) -> None:
        self.gang = gang
        self.gang_at: float | None = None
        self.before_gang = 0

    def before(self, snap: Snapshot) -> Snapshot:
        return snap

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        for a in result.admissions:
            if a.workload_id == self.gang:
                self.gang_at = snap.now - EPOCH
            elif self.gang_at is None and a.workload_id > 2:
                self.before_gang += 1


def gang_behind_long_work(backfill: bool) -> _Starts:
    """Four 16-cpu nodes; two 16-cpu jobs run until 300 s; an aged 4 x 16-cpu gang
    (strict order) waits for them, and 4-cpu jobs of 60 s arrive every 10 s. A tainted
    node none tolerates gives the cluster's quota room: the gang waits for nodes."""
    quotas = (
        QuotaNode("root", max={"cpu": 1_000_000}),
        QuotaNode("big", "root"),
        QuotaNode("small", "root"),
    )
    queues = (
        QueueSpec("big", policy="Block", aging_bound_s=300.0),
        QueueSpec("small", policy="Priority", aging_bound_s=300.0),
    )
    nodes = tuple(NodeSpec(f"n{i}", Resources({"cpu": 16_000})) for i in range(4))
    nodes += (NodeSpec("t", Resources({"cpu": 64_000}), taints=(TAINT,)),)
    arrivals: list[Arrival] = []

    def add(wid: int, at: float, q: str, pods: int, cpu: int, runtime: float, **kw: float) -> None:
        w = WorkloadSpec(
            id=wid,
            name=f"{q}-{wid}",
            quota=q,
            queue=q,
            priority=0,
            queue_order_at=EPOCH + kw.get("queued", at),
            pod_sets=(PodSet("w", pods, Resources({"cpu": cpu})),),
            expected_runtime_s=runtime,
        )
        arrivals.append(Arrival(at, w, q, runtime))

    add(1, 0.0, "small", 1, 16_000, 300.0)
    add(2, 0.0, "small", 1, 16_000, 300.0)
    gang = 3
    add(gang, 5.0, "big", 4, 16_000, 100.0, queued=-1000.0)  # queued long ago: aged
    for i in range(20):
        add(10 + i, 7.0 + 10 * i, "small", 1, 4_000, 60.0)
    watch = _Starts(gang)
    simulate(
        dataclasses.replace(Scenario("backfill", quotas, queues, nodes, tuple(arrivals))),
        cycle_interval_s=CYCLE_S,
        config=EngineConfig(cycle_interval_s=CYCLE_S, backfill=backfill),
        epoch=EPOCH,
        observer=watch,
        invariants=True,
    )
    return watch


def test_backfill_uses_the_drained_room_without_delaying_the_gang() -> None:
    held = gang_behind_long_work(backfill=False)
    filled = gang_behind_long_work(backfill=True)
    # Without backfill nothing starts before the gang: its drain holds the two free
    # nodes for 300 s. With it, the small jobs that end in time run there meanwhile.
    assert held.before_gang == 0
    assert filled.before_gang >= 10
    assert held.gang_at is not None
    assert filled.gang_at is not None
    assert held.gang_at <= 300.0 + 2 * CYCLE_S
    assert filled.gang_at <= held.gang_at


def test_the_room_a_drain_keeps_is_in_the_result_less_what_backfill_took() -> None:
    # The cluster page shows it as kept for the gang, not idle.
    waits = run_cycle(drained_world(200.0), forecast=False)  # ends after the gang starts
    assert waits.admissions == ()
    assert [(h.node, h.workload_id, h.kind, h.resources.to_dict()) for h in waits.holds] == [
        ("n0", 3, "drain", {"cpu": 4}),
        ("n1", 3, "drain", {"cpu": 4}),
    ]
    backfilled = run_cycle(drained_world(60.0), forecast=False)
    assert [a.workload_id for a in backfilled.admissions] == [4]
    (node_used,) = backfilled.admissions[0].assignment
    assert [(h.node, h.resources.to_dict()) for h in backfilled.holds] == [
        (n, {"cpu": 4}) for n in ("n0", "n1") if n != node_used
    ]
    assert waits.to_dict()["holds"][0] == {
        "node": "n0",
        "workload_id": 3,
        "kind": "drain",
        "resources": {"cpu": 4},
    }
