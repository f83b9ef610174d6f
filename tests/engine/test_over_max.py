"""A quota holding more than its max: a max lowered under running work (issue 11).

Its min guarantees it room up to that max, not the work beyond it. Fair share and
reclaim judge such a quota by what it keeps within its max, in its own order (priority,
then the earliest admitted): the work beyond it may be taken, the work within it only
as far as leaves the min. Judged by all it held, the min protected the low-priority work
beyond the max, other quotas took the high-priority work instead, and that work came
back and evicted the low-priority work in its own quota -- leaving the quota below its
min, to reclaim what it had lost: a ping-pong (the property test, seeds 33425, 14407).
"""

from __future__ import annotations

import dataclasses

from queueing.engine import run_cycle
from queueing.engine.types import QueueSpec, Snapshot, WorkloadSpec
from queueing.engine.victim_lists import keeps_min, kept_within_max
from tests.engine.builders import node, quota, running, snapshot, workload
from tests.engine.test_invariants import repeated_cycles_never_ping_pong


def held(wid: int, cpu: int, priority: int, admitted_at: float) -> WorkloadSpec:
    return running(wid, "q0", "n0", req={"cpu": cpu}, priority=priority, admitted_at=admitted_at)


def test_what_a_quota_keeps_within_its_max_is_its_work_in_its_own_order() -> None:
    # Max 6: priority first (10 before 5 before 1), then the earliest admitted (w2
    # before w3); the first that goes beyond the max ends what is kept.
    ws = [held(1, 9, 1, 0.0), held(2, 2, 10, 5.0), held(3, 3, 10, 9.0), held(4, 1, 5, 1.0)]
    w1, w2, _, w4 = ws
    assert kept_within_max(ws, w1, "cpu", 6, set()) == (6, 6, False)  # 2 + 3 + 1; w1 beyond
    assert kept_within_max(ws, w2, "cpu", 6, set()) == (6, 4, True)  # 3 + 1, then w1 is beyond
    assert kept_within_max(ws, w4, "cpu", 6, set()) == (6, 5, True)  # 2 + 3, then w1
    # Evictions under way and workloads already chosen are not kept.
    assert kept_within_max(ws, w1, "cpu", 6, {2}) == (4, 4, False)
    # The min within the max: taking w1 (beyond) keeps 6 of a min of 6; taking w4 leaves
    # 5; with the min at 4, it may.
    assert keeps_min(ws, w1, "cpu", (6, 6), 6, 15)
    assert not keeps_min(ws, w4, "cpu", (6, 6), 14, 15)
    assert keeps_min(ws, w4, "cpu", (4, 6), 14, 15)
    # Below its min already (max 6, min 6: 2 + 3 kept, w4 lowered to 1 below): taking
    # what lies beyond lowers nothing; taking what is kept does.
    low = [held(1, 9, 1, 0.0), held(2, 2, 10, 5.0), held(3, 3, 10, 9.0)]
    assert keeps_min(low, low[0], "cpu", (6, 6), 5, 14)
    assert not keeps_min(low, low[1], "cpu", (6, 6), 12, 14)
    # Within its max, the min is judged on what it holds, as ever.
    assert keeps_min(ws[1:], w4, "cpu", (4, 8), 5, 6)
    assert not keeps_min(ws[1:], w4, "cpu", (6, 8), 5, 6)


def world(q0_min: int = 4) -> Snapshot:
    """q0 (min 4, max 6) holds 14 cpu on n0 (16): w1, 9 cpu at priority 1, admitted
    before the max was lowered; w2 and w3, 5 cpu at priority 10. q1's w9 (6 cpu) needs
    4 more cpu than n0 has free, and fair share lets it take them from q0."""
    return snapshot(
        quotas=[
            quota("root"),
            quota("q0", "root", min={"cpu": q0_min}, max={"cpu": 6}),
            quota("q1", "root"),
        ],
        nodes=[node("n0", {"cpu": 16})],
        queues=[
            QueueSpec("q0", policy="Priority", preempt_within_quota="LowerPriority"),
            QueueSpec("q1", policy="Priority", reclaim="Any"),
        ],
        workloads=[
            held(1, 9, 1, 0.0),
            held(2, 2, 10, 5.0),
            held(3, 3, 10, 9.0),
            workload(9, "q1", req={"cpu": 6}, priority=5),
        ],
    )


def test_fair_share_takes_the_work_a_quota_holds_beyond_its_max() -> None:
    # Before: w2 and w3 went (q0 at 1.50 of its runtime quota without them, above q1's
    # 1.00), and came back to evict w1 in q0: three evictions where one does. Without w1
    # q0 is at 0.83, below q1, and fair share judged so took none of it. Work beyond a
    # max is judged against the quota's share with it (2.33).
    result = run_cycle(world(), forecast=False)
    assert [(p.victim_id, p.preemptor_id) for p in result.preemptions] == [(1, 9)]
    assert result.preemptions[0].message == (
        "fair share: quota q1 with w9 would be at 1.00 of its runtime quota, quota q0 at "
        "2.33 with this workload, which it holds beyond its max"
    )


def test_a_quota_holding_more_than_its_max_is_not_ping_ponged() -> None:
    repeated_cycles_never_ping_pong(world())


def test_work_beyond_the_max_stays_where_its_quota_would_then_reclaim() -> None:
    """With a min of 6, q0 without w1 (5 cpu) would be below its min and reclaim room
    at once: w1 stays, and w2 and w3, within the max, are q0's min."""
    assert run_cycle(world(q0_min=6), forecast=False).preemptions == ()


def test_work_within_the_max_is_not_taken_below_the_min() -> None:
    """w1 ends: q0 holds 5 of its max of 6. Nothing it holds is beyond its max any
    more, and taking w2 or w3 would take it below its min of 4."""
    snap = world()
    snap = dataclasses.replace(snap, workloads=tuple(w for w in snap.workloads if w.id != 1))
    snap = dataclasses.replace(snap, nodes=(node("n0", {"cpu": 10}),))  # 5 free: w9 needs 1 more
    assert run_cycle(snap, forecast=False).preemptions == ()
