"""A guaranteed minimum on nodes full of work within its owners' runtime quota (issue 11).

The runtime quota counts every schedulable node, but a workload can use only the nodes
it tolerates and selects: the demo's cpu-only jobs have the 16 cpu nodes (496 cores) of
the 992 cpu its quota tree counts. When those nodes are full of a sibling's work that is
within the sibling's runtime quota (the GPU nodes' idle cpu is "shared" with it), nothing
is borrowed by that measure, and a quota under its min waited for as long as the work
ran. A preemptor whose quota fits, whose pods do not place, and whose quota stays within
its min reclaims from quotas using more than their min, on the nodes it needs.
"""

from __future__ import annotations

from queueing.engine.invariants import check_cycle
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

EPOCH = 1_700_000_000.0
TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


def world() -> tuple[Scenario, int]:
    quotas = (
        QuotaNode("root"),
        QuotaNode("a", "root", min=Resources({"cpu": 4000}), max={"cpu": 16_000}),
        QuotaNode("b", "root", min=Resources({"cpu": 4000}), max={"cpu": 16_000}),
    )
    queues = (QueueSpec("a"), QueueSpec("b"))
    # 8 cpu that cpu jobs can use, 8 more on a tainted node that none of them tolerates.
    nodes = (
        NodeSpec("cpu", Resources({"cpu": 8000})),
        NodeSpec("gpu", Resources({"cpu": 8000}), taints=(TAINT,)),
    )
    arrivals: list[Arrival] = []

    def add(wid: int, quota: str, at: float, runtime: float, priority: int = 0) -> None:
        w = WorkloadSpec(
            id=wid,
            name=f"{quota}-{wid}",
            quota=quota,
            queue=quota,
            priority=priority,
            queue_order_at=EPOCH + at,
            pod_sets=(PodSet("w", 1, Resources({"cpu": 2000})),),
            expected_runtime_s=runtime,
        )
        arrivals.append(Arrival(at, w, quota, runtime))

    # b fills the cpu node for 20 minutes (8 of its runtime quota's 14: within it).
    for i in range(4):
        add(i + 1, "b", 0.0, 1200.0)
    # a, under its min of 4, asks for 2 a minute later; b's priority is higher.
    add(10, "a", 60.0, 30.0, priority=-5)
    return Scenario("reclaim-min", quotas, queues, nodes, tuple(arrivals)), 10


def test_a_quota_under_its_min_reclaims_on_the_nodes_it_can_use() -> None:
    scenario, small = world()
    seen: dict[int, float] = {}
    reasons: list[str] = []

    class Watch:
        def before(self, snap: Snapshot) -> Snapshot:
            return snap

        def after(self, snap: Snapshot, result: CycleResult) -> None:
            assert check_cycle(snap, result) == []
            for a in result.admissions:
                seen.setdefault(a.workload_id, snap.now - EPOCH)
            reasons.extend(p.message for p in result.preemptions)

    simulate(
        scenario,
        cycle_interval_s=5.0,
        config=EngineConfig(fair_share_mode="instant"),
        epoch=EPOCH,
        observer=Watch(),
    )
    # Before: it waited for b's work to end (1,200 s). Now one of b's four is evicted
    # (b keeps 6, above its min of 4) and a starts two cycles later.
    assert seen[small] <= 60.0 + 10.0
    assert len(reasons) == 1
    assert (
        "reclaims its guaranteed share from quota b, which uses more than its min" in (reasons[0])
    )
