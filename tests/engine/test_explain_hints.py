"""The victims a quota explanation offers (issue 10: the explanations are computed per
quota and shared -- the victim order is sorted once per quota and only its first
``explain_ahead`` entries are kept; each waiting workload must still see exactly the
lower-priority ones of its own priority, in victim order)."""

from __future__ import annotations

from queueing.engine import run_cycle
from queueing.engine.resources import Resources
from queueing.engine.types import EXPLAIN_QUOTA, EngineConfig, Explanation, QueueSpec

from .builders import node, quota, running, snapshot, workload

LONG = 3600.0  # declared runtime of running work: far from ending (no grace applies)


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu * 1000}


def test_each_priority_sees_the_lower_priority_victims_in_victim_order() -> None:
    # q0 (max 8 cpu) is full with eight 1-cpu jobs of priorities 1, 1, 2, 2, 3, 3, 6, 6;
    # victim order: lower priority first, then the most recently admitted.
    prios = [1, 1, 2, 2, 3, 3, 6, 6]
    held = [
        running(
            10 + i,
            "q0",
            "n",
            req=one(1),
            priority=p,
            admitted_at=float(i),
            expected_runtime_s=LONG,
        )
        for i, p in enumerate(prios)
    ]
    snap = snapshot(
        quotas=[quota("root"), quota("q0", "root", max=one(8))],
        nodes=[node("n", one(16))],
        queues=[QueueSpec("q0", preempt_within_quota="LowerPriority", aging_bound_s=None)],
        workloads=[
            *held,
            workload(1, "q0", req=one(8), priority=7, ts=1.0),
            workload(2, "q0", req=one(5), priority=3, ts=2.0),
            workload(3, "q0", req=one(1), priority=1, ts=3.0),
        ],
        config=EngineConfig(fair_share_mode="instant", preemption=False, explain_ahead=5),
    )
    result = run_cycle(snap)
    assert result.admissions == ()
    ex = result.explanations
    # Priority 7: all eight are lower, the first five (explain_ahead) are offered and
    # free 5 of the 8 cpu it lacks.
    assert ex[1].victims == (11, 10, 13, 12, 15)
    assert ex[1].victim_names == ("w11", "w10", "w13", "w12", "w15")
    assert ex[1].victims_free == one(5)
    assert ex[1].no_preempt == ""
    assert "would free only 5 cpu, not enough" in ex[1].sentence()
    # Priority 3: only the four of priorities 1 and 2 are lower (not the priority-3
    # ones next in victim order), and they free 4 of the 5 cpu it lacks.
    assert ex[2].victims == (11, 10, 13, 12)
    assert ex[2].victims_free == one(4)
    assert ex[2].no_preempt == ""
    # Priority 1: none is lower (no hint, and no reason for one).
    assert ex[3].kind == "quota"
    assert ex[3].victims == ()
    assert ex[3].victim_names == ()


def test_the_idle_room_a_runtime_quota_leaves_to_others_names_only_what_is_short() -> None:
    # Short of cpu only; cpu, memory and GPUs idle under every max on the chain. The
    # idle memory and GPUs say nothing about why it waits (the demo once read "4 cpu,
    # 504Gi memory, 14 nvidia.com/gpu is idle but ...").
    gi = 1024**3

    def short_of(short: dict[str, int]) -> Explanation:
        return Explanation(
            1,
            EXPLAIN_QUOTA,
            quota="vision",
            limit="runtime",
            shortfall=Resources.from_raw(short),
            borrowable=Resources.from_raw({"cpu": 4000, "memory": 504 * gi, "nvidia.com/gpu": 14}),
        )

    text = short_of({"cpu": 4000}).sentence()
    assert "4 cpu is idle but its runtime quota leaves it to other quotas" in text
    assert "memory" not in text
    assert "gpu" not in text
    # Short of two resources, both idle: "are", "them".
    e2 = short_of({"cpu": 4000, "nvidia.com/gpu": 2})
    assert "4 cpu, 14 nvidia.com/gpu are idle but its runtime quota leaves them" in (e2.sentence())
    assert "memory" not in e2.sentence()
    # One idle enough, one not: the second is what it could borrow.
    e3 = short_of({"cpu": 4000, "nvidia.com/gpu": 20})
    assert "4 cpu is idle but" in e3.sentence()
    assert "it could borrow only 14 nvidia.com/gpu more" in e3.sentence()
