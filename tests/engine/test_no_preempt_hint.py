"""A quota explanation that lists victims whose preemption would free the shortfall says
why they were not preempted this cycle (issue 11: "preempting w1 would free it" read as
a promise in cycles where nothing was preempted, and nothing said why)."""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.types import (
    NO_PREEMPT,
    CycleResult,
    EngineConfig,
    QueueSpec,
    Snapshot,
    WorkloadSpec,
)

from .builders import node, quota, running, snapshot, workload

LONG = 3600.0  # declared runtime of running work: far from ending (no grace applies)


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu * 1000}


def hint_of(result: CycleResult, wid: int) -> tuple[tuple[str, ...], str, str]:
    e = result.explanations[wid]
    assert e.kind == "quota", e.sentence()
    return e.victim_names, e.no_preempt, e.sentence()


def small_world(pending: list[WorkloadSpec], *, config: EngineConfig | None = None) -> Snapshot:
    # Quota q0 (max 4 cpu) full with a 3-cpu and a 1-cpu low-priority job.
    return snapshot(
        quotas=[quota("root"), quota("q0", "root", max=one(4))],
        nodes=[node("n", one(8))],
        queues=[QueueSpec("q0", preempt_within_quota="LowerPriority")],
        workloads=[
            running(1, "q0", "n", req=one(3), priority=1, expected_runtime_s=LONG),
            running(4, "q0", "n", req=one(1), priority=1, expected_runtime_s=LONG),
            *pending,
        ],
        config=config or EngineConfig(fair_share_mode="instant"),
    )


def test_preemption_off_is_said() -> None:
    big = workload(2, "q0", req=one(3), priority=9, ts=1.0)
    result = run_cycle(small_world([big], config=EngineConfig(preemption=False)))
    assert result.preemptions == ()
    names, why, text = hint_of(result, 2)
    assert names == ("w4", "w1")
    assert why == "off"
    assert f"preempting w4, w1 would free it, but {NO_PREEMPT['off']}." in text


def test_the_queues_one_search_of_the_cycle_going_to_another_workload_is_said() -> None:
    big = workload(2, "q0", req=one(3), priority=9, ts=1.0)
    small = workload(3, "q0", req=one(1), priority=9, ts=2.0)
    result = run_cycle(small_world([big, small]))
    assert [(p.victim_id, p.preemptor_id) for p in result.preemptions] == [(1, 2)]
    names, why, text = hint_of(result, 3)
    assert names == ("w4",)
    assert why == "turn"
    assert f"preempting w4 would free it, but {NO_PREEMPT['turn']}." in text


def test_victims_admitted_by_age_ahead_of_it_are_said_to_be_spared() -> None:
    # w1 queued at 0 and was admitted at 200 with aging after 100 s: admitted by age.
    # w2 (fresh, higher priority) may not evict it; w4 alone would not free enough.
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root", max=one(4))],
        nodes=[node("n", one(8))],
        queues=[QueueSpec("q0", preempt_within_quota="LowerPriority", aging_bound_s=100.0)],
        workloads=[
            running(
                1,
                "q0",
                "n",
                req=one(3),
                priority=1,
                expected_runtime_s=LONG,
                admitted_at=200.0,
                ts=0.0,
            ),
            running(4, "q0", "n", req=one(1), priority=1, expected_runtime_s=LONG, ts=5.0),
            workload(2, "q0", req=one(3), priority=9, ts=990.0),
        ],
    )
    result = run_cycle(snap)
    assert result.preemptions == ()
    names, why, text = hint_of(result, 2)
    assert "w1" in names
    assert why == "aged"
    assert f"but {NO_PREEMPT['aged']}." in text


def test_a_search_that_found_no_set_that_fits_is_said() -> None:
    # q0 may hold 3 cpu; it holds 2 (w1). A 3-cpu pod: evicting w1 frees the quota, but
    # no node has 3 cpu free even then (n1 keeps q1's 1 cpu, n2 has 2 cpu).
    snap = snapshot(
        quotas=[
            quota("root"),
            quota("q0", "root", max=one(3)),
            quota("q1", "root", min=one(8)),
        ],
        nodes=[node("n1", one(3)), node("n2", one(2))],
        queues=[
            QueueSpec("q0", preempt_within_quota="LowerPriority"),
            QueueSpec("q1"),
        ],
        workloads=[
            running(1, "q0", "n1", req=one(2), priority=1, expected_runtime_s=LONG),
            running(7, "q1", "n1", req=one(1), priority=10, expected_runtime_s=LONG),
            workload(2, "q0", req=one(3), priority=9, ts=1.0),
        ],
    )
    result = run_cycle(snap)
    assert result.preemptions == ()
    names, why, text = hint_of(result, 2)
    assert names == ("w1",)
    assert why == "failed"
    assert f"but {NO_PREEMPT['failed']}." in text
