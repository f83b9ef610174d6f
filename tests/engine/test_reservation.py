"""Aging's bound against other queues' younger work (issue 11, item 6).

Two changes, each measured on the demo's worlds with waves (``measure_starvation``,
twelve seeds of 30 minutes, in docs/BENCHMARKS.md):

* **An aged head first across queues.** The tournament ranked queues by fair share
  only, so an aged 128-cpu gang of analytics-adhoc lost the cpu nodes that freed to
  younger gangs of queues ranked before it (nlp-research, analytics-etl), cycle after
  cycle: its drain came too late in the cycle to hold anything. Now the first candidate
  of each queue and quota that has waited its queue's ``aging_bound_s`` goes before
  work that has not (of the same queue priority), once per cycle, the oldest first;
  the rest goes by fair share as before. Once per cycle, not every aged workload: with
  all of them first, a tenant whose backlog was older than the bound took every slot
  before a light tenant's new job, which then waited out the bound itself.
* **The drain holds the nodes the gang will start on.** It counted a node by the pods it
  could hold *now*: on nodes fragmented by running work (7 cpu free on each, 12-cpu
  pods) no node counted, and it held every free cpu of every node while the gang waited
  for a few of them. It now reads when the work on each node ends (at the latest its
  declared runtime) and holds only the nodes on which the gang can start soonest.
"""

from __future__ import annotations

import dataclasses

from queueing.engine import run_cycle
from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, Scenario
from queueing.engine.types import NodeSpec, QueueSpec, QuotaNode, Snapshot, WorkloadSpec

from .builders import (
    EPOCH,
    arrival,
    node,
    podset,
    quota,
    running,
    simulate_checked,
    snapshot,
    workload,
)

NOW = 1000.0


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu}


def world(q0_at: float, q1_at: float) -> Snapshot:
    """Two quotas guaranteed 4 cpu each, both demanding more (runtime quota 4 each);
    q0 holds 1 and q1 holds 3, so by fair share q0's candidate goes first. Both want
    the one pool-x node's single cpu."""
    x = {"pool": "x"}
    on_x = [podset(1, one(1), selector=x)]
    return snapshot(
        quotas=[quota("root")] + [quota(f"q{i}", "root", min=one(4)) for i in range(2)],
        nodes=[node("nx", one(1), labels=x), node("ny", one(7), labels={"pool": "y"})],
        workloads=[
            running(1, "q0", "ny", req=one(1)),
            running(2, "q1", "ny", req=one(3)),
            workload(10, "q0", req=one(1), ts=q0_at, pod_sets=on_x),
            workload(11, "q0", req=one(4), ts=q0_at + 1),
            workload(20, "q1", req=one(1), ts=q1_at, pod_sets=on_x),
            workload(21, "q1", req=one(4), ts=q1_at + 1),
        ],
        queues=[QueueSpec("q0", aging_bound_s=300.0), QueueSpec("q1", aging_bound_s=300.0)],
        now=NOW,
    )


def tiers(q0_at: float, q1_at: float) -> list[int]:
    """Which of the two candidates for the pool-x node is admitted."""
    got = run_cycle(world(q0_at, q1_at), forecast=False).admissions
    return [a.workload_id for a in got if a.workload_id in (10, 20)]


def test_an_aged_workload_goes_before_a_younger_one_of_a_queue_ranked_first() -> None:
    assert tiers(q0_at=NOW - 10, q1_at=NOW - 400) == [20]


def test_the_oldest_aged_head_goes_first_and_fair_share_orders_work_not_aged() -> None:
    assert tiers(q0_at=NOW - 350, q1_at=NOW - 400) == [20]  # both aged: q1's is older
    assert tiers(q0_at=NOW - 400, q1_at=NOW - 350) == [10]  # both aged: q0's is older
    assert tiers(q0_at=NOW - 20, q1_at=NOW - 10) == [10]  # neither: fair share
    assert tiers(q0_at=NOW - 10, q1_at=NOW - 20) == [10]


def test_an_aged_workload_still_waits_for_a_queue_of_higher_priority() -> None:
    # q0 young, q1's workload aged, but q0 is the queue of higher priority now.
    snap = world(NOW - 10, NOW - 400)
    snap = dataclasses.replace(
        snap, queues=(QueueSpec("q0", aging_bound_s=300.0, priority=10), snap.queues[1])
    )
    got = run_cycle(snap, forecast=False).admissions
    assert [a.workload_id for a in got if a.workload_id in (10, 20)] == [10]


# -- the drain's nodes -----------------------------------------------------------------

A_AT = 100.0


def drain_world() -> Scenario:
    """Four 16-cpu nodes with 9 cpu held on each by quota c's work: on n0 and n1 for
    300 s, on n2 and n3 for 1,200 s. b's gang of two 12-cpu pods (beyond b's min)
    ages at 60 s and waits for two nodes; a asks for 2 x 4 cpu at 100 s, beyond its own
    min, so it may not use a drain's room."""
    quotas = (
        QuotaNode("root"),
        *(
            QuotaNode(n, "root", min=Resources({"cpu": 6000}), max={"cpu": 64_000})
            for n in ("a", "b", "c")
        ),
    )
    queues = tuple(QueueSpec(n, aging_bound_s=60.0) for n in ("a", "b", "c"))
    nodes = tuple(NodeSpec(f"n{i}", Resources({"cpu": 16_000})) for i in range(4))
    arrivals: list[Arrival] = [
        arrival(1, "c", 0.0, 2, {"cpu": 9000}, 300.0),  # n0, n1
        arrival(2, "c", 0.0, 2, {"cpu": 9000}, 1200.0),  # n2, n3
        arrival(3, "b", 1.0, 2, {"cpu": 12_000}, 60.0),
        arrival(10, "a", A_AT, 2, {"cpu": 4000}, 1200.0),
    ]
    return Scenario("drain-nodes", quotas, queues, nodes, tuple(arrivals))


def test_the_drain_holds_only_the_nodes_that_free_first_and_others_go_on() -> None:
    seen = simulate_checked(drain_world())
    assert seen.evicted == []
    # Before: the drain held the 7 free cpu of all four nodes, and a waited for the
    # gang to start (300 s). Now it holds n0 and n1 only.
    assert seen.started[10] <= A_AT + 5.0
    assert 300.0 <= seen.started[3] <= 310.0


def test_one_cycle_holds_the_nodes_whose_work_ends_first() -> None:
    sc = drain_world()
    c1, c2, gang, a = (x.workload for x in sc.arrivals)

    def ran(w: WorkloadSpec, on: tuple[str, ...]) -> WorkloadSpec:
        return dataclasses.replace(
            w,
            phase="Running",
            admitted_at=EPOCH,
            started_at=EPOCH,
            assignment={n: Resources({"cpu": 9000}) for n in on},
        )

    snap = snapshot(
        quotas=sc.quotas,
        queues=sc.queues,
        nodes=sc.nodes,
        workloads=(ran(c1, ("n0", "n1")), ran(c2, ("n2", "n3")), gang, a),
        now=EPOCH + 200.0,
    )
    result = run_cycle(snap, forecast=False)
    adm = {x.workload_id: x for x in result.admissions}
    assert list(adm) == [a.id]
    assert {n for _ps, n, _k in adm[a.id].placements} == {"n2", "n3"}
    assert result.explanations[gang.id].kind == "nodes"


def test_a_light_tenant_is_not_held_behind_a_heavy_tenants_aged_backlog() -> None:
    """Only the first aged candidate of each queue and quota goes first, once a cycle:
    q1's backlog has all aged, q0's one job is new. With room for two, q1's first aged
    job goes first and then fair share picks q0's job over q1's next aged one. (With
    every aged job first, a tenant with a backlog older than the bound took every slot
    before a light tenant's new job, which waited out the bound.)"""
    x = {"pool": "x"}
    on_x = [podset(1, one(1), selector=x)]
    snap = snapshot(
        quotas=[quota("root")] + [quota(f"q{i}", "root", min=one(4)) for i in range(2)],
        nodes=[node("nx", one(2), labels=x), node("ny", one(6), labels={"pool": "y"})],
        workloads=[
            running(1, "q0", "ny", req=one(1)),
            running(2, "q1", "ny", req=one(2)),
            workload(10, "q0", req=one(1), ts=NOW - 10, pod_sets=on_x),
            workload(11, "q0", req=one(4), ts=NOW - 9),
            workload(20, "q1", req=one(1), ts=NOW - 500, pod_sets=on_x),
            workload(22, "q1", req=one(1), ts=NOW - 499, pod_sets=on_x),
            workload(21, "q1", req=one(4), ts=NOW - 498),
        ],
        queues=[QueueSpec("q0", aging_bound_s=300.0), QueueSpec("q1", aging_bound_s=300.0)],
        now=NOW,
    )
    result = run_cycle(snap, forecast=False)
    assert result.runtime_quota["q0"] == {"cpu": 4}
    assert result.runtime_quota["q1"] == {"cpu": 4}
    assert [a.workload_id for a in result.admissions] == [20, 10]
