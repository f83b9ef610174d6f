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
from queueing.engine.resources import Resources
from queueing.engine.scenarios import GPU
from queueing.engine.simulator import Arrival, Scenario
from queueing.engine.types import (
    EXPLAIN_QUOTA,
    CycleResult,
    NodeSpec,
    QueueSpec,
    QuotaNode,
    Snapshot,
)
from tests.engine.builders import arrival, simulate_checked

GANG_S = 300.0
HEAD_AT = 20.0


def _w(wid: int, quota: str, at: float, pods: int, gpus: int, runtime: float) -> Arrival:
    return arrival(wid, quota, at, pods, {"cpu": 1000, GPU: gpus}, runtime)


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
    said: list[tuple[str, str, str]] = []
    names = {a.workload.id: a.workload.name for a in sc.arrivals}

    def explained(snap: Snapshot, result: CycleResult) -> None:
        e = result.explanations.get(3)
        if e is not None:
            said.append((e.kind, e.sentence(), contradictions(e, names, result)))

    seen = simulate_checked(sc, each=explained)
    return seen.started, seen.evicted, said


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
