"""Aged claims that collide are served whole, the oldest first.

Aging raises a waiting head's claim on its quota toward its request (:mod:`.aging`),
served in the runtime split after the mins and before the weights. When the claims of
siblings together passed what their parent had left, they were cut in proportion: two
aged heads each got less than they needed, neither could start, and the cluster sat
idle for good -- a 64-cpu gang and a 16-cpu job on 64 idle cpu, each "short" of its
runtime quota (found writing the backfill test: the simulation never ended). Now the
oldest claim is served whole and the next claims only what is left.

Work so admitted borrows beyond its quota's share without claims, which is what fair
share preempts: an 8-GPU job of gpu-heavy was admitted on its claim and evicted at
once by a sibling's fresh job, requeued with its old queue time, admitted on its claim
again -- 16 times. So fair share spares work admitted after waiting its queue's aging
bound, as in-quota preemption already did; a guaranteed reclaim (a quota within its
min) still takes it, and so does a preemptor that aged before it.
"""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.quota import waterfill
from queueing.engine.types import QueueSpec, Snapshot, WorkloadSpec

from .builders import node, quota, running, snapshot, workload


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu}


def test_colliding_claims_are_served_whole_in_age_order() -> None:
    names = ["big", "small"]
    # 64 to share, no mins; claims of 64 and 16 pass it together.
    assert waterfill(64, [0, 0], [64, 16], [1, 1], names, extras=[64, 16], order=[1.0, 2.0]) == [
        64,
        0,
    ]
    # The older claim is the small one: served whole, the gang holds the rest.
    assert waterfill(64, [0, 0], [64, 16], [1, 1], names, extras=[64, 16], order=[2.0, 1.0]) == [
        48,
        16,
    ]
    # Without their ages (a caller that has none) they are cut in proportion, as before.
    assert waterfill(64, [0, 0], [64, 16], [1, 1], names, extras=[64, 16]) == [51, 13]


def two_aged_heads(gang_queued: float, job_queued: float) -> Snapshot:
    """Four idle 16-cpu nodes; an aged 4 x 16-cpu gang (strict order) of quota big and an
    aged 16-cpu job of its sibling small."""
    return snapshot(
        quotas=[quota("root"), quota("big", "root"), quota("small", "root")],
        nodes=[node(f"n{i}", {"cpu": 16}) for i in range(4)],
        workloads=[
            workload(1, "big", req={"cpu": 16}, count=4, ts=gang_queued),
            workload(2, "small", req={"cpu": 16}, ts=job_queued),
        ],
        queues=[
            QueueSpec("big", policy="Block", aging_bound_s=300.0),
            QueueSpec("small", policy="Priority", aging_bound_s=300.0),
        ],
        now=1000.0,
    )


def test_the_oldest_of_two_colliding_aged_heads_starts_on_an_idle_cluster() -> None:
    gang_first = run_cycle(two_aged_heads(gang_queued=1.0, job_queued=2.0))
    assert [a.workload_id for a in gang_first.admissions] == [1]
    job_first = run_cycle(two_aged_heads(gang_queued=2.0, job_queued=1.0))
    assert [a.workload_id for a in job_first.admissions] == [2]
    # The gang waits for the job's room, and says which quota it waits for.
    assert job_first.explanations[1].quota in ("big", "root")


def fair_share_world(victim_queued: float, preemptor: dict[str, float]) -> Snapshot:
    """Root 10 cpu shared 1:1 by A and B (runtime 5 each); B holds 6 in a 1-cpu job and
    a 5-cpu one, A's 5-cpu job waits: fair share would take B's 1-cpu job, admitted at
    400 after queueing at ``victim_queued`` (B's aging bound is 300 s)."""
    return snapshot(
        quotas=[
            quota("root"),
            quota("A", "root", weight=one(1)),
            quota("B", "root", weight=one(1)),
        ],
        nodes=[node("n", one(10))],
        workloads=[
            running(1, "B", "n", req=one(1), ts=victim_queued, admitted_at=400.0),
            running(2, "B", "n", req=one(5), ts=2.0, admitted_at=2.0),
            workload(3, "A", req=one(5), **preemptor),
        ],
        queues=[QueueSpec("A", aging_bound_s=300.0), QueueSpec("B", aging_bound_s=300.0)],
        now=1000.0,
    )


def test_fair_share_spares_work_admitted_by_age() -> None:
    # Admitted at once (queued at 399): a fair-share victim, as before.
    fresh = run_cycle(fair_share_world(399.0, {"ts": 990.0}), forecast=False)
    assert [(p.victim_id, p.reason) for p in fresh.preemptions] == [(1, "FairShare")]
    # Admitted after waiting 350 s, its bound: spared; A's job waits for quota.
    aged = run_cycle(fair_share_world(50.0, {"ts": 990.0}), forecast=False)
    assert aged.preemptions == ()
    assert [a.workload_id for a in aged.admissions] == []
    assert aged.explanations[3].kind == "quota"
    # A preemptor that aged before the victim queued still takes it (the aged go in the
    # order they queued).
    older = run_cycle(fair_share_world(50.0, {"ts": 10.0}), forecast=False)
    assert [(p.victim_id, p.reason) for p in older.preemptions] == [(1, "FairShare")]


def test_claims_within_oversubscribed_mins_are_served_whole_oldest_first() -> None:
    # Three mins of 5, 4 and 6 on 5 (a node lost): in proportion each got 1-2, less
    # than any head asked. Aged claims within their min go first, whole, oldest first.
    names = ["q0", "q1", "q2"]
    got = waterfill(
        5, [5, 4, 6], [5, 9, 9], [1, 1, 1], names, order=[3.0, 1.0, 2.0], within=[3, 0, 2]
    )
    assert got == [3, 0, 2]
    # Without claims: in proportion, as before.
    assert waterfill(5, [5, 4, 6], [5, 9, 9], [1, 1, 1], names) == [2, 1, 2]


def test_a_claim_that_cannot_be_met_here_lets_the_next_one_in() -> None:
    # 2 left after the bases; the older claim asks 6 of it, the younger 2: the older
    # cannot be met whatever the other gets, so the younger is served.
    assert waterfill(
        2, [0, 0], [6, 2], [1, 1], ["old", "young"], extras=[6, 2], order=[1.0, 2.0]
    ) == [0, 2]


def test_what_a_claim_that_cannot_be_met_leaves_goes_by_weight() -> None:
    # 3 left: the young claim takes its 2; the old one (6) cannot be met and takes
    # nothing -- held for it, the last unit would sit idle. It goes by weight, here to
    # a sibling without a claim ("a" wins the tie by name).
    names = ["old", "young", "a"]
    got = waterfill(
        3, [0, 0, 0], [6, 2, 4], [1, 1, 1], names, extras=[6, 2, 0], order=[1.0, 2.0, 9.0]
    )
    assert got == [0, 2, 1]


def test_a_claim_short_in_one_resource_goes_last_in_every_resource() -> None:
    # 8 cpu, 16 memory. a (min 2 cpu) and b (min 6 cpu) each have an aged head of 6 cpu
    # and 12 memory. b's min holds the cpu a's head needs; resource by resource, a's
    # older claim took 12 of the memory and b's head was short of it: neither started.
    def job(wid: int, q: str, ts: float) -> WorkloadSpec:
        return workload(wid, q, req={"cpu": 6000, "memory": 12}, ts=ts)

    snap = snapshot(
        quotas=[
            quota("root"),
            quota("a", "root", min={"cpu": 2000}),
            quota("b", "root", min={"cpu": 6000}),
        ],
        nodes=[node("n", {"cpu": 8000, "memory": 16})],
        workloads=[job(1, "a", 1.0), job(2, "b", 2.0)],
        queues=[QueueSpec("a", aging_bound_s=60.0), QueueSpec("b", aging_bound_s=60.0)],
        now=1000.0,
    )
    result = run_cycle(snap)
    assert [a.workload_id for a in result.admissions] == [2]
