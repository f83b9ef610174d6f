"""The simulator's event-driven mode: a cycle woken by each arrival and completion."""

from __future__ import annotations

import pytest

from queueing.engine.resources import Resources
from queueing.engine.scenarios import kueue_baseline
from queueing.engine.simulator import Arrival, Scenario, next_cycle_at, simulate
from queueing.engine.types import EngineConfig, NodeSpec, PodSet, QueueSpec, QuotaNode, WorkloadSpec

INSTANT = EngineConfig(fair_share_mode="instant")


def job(wid: int, cpu: int, at: float, priority: int = 0) -> WorkloadSpec:
    return WorkloadSpec(
        id=wid,
        name=f"j{wid}",
        quota="q",
        queue="q",
        priority=priority,
        queue_order_at=at,
        pod_sets=(PodSet("main", 1, Resources({"cpu": cpu})),),
    )


def world(arrivals: list[Arrival], nominal: int) -> Scenario:
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


def test_an_event_wakes_a_cycle_after_the_debounce_and_beat_is_the_safety_net() -> None:
    kw = {"interval_s": 1.0, "debounce_s": 0.05}
    assert next_cycle_at("on-event", 2.0, next_event=2.3, ticking=True, **kw) == pytest.approx(2.35)
    # No event within beat's interval while work waits: beat's tick comes first.
    assert next_cycle_at("on-event", 2.0, next_event=9.0, ticking=True, **kw) == 3.0
    assert next_cycle_at("on-event", 2.0, next_event=9.0, ticking=False, **kw) == 9.05
    assert next_cycle_at("on-event", 2.0, next_event=None, ticking=False, **kw) is None
    # Interval mode keeps beat's grid and skips the idle stretch before an arrival.
    assert next_cycle_at("interval", 2.0, next_event=2.3, ticking=True, **kw) == 3.0
    assert next_cycle_at("interval", 2.0, next_event=7.4, ticking=False, **kw) == 8.0
    with pytest.raises(ValueError, match="unknown cycle mode"):
        next_cycle_at("hourly", 2.0, next_event=None, ticking=False, **kw)


def test_arrivals_and_completions_each_wake_a_cycle() -> None:
    # One unit: job 1 arrives at 0.1 and is admitted at 0.15; job 2 arrives at 0.2,
    # the cycle at 0.25 finds no room; job 1 ends at 1.15 and the cycle at 1.2
    # admits job 2, which ends at 2.2.
    scenario = world(
        [Arrival(0.1, job(1, 1, 0.1), "x", 1.0), Arrival(0.2, job(2, 1, 0.2), "x", 1.0)], 1
    )
    result = simulate(scenario, cycle="on-event", debounce_s=0.05, config=INSTANT)
    assert result.cycles == 3
    assert result.makespan_s == pytest.approx(2.2)
    assert result.tta_mean_s["x"] == pytest.approx((0.05 + 1.0) / 2)
    # The same arrivals on beat's 1 s timer wait for the ticks at 1, 2 and 3.
    timed = simulate(scenario, cycle="interval", config=INSTANT)
    assert timed.makespan_s == pytest.approx(3.0)


def test_events_inside_the_debounce_window_share_one_cycle() -> None:
    arrivals = [Arrival(0.5 + i * 0.01, job(i + 1, 1, 0.5 + i * 0.01), "x", 1.0) for i in range(4)]
    result = simulate(world(arrivals, 4), cycle="on-event", debounce_s=0.05, config=INSTANT)
    # 0.50 wakes the cycle at 0.55, which serves 0.50 .. 0.53.
    assert result.cycles == 1
    assert result.makespan_s == pytest.approx(1.55)


def test_bad_mode_or_settings_are_refused() -> None:
    scenario = world([Arrival(0.1, job(1, 1, 0.1), "x", 1.0)], 1)
    with pytest.raises(ValueError, match="unknown cycle mode"):
        simulate(scenario, cycle="hourly")
    with pytest.raises(ValueError, match="debounce_s"):
        simulate(scenario, cycle="on-event", debounce_s=-0.1)


def test_kueue_baseline_on_event_keeps_the_quota_busy_and_large_jobs_are_not_starved() -> None:
    # One ClusterQueue of Kueue's baseline: the decisions are per cohort, so one queue
    # behaves as thirty do. Its work needs 66 s at full nominal quota.
    result = simulate(kueue_baseline(cohorts=1, queues_per_cohort=1), cycle="on-event")
    assert 66.0 <= result.makespan_s <= 70.0
    assert result.avg_usage_pct >= 94.0
    # Without the reservation for a head awaiting finishing work, small jobs refilled
    # every freed unit and the large ones waited about 30 s.
    assert result.tta_mean_s["large"] < 0.5
    assert result.evictions == 0


def test_the_10x_scenario_is_the_baseline_ten_times_over() -> None:
    from queueing.engine.scenarios import SCENARIOS

    scenario = SCENARIOS["kueue-baseline-10x"]()
    assert scenario.name == "kueue-baseline-10x"
    assert len(scenario.arrivals) == 150_000
    assert len(scenario.queues) == 300
    assert len([q for q in scenario.quotas if q.parent is None]) == 50
    assert sum(scenario.measured.values()) == 300 * 20_000
    assert scenario.nodes[0].allocatable["cpu"] == 300 * 20_000
