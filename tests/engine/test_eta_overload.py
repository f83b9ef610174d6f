"""The p90 of a workload held back by an overload of the work that goes first (eta.py)."""

from __future__ import annotations

import pytest

from queueing.engine import run_cycle
from queueing.engine.calibration import ARRIVALS, SQUARES
from queueing.engine.types import QueueSpec, Snapshot

from .builders import node, quota, running, snapshot, workload

NOW = 1000.0


def world(load: dict[str, float]) -> Snapshot:
    # q holds 4 cpu until NOW + 100. Workload 2 (priority 0) has waited 60 s; 3, of its
    # class (same quota, priority and shape), is queued now: simulated at NOW + 150
    # (after 1 ends and 2 has run 50 s). ``load``: what arrives ahead at priority 10,
    # as a share of the tree's 4 cpu.
    return snapshot(
        quotas=[quota("root"), quota("q", "root")],
        nodes=[node("n", {"cpu": 4})],
        workloads=[
            running(1, "q", "n", req={"cpu": 4}, started_at=NOW, expected_runtime_s=100.0),
            workload(2, "q", req={"cpu": 4}, expected_runtime_s=50.0, ts=NOW - 60),
            workload(3, "q", req={"cpu": 4}, expected_runtime_s=50.0, ts=NOW),
        ],
        queues=[QueueSpec("q", preempt_within_quota="Never", reclaim="Never")],
        arrival_load={"q": {10: load}},
        now=NOW,
    )


def alike(rho: float, n: int) -> dict[str, float]:
    """A load of ``n`` alike arrivals summing to ``rho``."""
    return {"cpu": rho, SQUARES + "cpu": n * (rho / n) ** 2, ARRIVALS: float(n)}


def test_under_overload_the_p90_counts_what_arrives_ahead_while_it_lasts() -> None:
    # Work of higher priority arrives at 1.2 times q's capacity (100 alike arrivals):
    # nothing of priority 0 starts while that lasts, and each second of it adds 1.2 s
    # of work ahead. It has lasted at least the 60 s 2 has been held back; Gott: at most
    # 9 x 60 s more with probability 0.9. 3's p90: its simulated wait, 150 s, plus
    # 1.2 x 540 s -- not Gott's bound on 2's start alone (NOW + 540).
    etas = run_cycle(world(alike(1.2, 100))).etas
    assert etas[3].p90 == pytest.approx(NOW + 150 + 1.2 * 9 * 60)
    # 2 has no older workload of its class: nothing says how long the overload has
    # lasted, and its p90 stays the calibration's (here the prior: the p90 simulation,
    # stretched 3x).
    assert etas[2].p90 == pytest.approx(NOW + 3 * 100)


def test_below_capacity_or_from_a_few_arrivals_it_is_no_overload() -> None:
    # 0.9 of the capacity: a busy period ends; Gott's bound on 2's start stays the floor.
    below = run_cycle(world(alike(0.9, 100))).etas[3]
    assert below.p90 == pytest.approx(max(NOW + 9 * 60, NOW + 3 * 150))
    # 1.2 made of one arrival (an hour-long gang in the window) is no rate: its sampling
    # error is all of it.
    one = run_cycle(world(alike(1.2, 1))).etas[3]
    assert one.p90 == pytest.approx(max(NOW + 9 * 60, NOW + 3 * 150))
