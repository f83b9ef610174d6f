"""Preemption keeps the order the cycle admits in: queue priority goes first.

The tournament ranks candidates by queue priority before fair share and workload
priority, so work of a queue of higher queue priority is admitted ahead of waiting
work of higher workload priority in another queue of the same quota. In-quota and
fair-share preemption then took it back the next cycle for that work (the demo's
waves world: a 128-cpu gang of nlp-shared, queue priority 5, admitted and evicted two
seconds later for one of nlp-research, queue priority 0). Neither takes such work
now; a reclaim of a guaranteed min still does.
"""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.types import NO_PREEMPT, QueueSpec, Snapshot, WorkloadSpec

from .builders import node, quota, running, snapshot, workload

LONG = 3600.0  # declared runtime of running work: far from ending (no grace applies)


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu * 1000}


def two_queues(workloads: list[WorkloadSpec], *, shared: int = 5, now: float = 1000.0) -> Snapshot:
    # Quota q of 4 cpu, fed by two queues: "shared" (queue priority ``shared``) and
    # "research" (queue priority 0); and quota q2 with a queue of its own.
    return snapshot(
        quotas=[quota("root"), quota("q", "root", max=one(4)), quota("q2", "root", max=one(4))],
        nodes=[node("n", one(8))],
        queues=[
            QueueSpec("shared", priority=shared, preempt_within_quota="LowerPriority"),
            QueueSpec("research", preempt_within_quota="LowerPriority"),
            QueueSpec("q2"),
        ],
        workloads=workloads,
        now=now,
    )


def test_work_of_a_higher_priority_queue_admitted_first_is_not_evicted_the_next_cycle() -> None:
    # Both fresh (aging, after 300 s, plays no part).
    low = workload(1, "q", "shared", req=one(4), priority=1, ts=990.0, expected_runtime_s=600.0)
    high = workload(2, "q", "research", req=one(4), priority=9, ts=985.0)
    first = run_cycle(two_queues([low, high]))
    assert [a.workload_id for a in first.admissions] == [1]  # queue priority first

    admitted = running(
        1,
        "q",
        "n",
        queue="shared",
        req=one(4),
        priority=1,
        ts=990.0,
        admitted_at=1000.0,
        started_at=1000.0,
        expected_runtime_s=600.0,
    )
    # Work of q2 that ends at 1050 wakes the forecast's cycles before w1 ends.
    other = running(
        5,
        "q2",
        "n",
        req=one(2),
        ts=990.0,
        admitted_at=1000.0,
        started_at=1000.0,
        expected_runtime_s=50.0,
    )
    second = run_cycle(two_queues([admitted, high, other], now=1001.0), forecast=True)
    assert second.preemptions == ()
    e = second.explanations[2]
    assert e.kind == "quota", e.sentence()
    assert e.victim_names == ("w1",)
    assert e.no_preempt == "queue"
    assert f"preempting w1 would free it, but {NO_PREEMPT['queue']}." in e.sentence()
    # The forecast keeps it too: w2 starts when w1 ends (admitted at 1000 for 600 s),
    # not by evicting it in virtual time once w5 has ended (1286 before).
    eta = second.etas[2]
    assert eta.p50 is not None, eta
    assert eta.p50 >= 1600.0 - 1.0, eta


def test_work_of_a_lower_priority_queue_is_still_evicted_for_higher_priority_work() -> None:
    admitted = running(
        1, "q", "research", queue="research", req=one(4), priority=1, expected_runtime_s=LONG
    )
    high = workload(2, "q", "shared", req=one(4), priority=9, ts=985.0)
    result = run_cycle(two_queues([admitted, high]))
    assert [(p.victim_id, p.preemptor_id, p.reason) for p in result.preemptions] == [
        (1, 2, "InQueue")
    ]


def test_of_queues_of_equal_priority_the_higher_workload_priority_goes_first() -> None:
    low = workload(1, "q", "shared", req=one(4), priority=1, ts=980.0)
    high = workload(2, "q", "research", req=one(4), priority=9, ts=985.0)
    result = run_cycle(two_queues([low, high], shared=0))
    assert [a.workload_id for a in result.admissions] == [2]


def borrowing_world(b_priority: int) -> Snapshot:
    # A (min 0) holds 1 of root's 6 and wants 2 more; B (min 0) holds 5 over its
    # runtime 3 (weights 1:1): taking two of B's 1-cpu jobs leaves A and B at 3 of 3,
    # which fair share allows (test_cycle's world, B's queue of queue priority
    # ``b_priority``).
    b_jobs = [running(10 + i, "B", "n", req=one(1), admitted_at=float(i)) for i in range(5)]
    return snapshot(
        quotas=[
            quota("root"),
            quota("A", "root", weight=one(1)),
            quota("B", "root", weight=one(1)),
        ],
        nodes=[node("n", one(6))],
        queues=[QueueSpec("A"), QueueSpec("B", priority=b_priority)],
        workloads=[running(1, "A", "n", req=one(1)), *b_jobs, workload(2, "A", req=one(2))],
    )


def test_fair_share_does_not_take_work_of_a_queue_of_higher_queue_priority() -> None:
    even = run_cycle(borrowing_world(0), forecast=False)
    assert [(p.victim_id, p.reason) for p in even.preemptions] == [
        (14, "FairShare"),
        (13, "FairShare"),
    ]
    ranked = run_cycle(borrowing_world(5), forecast=False)
    assert ranked.preemptions == ()
    assert ranked.admissions == ()
