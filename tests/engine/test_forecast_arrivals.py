"""Arrivals in the forecast's draws: work that does not exist yet, replayed from history."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from queueing.engine import run_cycle
from queueing.engine.calibration import ArrivalLoad
from queueing.engine.cycle import Cycle
from queueing.engine.forecast import _holding_events
from queueing.engine.forecast_arrivals import (
    MAX_ARRIVALS,
    REPLAY_S,
    arrival_id,
    draw_arrivals,
    history,
    inflow_lasts,
    spawn,
)
from queueing.engine.forecast_sim import Simulation
from queueing.engine.types import EngineConfig, QueueSpec, Snapshot, WorkloadSpec

from .builders import node, quota, running, snapshot, workload

NOW = 1000.0


def one(cpu: int) -> dict[str, int]:
    return {"cpu": cpu}


def past(
    n: int, span: float, *, cpu: int = 4, priority: int = 100, queue: str = "q"
) -> tuple[WorkloadSpec, ...]:
    """``n`` jobs of ``cpu`` that arrived evenly over the last ``span`` seconds, each
    declaring (and, at the queue's ratio 1.0, running) 10 s."""
    return tuple(
        workload(
            100 + i,
            queue,
            req=one(cpu),
            priority=priority,
            ts=NOW - span + i * span / n,
            expected_runtime_s=10.0,
        )
        for i in range(n)
    )


def strict_world(recent: tuple[WorkloadSpec, ...] = (), **kw: Any) -> Snapshot:
    """A 4-cpu node held until t+10 by job 1; job 2 (4 cpu, priority 0, queued now: not
    aged) waits in a strict-order queue. Runtimes are exactly their declared 10 s."""
    kw.setdefault("runtime_ratio", {"q": (1.0, 1.0)})
    kw.setdefault("config", EngineConfig(fair_share_mode="instant"))
    return snapshot(
        quotas=[quota("root"), quota("q", "root")],
        nodes=[node("n", one(4))],
        workloads=[
            running(1, "q", "n", req=one(4), started_at=NOW, expected_runtime_s=10.0),
            workload(2, "q", req=one(4), ts=NOW, expected_runtime_s=10.0),
        ],
        queues=[QueueSpec("q", policy="Block")],
        now=NOW,
        recent_arrivals=recent,
        arrival_span_s=100.0 if recent else 0.0,
        **kw,
    )


def test_higher_priority_arrivals_go_ahead_of_a_waiting_workload() -> None:
    # Without arrivals job 2 starts when job 1 ends, at t+10.
    alone = run_cycle(strict_world())
    assert alone.etas[2].p50 == NOW + 10
    # A 4-cpu priority-100 job arrived every 5 s over the last 100 s: twice what the node
    # serves. Replayed in the draws, each one goes ahead of job 2 (priority 0) in its
    # queue, until job 2 reaches its queue's aging bound (300 s) and goes first.
    busy = run_cycle(strict_world(past(20, 100.0)))
    assert busy.stats["eta_draws"] > 0
    assert busy.etas[2].p50 == NOW + 300
    # That start is within the streams (they run REPLAY_S, more than 300 s): it counts
    # what arrives before it.
    assert REPLAY_S > 300
    assert busy.stats["eta_with_arrivals"] == 1
    # The draws are the same at every cycle: the same world, the same p50.
    assert run_cycle(strict_world(past(20, 100.0))).etas[2].p50 == NOW + 300
    # Without aging it waits for the streams' end and the backlog they leave (an
    # arrival of 10 s every 5 s): after t+REPLAY_S, where the streams no longer count
    # what arrives, so eta stretches that wait by the arrivals' load, as without draws.
    # (Its draws run to the streams' end and past it, each arrival parked behind it
    # and looked at again as the head moves: more than the default budget of a cycle's
    # forecast; out of it, the draws would give way to the single simulation.)
    no_aging = dataclasses.replace(
        strict_world(
            past(20, 100.0), config=EngineConfig(fair_share_mode="instant", eta_budget_s=10.0)
        ),
        queues=(QueueSpec("q", policy="Block", aging_bound_s=None),),
    )
    late = run_cycle(no_aging)
    p50 = late.etas[2].p50
    assert p50 is not None
    assert p50 > NOW + REPLAY_S
    assert late.stats["eta_with_arrivals"] == 0


def test_lower_priority_arrivals_queue_behind_it() -> None:
    got = run_cycle(strict_world(past(20, 100.0, priority=-100)))
    assert got.stats["eta_with_arrivals"] == 1
    assert got.etas[2].p50 == NOW + 10


def test_work_that_can_never_fit_is_not_replayed() -> None:
    # 8-cpu jobs on a 4-cpu cluster are set aside by the cycle: replayed ahead of job 2
    # in its strict-order queue, they would block it for ever.
    snap = strict_world(past(20, 100.0, cpu=8))
    assert history(Cycle(snap)) == {}
    got = run_cycle(snap)
    assert got.etas[2].p50 == NOW + 10


def test_later_arrivals_take_the_hole_a_gang_needs() -> None:
    # A Priority queue (no blocking): job 2 needs the whole 4-cpu node; 2 cpu are free
    # now and 2 are held until t+10. Small jobs of its own priority keep arriving: each
    # fits the free half at once (backfill) and holds it, so the node is rarely whole.
    def world(recent: tuple[WorkloadSpec, ...]) -> Snapshot:
        return dataclasses.replace(
            strict_world(recent),
            workloads=(
                running(1, "q", "n", req=one(2), started_at=NOW, expected_runtime_s=10.0),
                workload(2, "q", req=one(4), ts=NOW, expected_runtime_s=10.0),
            ),
            queues=(QueueSpec("q", policy="Priority"),),
        )

    assert run_cycle(world(())).etas[2].p50 == NOW + 10
    later = run_cycle(world(past(20, 100.0, cpu=2, priority=0)))
    p50 = later.etas[2].p50
    assert p50 is not None
    assert p50 > NOW + 10


def test_the_streams_follow_the_history_rate_and_stay_bounded() -> None:
    cy = Cycle(strict_world(past(20, 100.0)))
    past_q = history(cy)
    assert len(past_q["q"]) == 20

    def same(w: WorkloadSpec, u: float) -> float:
        return 10.0

    counts = []
    for j in range(40):
        drawn, until = draw_arrivals(cy, past_q, j, same)
        assert until == NOW + REPLAY_S
        times = [t for t, _, _ in drawn]
        assert times == sorted(times)
        assert all(NOW < t <= NOW + REPLAY_S for t in times)
        assert all(tpl in past_q["q"] for _, tpl, _ in drawn)
        copies = [spawn(k, t, tpl) for k, (t, tpl, _) in enumerate(drawn)]
        assert [w.id for w in copies] == [arrival_id(k) for k in range(len(drawn))]
        assert all(w.id < 0 and w.phase == "Pending" for w in copies)
        assert [w.queue_order_at for w in copies] == times
        assert all(w.request == tpl.request for w, (_, tpl, _) in zip(copies, drawn, strict=True))
        counts.append(len(drawn))
    # 20 arrivals in 100 s: REPLAY_S / 5 in each draw (120 in ten minutes), on average
    # over 40 draws within 10 % (the mean's standard deviation is under 2 %).
    assert abs(sum(counts) / len(counts) - REPLAY_S / 5) <= 0.1 * REPLAY_S / 5
    assert draw_arrivals(cy, past_q, 3, same) == draw_arrivals(cy, past_q, 3, same)
    # A draw whose stream passes MAX_ARRIVALS is cut there, and says until when it is
    # whole.
    flood = Cycle(strict_world(past(4000, 100.0)))
    cut, until = draw_arrivals(flood, {"q": list(flood.snapshot.recent_arrivals)}, 0, same)
    assert len(cut) == MAX_ARRIVALS
    assert cut[-1][0] <= until < NOW + REPLAY_S


def test_the_recorder_hands_over_what_arrived_after_its_first_look() -> None:
    load = ArrivalLoad(window_s=30.0, history_s=60.0)
    first = strict_world()
    load.update(first, {})  # what waits at the first look is a backlog
    assert load.history(NOW) == ((), 0.0)
    new = workload(7, "q", req=one(1), ts=NOW + 5, expected_runtime_s=10.0)
    load.update(dataclasses.replace(first, now=NOW + 5, workloads=(*first.workloads, new)), {})
    assert load.history(NOW + 5) == ((new,), 5.0)
    # Out of the window 60 s later.
    later = dataclasses.replace(first, now=NOW + 70, workloads=(new,))
    load.update(later, {})
    assert load.history(NOW + 70) == ((), 60.0)


def test_a_flood_is_left_to_the_stretch() -> None:
    # 4,000 arrivals in 100 s: MAX_ARRIVALS a draw would cover the first 13 s of it, a
    # burst that ends at once. Not replayed: the draws are those of the runtimes alone,
    # and here no runtime varies, so there are none (the busy-period stretch of eta
    # takes the flood, as without a history).
    snap = strict_world(past(4000, 100.0))
    assert history(Cycle(snap)) == {}
    got = run_cycle(snap)
    assert got.stats["eta_draws"] == 0
    assert got.stats["eta_with_arrivals"] == 0
    # A history that brings fewer than MAX_ARRIVALS over REPLAY_S is replayed.
    n = int(MAX_ARRIVALS * 100.0 / REPLAY_S)
    assert len(history(Cycle(strict_world(past(n, 100.0))))["q"]) == n


def test_an_inflow_lasts_as_long_again_as_it_has_been_seen_at_the_median() -> None:
    assert inflow_lasts(100.0, 0.5) == pytest.approx(100.0)
    # Gott: what has lasted t lasts more than x with probability t / (t + x).
    assert inflow_lasts(100.0, 0.9) == pytest.approx(900.0)
    assert inflow_lasts(100.0, 0.1) == pytest.approx(100.0 / 9)
    assert inflow_lasts(math.inf, 0.1) == math.inf
    assert inflow_lasts(100.0, 1.0) == math.inf
    assert inflow_lasts(0.0, 0.5) == 0.0


def test_a_young_systems_inflow_is_not_replayed_as_ten_minutes_of_it() -> None:
    # The same 20 higher-priority arrivals in the last 100 s, but the system is 100 s
    # old: all it has seen is that inflow. Replayed for ten minutes, it holds job 2
    # (priority 0, strict order) to its aging bound (t+300); each draw's inflow lasts its
    # own quantile of Gott's law (as long again at the median), and job 2 starts
    # earlier, after the first arrivals.
    old = run_cycle(strict_world(past(20, 100.0)))
    assert old.etas[2].p50 == NOW + 300
    young = run_cycle(strict_world(past(20, 100.0), arrival_age_s=100.0))
    p50 = young.etas[2].p50
    assert p50 is not None
    assert NOW + 10 < p50 < NOW + 300
    assert young.stats["eta_with_arrivals"] == 1
    # Each draw's streams end at its own length: the median draw's after 100 s.
    cy = Cycle(strict_world(past(20, 100.0), arrival_age_s=100.0))
    past_q = history(cy)

    def same(w: WorkloadSpec, u: float) -> float:
        return 10.0

    drawn, until = draw_arrivals(cy, past_q, 0, same, lasts=0.5)
    assert until == NOW + REPLAY_S  # all that arrives in this draw
    assert drawn
    assert all(NOW < t <= NOW + 100.0 for t, _, _ in drawn)
    longer, _ = draw_arrivals(cy, past_q, 0, same, lasts=0.9)
    assert len(longer) > len(drawn)


def test_an_arrival_moves_the_split_as_the_cycle_would() -> None:
    # root of 8 shared by a and b (no mins). b runs 4 until t+50 and 4 until t+1000,
    # and its w3 (4) waits; a has nothing: b's runtime quota is the whole 8. At t+20 a
    # 4-cpu job x arrives in a (which preempts nothing): the cycle splits again, 4 and
    # 4, so when b's first job ends at t+50 x starts, not w3, which waits for x's end
    # (t+150). The simulation kept the split of its instant until work ended (the
    # arrival's demand counted only at the next recomputation): w3 at t+50.
    snap = snapshot(
        quotas=[quota("root", max=one(8)), quota("a", "root"), quota("b", "root")],
        nodes=[node("n", one(8))],
        workloads=[
            running(1, "b", "n", req=one(4), started_at=NOW, expected_runtime_s=50.0),
            running(4, "b", "n", req=one(4), started_at=NOW, expected_runtime_s=1000.0),
            workload(3, "b", req=one(4), ts=NOW, expected_runtime_s=10.0),
        ],
        queues=[
            QueueSpec("a", reclaim="Never", preempt_within_quota="Never"),
            QueueSpec("b"),
        ],
        now=NOW,
        config=EngineConfig(fair_share_mode="instant"),
    )
    cy = Cycle(snap)
    cy.run()
    x = workload(50, "a", req=one(4), ts=NOW + 20, expected_runtime_s=100.0)
    events, _ = _holding_events(cy)
    sim = Simulation(cy, 0, events, deadline=math.inf, arrivals=[(NOW + 20, x, 100.0)])
    starts = sim.run()
    assert starts.get(arrival_id(0)) == NOW + 50
    assert starts.get(3) == NOW + 150
    # What the cycle does at t+50, x waiting since t+20 and b's first job gone.
    then = dataclasses.replace(
        snap,
        now=NOW + 50,
        workloads=(
            snap.workloads[1],
            snap.workloads[2],
            dataclasses.replace(x, id=5),
        ),
    )
    assert [a.workload_id for a in run_cycle(then, forecast=False).admissions] == [5]


def test_an_arrival_beyond_the_look_ahead_still_goes_ahead_of_those_behind_it() -> None:
    # One 1-cpu node, held by job 1 until t+10; jobs 2-5 (priority 10) and 6-7
    # (priority 0) wait, 10 s each: one after another, 6 at t+60, 7 at t+70. At t+5 a
    # priority-5 job x arrives: it lands behind 5 and ahead of 6, beyond the
    # simulation's look-ahead of four candidates (2-5). It waits there and comes into
    # the window as the window reaches its place: x at t+50, 6 at t+60, 7 at t+70. Left
    # out, as it was, 6 and 7 started 10 s early (Kueue's baseline lost hundreds of jobs
    # that way, and its smallest started 17 s early with every arrival known).
    jobs = [
        workload(
            i,
            "q",
            req=one(1),
            priority=10 if i <= 5 else 0,
            ts=NOW - 10 + i,
            expected_runtime_s=10.0,
        )
        for i in range(2, 8)
    ]
    snap = snapshot(
        quotas=[quota("root"), quota("q", "root")],
        nodes=[node("n", one(1))],
        workloads=[
            running(1, "q", "n", req=one(1), started_at=NOW, expected_runtime_s=10.0),
            *jobs,
        ],
        queues=[QueueSpec("q")],
        now=NOW,
        runtime_ratio={"q": (1.0, 1.0)},
        config=EngineConfig(fair_share_mode="instant"),
    )
    assert snap.config.eta_max_depth == 4
    cy = Cycle(snap)
    cy.run()
    x = workload(50, "q", req=one(1), priority=5, ts=NOW + 5, expected_runtime_s=10.0)
    events, _ = _holding_events(cy)
    alone = Simulation(cy, 0, events, deadline=math.inf).run()
    assert [alone.get(i) for i in (5, 6, 7)] == [NOW + 40, NOW + 50, NOW + 60]
    events, _ = _holding_events(cy)
    sim = Simulation(cy, 0, events, deadline=math.inf, arrivals=[(NOW + 5, x, 10.0)])
    starts = sim.run()
    assert starts.get(arrival_id(0)) == NOW + 50
    assert [starts.get(i) for i in (5, 6, 7)] == [NOW + 40, NOW + 60, NOW + 70]
    # The cycle at t+50, x waiting since t+5 beside 6 and 7, admits x.
    then = dataclasses.replace(
        snap, now=NOW + 50, workloads=(*snap.workloads[5:], dataclasses.replace(x, id=8))
    )
    assert [a.workload_id for a in run_cycle(then, forecast=False).admissions] == [8]


def test_arrivals_between_the_same_two_waiting_workloads_keep_the_queues_order() -> None:
    # One 1-cpu node, held by job 1 until t+10; job 2 (priority 0) waits. x (priority
    # 5) arrives at t+1, y (priority 9) at t+2: both land ahead of job 2. The cycle at
    # t+10 starts y first (priority), then x at t+20, then job 2 at t+30. In the order
    # they came, x went first.
    snap = snapshot(
        quotas=[quota("root"), quota("q", "root")],
        nodes=[node("n", one(1))],
        workloads=[
            running(1, "q", "n", req=one(1), started_at=NOW, expected_runtime_s=10.0),
            workload(2, "q", req=one(1), priority=0, ts=NOW - 1, expected_runtime_s=10.0),
        ],
        queues=[QueueSpec("q")],
        now=NOW,
        runtime_ratio={"q": (1.0, 1.0)},
        config=EngineConfig(fair_share_mode="instant"),
    )
    cy = Cycle(snap)
    cy.run()
    x = workload(50, "q", req=one(1), priority=5, ts=NOW + 1, expected_runtime_s=10.0)
    y = workload(51, "q", req=one(1), priority=9, ts=NOW + 2, expected_runtime_s=10.0)
    events, _ = _holding_events(cy)
    sim = Simulation(
        cy, 0, events, deadline=math.inf, arrivals=[(NOW + 1, x, 10.0), (NOW + 2, y, 10.0)]
    )
    starts = sim.run()
    assert [starts.get(arrival_id(1)), starts.get(arrival_id(0)), starts.get(2)] == [
        NOW + 10,
        NOW + 20,
        NOW + 30,
    ]
    then = dataclasses.replace(
        snap,
        now=NOW + 10,
        workloads=(
            snap.workloads[1],
            dataclasses.replace(x, id=8),
            dataclasses.replace(y, id=9),
        ),
    )
    assert [a.workload_id for a in run_cycle(then, forecast=False).admissions] == [9]
