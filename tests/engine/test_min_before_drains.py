"""A guaranteed minimum before a drain for a claim beyond its own min (issue 11).

The demo in virtual time (``tests/bench/measure_starvation.py``, its "min unused"
detector, demo-waves over 30 minutes and ten seeds): 27 stretches of 32-136 s in which
a quota under its min had a head that fitted within it and waited, almost all of them
analytics-adhoc's small and medium jobs. In every one the head's pods fitted on the
nodes as they were held; the room had been drained (``Cycle.starving``) for an aged
128-cpu gang -- of another quota, or of its own, beyond its min -- that could not place
anyway on cpu nodes fragmented by running 16-cpu pods (15 cpu free on each node). The
drain counts a node by the pods it holds *now* (none), so it held every node.

Here: four 16-cpu nodes, each with 9 cpu held by one long workload of quota c (within
runtime quota, and evicting it would take c below its min: no reclaim; a fifth node,
which none of the jobs may use, makes room under the root for them all). b's aged gang
of four 12-cpu pods cannot place (7 cpu free per node) and drains them: it needs all
four (a drain holds only the nodes the gang will start on, ``Cycle.reservation``). a,
under its min, asks for 2 cpu.
"""

from __future__ import annotations

import dataclasses

from queueing.engine import run_cycle
from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, Scenario
from queueing.engine.types import NodeSpec, QueueSpec, QuotaNode, Snapshot
from tests.engine.builders import EPOCH, arrival, podset, simulate_checked

LONG_S = 1200.0
A_AT = 100.0


MAIN = {"pool": "main"}


def _w(wid: int, quota: str, at: float, pods: int, cpu: int, runtime: float) -> Arrival:
    """A job on the four main nodes (the spare node is there for the root's room)."""
    a = arrival(wid, quota, at, pods, {"cpu": cpu * 1000}, runtime)
    w = dataclasses.replace(
        a.workload, pod_sets=(podset(pods, {"cpu": cpu * 1000}, selector=MAIN),)
    )
    return dataclasses.replace(a, workload=w)


def world(a_jobs: tuple[tuple[int, int], ...] = ((1, 2),)) -> Scenario:
    quotas = (
        QuotaNode("root"),
        *(
            QuotaNode(n, "root", min=Resources({"cpu": 8000}), max={"cpu": 64_000})
            for n in ("a", "b", "c")
        ),
    )
    queues = tuple(QueueSpec(n, aging_bound_s=60.0) for n in ("a", "b", "c"))
    nodes = (
        *(NodeSpec(f"n{i}", Resources({"cpu": 16_000}), labels=MAIN) for i in range(4)),
        NodeSpec("spare", Resources({"cpu": 32_000}), labels={"pool": "spare"}),
    )
    arrivals = [
        _w(1, "c", 0.0, 4, 9, LONG_S),  # one 9-cpu pod per node for 20 minutes
        _w(2, "b", 1.0, 4, 12, 60.0),  # the gang: 48 cpu, beyond b's min of 8
    ]
    for n, (pods, cpu) in enumerate(a_jobs):
        arrivals.append(_w(10 + n, "a", A_AT + n, pods, cpu, LONG_S))
    return Scenario("min-before-drains", quotas, queues, nodes, tuple(arrivals))


def run(sc: Scenario) -> tuple[dict[int, float], list[str]]:
    seen = simulate_checked(sc)
    return seen.started, seen.evicted


def test_work_within_its_min_places_on_room_drained_for_a_claim_beyond_min() -> None:
    started, evicted = run(world())
    # Before: a's 2 cpu waited for c's work to end (1,200 s) while b's drain held 28 cpu.
    assert started[10] <= A_AT + 5.0
    assert evicted == []  # nothing evicted: the room was free, only held back
    # The aged gang still starts as soon as c's work ends, on the room it kept.
    assert LONG_S <= started[2] <= LONG_S + 10.0


def test_work_beyond_its_min_still_waits_for_the_drained_head() -> None:
    # a's second job (2 x 4 cpu) takes a to 10 cpu, beyond its min of 8: it waits for
    # the aged gang, whose drain it may not use (it would fit on the nodes otherwise).
    started, _ = run(world(((1, 2), (2, 4))))
    assert started[10] <= A_AT + 5.0
    assert started[11] >= LONG_S
    assert started[2] <= started[11]


def test_a_drain_for_a_head_within_its_own_min_is_not_taken() -> None:
    # The head's claim is itself a guarantee (b's min raised to its 48 cpu): its drain
    # holds against other quotas' guaranteed work as before.
    sc = world()
    quotas = tuple(
        QuotaNode("b", "root", min=Resources({"cpu": 48_000}), max={"cpu": 64_000})
        if q.name == "b"
        else q
        for q in sc.quotas
    )
    sc = Scenario(sc.name, quotas, sc.queues, sc.nodes, sc.arrivals)
    started, _ = run(sc)
    assert started[10] >= LONG_S


def test_one_cycle_admits_within_min_work_on_the_drained_room() -> None:
    """The decision in one cycle: the drain gives up exactly what a's job uses."""
    sc = world()
    c_work = sc.arrivals[0].workload
    c_running = dataclasses.replace(
        c_work,
        phase="Running",
        admitted_at=EPOCH,
        started_at=EPOCH,
        assignment={f"n{i}": Resources({"cpu": 9000}) for i in range(4)},
    )
    gang = sc.arrivals[1].workload
    small = sc.arrivals[2].workload
    snap = Snapshot(
        now=EPOCH + 200.0,
        quotas=sc.quotas,
        queues=sc.queues,
        workloads=(c_running, gang, small),
        nodes=sc.nodes,
    )
    result = run_cycle(snap, forecast=False)
    assert [a.workload_id for a in result.admissions] == [small.id]
    assert result.preemptions == ()
    assert result.explanations[gang.id].kind == "nodes"
