"""The virtual-time simulator on scenarios small enough to follow by hand."""

from __future__ import annotations

import pytest

from queueing.engine.resources import Resources
from queueing.engine.scenarios import kueue_baseline, kueue_baseline_classes
from queueing.engine.simulator import Arrival, Scenario, simulate
from queueing.engine.types import EngineConfig, NodeSpec, PodSet, QueueSpec, QuotaNode, WorkloadSpec


def job(wid: int, quota: str, cpu: int, priority: int = 0, at: float = 0.0) -> WorkloadSpec:
    return WorkloadSpec(
        id=wid,
        name=f"j{wid}",
        quota=quota,
        queue=quota,
        priority=priority,
        queue_order_at=at,
        pod_sets=(PodSet("main", 1, Resources({"cpu": cpu})),),
    )


def small_world(arrivals: list[Arrival], nominal: int = 2) -> Scenario:
    return Scenario(
        name="tiny",
        quotas=(
            QuotaNode("root", max={"cpu": nominal}),
            QuotaNode("q", "root", min=Resources(cpu=nominal)),
        ),
        queues=(QueueSpec("q"),),
        nodes=(NodeSpec("n", Resources(cpu=nominal)),),
        arrivals=tuple(arrivals),
        measured={"q": nominal},
    )


def test_two_jobs_admitted_at_the_first_cycle_after_arrival() -> None:
    # Both arrive at 0.5; the cycle at 1.0 admits them; they run 1.5 s -> done at 2.5.
    # Usage: 2 units for 1.5 s over a 2-unit nominal for 2.5 s = 60 %.
    scenario = small_world(
        [Arrival(0.5, job(1, "q", 1), "x", 1.5), Arrival(0.5, job(2, "q", 1), "x", 1.5)]
    )
    result = simulate(
        scenario, cycle_interval_s=1.0, config=EngineConfig(fair_share_mode="instant")
    )
    assert result.makespan_s == pytest.approx(2.5)
    assert result.avg_usage_pct == pytest.approx(60.0)
    assert result.min_queue_usage_pct == pytest.approx(60.0)
    assert result.tta_mean_s == {"x": pytest.approx(0.5)}
    assert result.cycles == 1


def test_a_queue_waits_for_capacity() -> None:
    # One unit of capacity: jobs of 1 s arriving at 0.1 and 0.2 run [1, 2] and [2, 3].
    scenario = small_world(
        [Arrival(0.1, job(1, "q", 1), "x", 1.0), Arrival(0.2, job(2, "q", 1), "x", 1.0)],
        nominal=1,
    )
    result = simulate(
        scenario, cycle_interval_s=1.0, config=EngineConfig(fair_share_mode="instant")
    )
    assert result.makespan_s == pytest.approx(3.0)
    assert result.tta_mean_s["x"] == pytest.approx(((1.0 - 0.1) + (2.0 - 0.2)) / 2)


def test_eviction_is_confirmed_next_cycle_and_the_victim_runs_again() -> None:
    # Low priority runs from t=1 (10 s). High priority arrives at 1.5: at t=2 it evicts
    # the low one (grace off), at t=3 the eviction is confirmed and the high one is
    # admitted; it runs 1 s, then the low one is admitted again at t=4 and runs 10 s.
    scenario = small_world(
        [
            Arrival(0.5, job(1, "q", 2, priority=1, at=0.5), "low", 10.0),
            Arrival(1.5, job(2, "q", 2, priority=9, at=1.5), "high", 1.0),
        ]
    )
    cfg = EngineConfig(fair_share_mode="instant", preempt_grace_s=0.0)
    # Epoch 0: the jobs' queue-order times are virtual seconds (with the default epoch
    # the low one would look aged by 1.7e9 s when admitted, and be spared by age).
    result = simulate(scenario, cycle_interval_s=1.0, config=cfg, epoch=0.0)
    assert result.evictions == 1
    assert result.tta_mean_s["high"] == pytest.approx(3.0 - 1.5)
    assert result.tta_first_mean_s["low"] == pytest.approx(0.5)
    assert result.tta_mean_s["low"] == pytest.approx(4.0 - 0.5)  # the last admission counts
    assert result.makespan_s == pytest.approx(14.0)


def test_kueue_baseline_scenario_is_modelled_faithfully() -> None:
    scenario = kueue_baseline()
    leaves = [q for q in scenario.quotas if q.parent is not None]
    roots = [q for q in scenario.quotas if q.parent is None]
    assert len(roots) == 5
    assert len(leaves) == 30
    assert all(q.min == Resources(cpu=20_000) and q.max == {"cpu": 120_000} for q in leaves)
    assert all(q.max == {"cpu": 120_000} for q in roots)
    assert {(q.preempt_within_quota, q.reclaim, q.policy) for q in scenario.queues} == {
        ("LowerPriority", "Any", "Priority")
    }
    assert len(scenario.arrivals) == 15_000
    by_class: dict[str, list[Arrival]] = {}
    for a in scenario.arrivals:
        by_class.setdefault(a.klass, []).append(a)
    for k in kueue_baseline_classes():
        got = by_class[k.name]
        assert len(got) == 30 * k.count
        assert {a.runtime_s for a in got} == {k.runtime_s}
        assert {a.workload.priority for a in got} == {k.priority}
        assert {a.workload.request["cpu"] for a in got} == {k.request * 1000}
        assert max(a.at for a in got) == pytest.approx(k.count * k.interval_s)
