"""A guaranteed min behind borrowed work that reclaim may not take (issue 11).

What is left of the demo's "min unused" stretches in virtual time after drains yield
to guaranteed work (``test_min_before_drains.py``): the cluster's GPUs all held, the
borrowed ones in gangs larger than what their quota holds beyond its min (the demo:
vision-train under its min of 24 wants 1 GPU; nlp-prod holds two 16-GPU gangs, nlp
is 8 above its min of 24). Taking a gang would take its quota below its own min, which
reclaim never does (that quota would take it back: ping-pong), so the head waits for
borrowed work to end. It must then start at once, and its explanation must say so,
naming that work -- before, it read only "cluster max is short by 1 nvidia.com/gpu".

Here: 16 GPUs. b (min 8) runs one 12-GPU gang for 300 s: 4 borrowed, but taking it
leaves b at 0. a (min 8) holds 4 and asks for 1 more.
"""

from __future__ import annotations

from queueing.engine.calibration import contradictions
from queueing.engine.invariants import check_cycle
from queueing.engine.resources import Resources
from queueing.engine.scenarios import GPU
from queueing.engine.simulator import Arrival, Scenario, simulate
from queueing.engine.types import (
    EXPLAIN_QUOTA,
    CycleResult,
    EngineConfig,
    NodeSpec,
    PodSet,
    QueueSpec,
    QuotaNode,
    Snapshot,
    WorkloadSpec,
)

EPOCH = 1_700_000_000.0
GANG_S = 300.0
HEAD_AT = 20.0


def _w(wid: int, quota: str, at: float, pods: int, gpus: int, runtime: float) -> Arrival:
    w = WorkloadSpec(
        id=wid,
        name=f"{quota}-{wid}",
        quota=quota,
        queue=quota,
        priority=0,
        queue_order_at=EPOCH + at,
        pod_sets=(PodSet("w", pods, Resources({"cpu": 1000, GPU: gpus})),),
        expected_runtime_s=runtime,
    )
    return Arrival(at, w, quota, runtime)


def world(b_min: int = 8) -> Scenario:
    quotas = (
        QuotaNode("cluster"),
        QuotaNode("a", "cluster", min=Resources({GPU: 8}), max={GPU: 16}),
        QuotaNode("b", "cluster", min=Resources({GPU: b_min}), max={GPU: 16}),
    )
    queues = (QueueSpec("a"), QueueSpec("b"))
    nodes = tuple(NodeSpec(f"g{i}", Resources({"cpu": 32_000, GPU: 8})) for i in range(2))
    arrivals = (
        _w(1, "a", 0.0, 1, 4, 3600.0),  # a holds 4 of its 8
        _w(2, "b", 0.0, 3, 4, GANG_S),  # b's 12-GPU gang: 4 beyond its min
        _w(3, "a", HEAD_AT, 1, 1, 60.0),  # a's head: within its min
    )
    return Scenario("guarded", quotas, queues, nodes, arrivals)


def run(sc: Scenario) -> tuple[dict[int, float], list[str], list[tuple[str, str, str]]]:
    started: dict[int, float] = {}
    evicted: list[str] = []
    said: list[tuple[str, str, str]] = []
    names = {a.workload.id: a.workload.name for a in sc.arrivals}

    class Watch:
        def before(self, snap: Snapshot) -> Snapshot:
            return snap

        def after(self, snap: Snapshot, result: CycleResult) -> None:
            assert check_cycle(snap, result) == []
            for a in result.admissions:
                started.setdefault(a.workload_id, snap.now - EPOCH)
            evicted.extend(p.message for p in result.preemptions)
            e = result.explanations.get(3)
            if e is not None:
                said.append((e.kind, e.sentence(), contradictions(e, names, result)))

    simulate(
        sc,
        cycle_interval_s=5.0,
        config=EngineConfig(fair_share_mode="instant"),
        epoch=EPOCH,
        observer=Watch(),
    )
    return started, evicted, said


def test_borrowed_work_that_reclaim_may_not_take_is_named_and_waited_for() -> None:
    started, evicted, said = run(world())
    # b keeps its gang (taking it would leave b below its min) ...
    assert evicted == []
    # ... and a's head starts in the first cycle after the gang ends.
    assert GANG_S <= started[3] <= GANG_S + 5.0
    assert said
    for kind, sentence, wrong in said:
        assert kind == EXPLAIN_QUOTA
        assert wrong == ""
        assert "is short by 1 nvidia.com/gpu" in sentence
        assert (
            "preempting b-2 would free it, but taking them would leave their quota below "
            "its guaranteed min" in sentence
        ), sentence


def test_borrowed_work_that_reclaim_may_take_is_taken() -> None:
    # b's min lowered to 0: its gang is borrowed whole, and a reclaims at once.
    started, evicted, said = run(world(b_min=0))
    assert len(evicted) == 1
    assert "reclaims its guaranteed share from quota b" in evicted[0]
    assert started[3] <= HEAD_AT + 15.0
    assert all("guaranteed min (it waits" not in s for _, s, _ in said)
