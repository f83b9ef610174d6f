"""Aged claims that collide are served whole, the oldest first.

Aging raises a waiting head's claim on its quota toward its request (:mod:`.aging`),
served in the runtime split after the mins and before the weights. When the claims of
siblings together passed what their parent had left, they were cut in proportion: two
aged heads each got less than they needed, neither could start, and the cluster sat
idle for good -- a 64-cpu gang and a 16-cpu job on 64 idle cpu, each "short" of its
runtime quota (found writing the backfill test: the simulation never ended). Now the
oldest claim is served whole and the next claims only what is left.
"""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.quota import waterfill
from queueing.engine.types import QueueSpec, Snapshot

from .builders import node, quota, snapshot, workload


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
