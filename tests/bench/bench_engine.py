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
import hashlib
import json
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
    """One full cycle (decisions, no forecast) over 60k pending; reading its explanations,
    which are built when read, is reported apart (``explanations_read_cpu_s``)."""
    snap = _world(60_000)
    cpu: list[float] = []

    def cycle() -> Any:
        c0 = process_time()
        result = run_cycle(snap, forecast=False)
        cpu.append(process_time() - c0)
        return result

    times, result = _timed(cycle, runs)
    stats = result.stats
    # Without a forecast the explanations are built when read (lazy_explanations.Explanations):
    # what reading all of them costs, measured apart (a cycle that only admits reads
    # none; one that annotates every waiting row reads all).
    read_cpu: list[float] = []
    # What the worker asks of every cycle (admission.waits_for_nodes): whether any
    # waits for the nodes, answered without building the explanations.
    bound_cpu: list[float] = []
    for _ in range(3):
        fresh = run_cycle(snap, forecast=False)
        gc.collect()
        c0 = process_time()
        bound = fresh.explanations.node_bound()
        bound_cpu.append(process_time() - c0)
        del fresh  # (its caches would speed the reading below)
        fresh = run_cycle(snap, forecast=False)
        gc.collect()
        c0 = process_time()
        n_read = sum(1 for _ in fresh.explanations.values())
        read_cpu.append(process_time() - c0)
        del fresh
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
        # CPU to read every explanation of a cycle's result, on top of cpu_median_s.
        "explanations_read_cpu_s": round(statistics.median(read_cpu), 4),
        "explanations_read": n_read,
        "node_bound_cpu_s": round(statistics.median(bound_cpu), 4),
        "node_bound": bound,
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


def _decisions(result: Any) -> dict[str, Any]:
    """What a cycle decided, in a canonical JSON-able form (no timings, no forecast)."""
    data = result.to_dict()
    for k in ("stats", "positions", "etas"):
        data.pop(k)
    return data


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def engine_decisions() -> dict[str, Any]:
    """Digests of every decision in fixed worlds: the check for "decisions unchanged".

    Not timed. Run it before and after a change meant to be a pure speed-up; every
    digest must stay the same. Synthetic worlds 60k (seeds 1, 4), 30k (seed 3), 10k
    (seed 2): one cycle each, admissions, preemptions, requeues, nominations,
    explanations, runtime quota, used, demand and shares. The simulator's scenarios:
    the same for every cycle of the run, in order, plus the run's figures.
    """
    import queueing.engine.simulator as sim
    from queueing.engine.scenarios import SCENARIOS

    out: dict[str, Any] = {}
    for pending, seed in ((60_000, 1), (60_000, 4), (30_000, 3), (10_000, 2)):
        snap = synthetic_snapshot(pending, 2_000, 2_000, seed=seed)
        result = run_cycle(snap, forecast=False)
        out[f"synthetic_{pending}_s{seed}"] = {
            "digest": _digest(_decisions(result)),
            "admitted": len(result.admissions),
            "preempted": len(result.preemptions),
        }
        del snap, result
    real_run_cycle = sim.run_cycle
    for name in ("demo", "demo-waves", "gpu-heavy", "kueue-baseline"):
        h = hashlib.sha256()

        def recording(snap: Snapshot, forecast: bool = True, h: Any = h) -> Any:
            result = real_run_cycle(snap, forecast=forecast)
            h.update(json.dumps(_decisions(result), sort_keys=True).encode())
            return result

        sim.run_cycle = recording  # type: ignore[assignment]
        try:
            res = sim.simulate(SCENARIOS[name](), invariants=True).to_dict()
        finally:
            sim.run_cycle = real_run_cycle  # type: ignore[assignment]
        figures = {
            k: v for k, v in res.items() if not k.startswith("engine_") and k not in ("wall_s",)
        }
        out[name] = {
            "digest": h.hexdigest()[:16],
            "figures": _digest(figures),
            "cycles": res["cycles"],
            "evictions": res["evictions"],
        }
    return out


BENCHMARKS: dict[str, Callable[[], dict[str, Any]]] = {
    "engine_cycle_60k": engine_cycle_60k,
    "engine_decisions": engine_decisions,
    "engine_forecast_60k": engine_forecast_60k,
    "engine_scaling": engine_scaling,
}
