"""Engine benchmarks: one cycle at 60k pending, its forecast, and a scaling series.

The world is :func:`queueing.engine.scenarios.synthetic_snapshot`: 2,000 nodes (a
fifth of them tainted GPU nodes, a few cordoned), a root / 20 departments / 1,000
teams quota tree, 2,000 queues (70 % Priority, 20 % Block, 10 % Intelligent), the
CPU nodes 90 % full of running work and the given number of pending workloads
(single pods, gangs with launcher and workers, GPU gangs). Snapshot construction is
not timed: it stands for what ``queueing/state.py`` hands the engine.

Each benchmark returns a dict; ``python -m tests.bench NAME`` prints it as one JSON
line. No assertion is made about time.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
from collections.abc import Callable
from time import perf_counter, process_time
from typing import Any

from queueing.engine import run_cycle
from queueing.engine.cycle import Cycle
from queueing.engine.forecast import forecast
from queueing.engine.scenarios import synthetic_snapshot
from queueing.engine.types import Snapshot

_cache: dict[tuple[int, int, int], Snapshot] = {}


def _world(pending: int, queues: int = 2_000, nodes: int = 2_000) -> Snapshot:
    key = (pending, queues, nodes)
    if key not in _cache:
        _cache.clear()
        _cache[key] = synthetic_snapshot(pending, queues, nodes, seed=1)
    return _cache[key]


def _timed(fn: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    fn()  # warm-up: imports, caches of the interpreter
    times: list[float] = []
    last = None
    for _ in range(runs):
        gc.collect()
        t0 = perf_counter()
        last = fn()
        times.append(perf_counter() - t0)
    return times, last


def engine_cycle_60k(runs: int = 7) -> dict[str, Any]:
    """One full cycle (decisions and explanations, no forecast) over 60k pending."""
    snap = _world(60_000)
    cpu: list[float] = []

    def cycle() -> Any:
        c0 = process_time()
        result = run_cycle(snap, forecast=False)
        cpu.append(process_time() - c0)
        return result

    times, result = _timed(cycle, runs)
    stats = result.stats
    return {
        "median_s": round(statistics.median(times), 4),
        # CPU time of this process: what the engine costs when the machine is shared.
        "cpu_median_s": round(statistics.median(cpu[1:]), 4),
        "min_s": round(min(times), 4),
        "max_s": round(max(times), 4),
        "runs": runs,
        "pending": 60_000,
        "queues": 2_000,
        "nodes": 2_000,
        "workloads": len(snap.workloads),
        "admitted": len(result.admissions),
        "preempted": len(result.preemptions),
        "explanations": len(result.explanations),
        "phases_s": {
            k: round(v, 4)
            for k, v in stats.items()
            if k.endswith("_s") and k not in ("forecast_s", "total_s")
        },
    }


def engine_forecast_60k(runs: int = 5) -> dict[str, Any]:
    """Positions plus p50/p90 ETA simulation after the 60k cycle (measured alone).

    Timed the way ``run_cycle`` runs it (garbage collector paused). Also reports how
    many waiting workloads got an ETA within the default budget, and with 1 s.
    """
    snap = _world(60_000)

    def once(budget: float) -> dict[str, float]:
        config = dataclasses.replace(snap.config, eta_budget_s=budget)
        cy = Cycle(dataclasses.replace(snap, config=config))
        cy.run()
        gc.disable()
        try:
            t0 = perf_counter()
            positions, _ = forecast(cy)
            total = perf_counter() - t0
        finally:
            gc.enable()
        return {
            "total_s": total,
            "positions_s": cy.stats["positions_s"],
            "eta_s": cy.stats["eta_s"],
            "positions": len(positions),
            "eta_p50_known": cy.stats["eta_p50_known"],
            "eta_p90_known": cy.stats["eta_p90_known"],
        }

    default_budget = snap.config.eta_budget_s
    once(default_budget)
    measures: list[dict[str, float]] = []
    for _ in range(runs):
        gc.collect()
        measures.append(once(default_budget))
    wide = once(1.0)
    last = measures[-1]
    return {
        "median_s": round(statistics.median(m["total_s"] for m in measures), 4),
        "positions_median_s": round(statistics.median(m["positions_s"] for m in measures), 4),
        "eta_median_s": round(statistics.median(m["eta_s"] for m in measures), 4),
        "eta_budget_s": default_budget,
        "eta_horizon_s": snap.config.eta_horizon_s,
        "waiting": int(last["positions"]),
        "eta_p50_known": int(statistics.median(m["eta_p50_known"] for m in measures)),
        "eta_p90_known": int(statistics.median(m["eta_p90_known"] for m in measures)),
        "with_1s_budget": {
            "eta_s": round(wide["eta_s"], 4),
            "eta_p50_known": int(wide["eta_p50_known"]),
            "eta_p90_known": int(wide["eta_p90_known"]),
        },
        "runs": runs,
    }


def engine_scaling(runs: int = 3) -> dict[str, Any]:
    """Cycle cost (no forecast) from 1k to 100k pending, 2,000 queues and nodes."""
    series = []
    for pending in (1_000, 3_000, 10_000, 30_000, 60_000, 100_000):
        snap = _world(pending)
        times, result = _timed(lambda snap=snap: run_cycle(snap, forecast=False), runs)
        med = statistics.median(times)
        series.append(
            {
                "pending": pending,
                "median_s": round(med, 4),
                "us_per_pending": round(med / pending * 1e6, 2),
                "admitted": len(result.admissions),
            }
        )
    return {"series": series, "runs": runs, "queues": 2_000, "nodes": 2_000}


BENCHMARKS: dict[str, Callable[[], dict[str, Any]]] = {
    "engine_cycle_60k": engine_cycle_60k,
    "engine_forecast_60k": engine_forecast_60k,
    "engine_scaling": engine_scaling,
}
