"""ETA calibration: predictions at every cycle against what then happened.

Three scenarios in virtual time (:func:`queueing.engine.simulator.simulate` with an
:class:`~queueing.engine.calibration.EtaRecorder` watching every cycle): the demo
world as ``make run`` runs it (``demo_world(waves=True)``: its trickle, a tenant's wave
every three minutes, runtimes 40-100 % of their declared limit: the steady trickle
without waves, measured here until 6 December 2026, erred 0.44 where this world erred
0.60 and a live run, replayed, 0.54),
Kueue's scheduler baseline, and a GPU-heavy world with gangs, priority bands and
runtimes 30-100 % of their limits. Each prints one JSON line with the issue's
figures; the quota invariants (:mod:`queueing.engine.invariants`) are checked in
every cycle and violations counted.

The demo and gpu-heavy scenarios are each measured over several independent worlds
(seeds), their waits pooled (:func:`~queueing.engine.calibration.pooled`): one demo
world admits about 85 workloads after a wait and one 4-hour gpu-heavy world about
50, too few to tell a p90 coverage of 90 % from 85 % (the standard error of a share
of 90 % over 50 is 4.2 points; the same engine passed on one seed and failed on the
next). ``worlds`` lists each one's own figures. Kueue's baseline admits thousands.

Targets (issue 11): presence >= 99, p90 coverage >= 85, p50 coverage 40-65, median
relative p50 error <= 0.3, flips <= 2, inversions 0, contradictions 0; in the demo,
no feasible workload waits more than 10 minutes. Nothing here asserts.

It takes about 26 minutes of CPU (15 on 2 cores), 15 of them gpu-heavy's 50,000 cycles: the
forecast's budget is raised here, so every cycle's p50 runs its 16 simulations (the
first and 15 runtime draws, :mod:`queueing.engine.forecast`). A scenario's worlds run
side by side, one process per core (``KQ_BENCH_WORKERS`` to change it; 1: one after
another); the figures do not depend on it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from time import perf_counter
from typing import Any

from queueing.engine.calibration import EtaRecorder, pooled
from queueing.engine.invariants import check_cycle
from queueing.engine.scenarios import demo_world, gpu_heavy, kueue_baseline
from queueing.engine.simulator import Scenario, simulate
from queueing.engine.types import CycleResult, EngineConfig, Snapshot


class _Watch(EtaRecorder):
    """The recorder, plus the quota invariants and the longest feasible wait."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__({a.workload.id: a.runtime_s for a in scenario.arrivals})
        self.created = {a.workload.id: a.at for a in scenario.arrivals}
        self.violations = 0
        self.violation_examples: list[str] = []
        self.never: set[int] = set()
        self.admitted_at: dict[int, float] = {}
        self.t0: float | None = None

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        super().after(snap, result)
        if self.t0 is None:
            self.t0 = snap.now - min(self.created.values(), default=0.0)
        for problem in check_cycle(snap, result):
            self.violations += 1
            if len(self.violation_examples) < 3:
                self.violation_examples.append(problem)
        for wid, e in result.explanations.items():
            if e.kind == "never-fits":
                self.never.add(wid)
        for a in result.admissions:
            self.admitted_at.setdefault(a.workload_id, snap.now - (self.t0 or 0.0))

    def longest_feasible_wait(self, end: float) -> float:
        worst = 0.0
        for wid, created in self.created.items():
            if wid in self.never:
                continue
            worst = max(worst, self.admitted_at.get(wid, end) - created)
        return worst


#: The seeds each pooled scenario is measured on (the first is the scenario's default).
DEMO_SEEDS = (7, 8, 9, 10)
GPU_HEAVY_SEEDS = tuple(range(11, 21))
#: Each world's own figures listed under ``worlds``.
_PER_WORLD = ("p90_coverage_pct", "p50_coverage_pct", "p50_median_rel_err", "flips_pct")


def _world(scenario: Scenario, interval: float) -> tuple[_Watch, Any]:
    watch = _Watch(scenario)
    sim = simulate(
        scenario,
        cycle_interval_s=interval,
        # The forecast's wall-time budget is raised: what is measured is calibration, and
        # on a shared machine a 0.25 s budget would make the figures depend on the load
        # (at load 20, 2 s ran out in some of Kueue's cycles: 11,640 of 13,140 waits).
        config=EngineConfig(cycle_interval_s=interval, eta_budget_s=10.0),
        epoch=1_700_000_000.0,
        observer=watch,
    )
    return watch, sim


def _run(worlds: Sequence[tuple[int | None, Scenario]], interval: float) -> dict[str, Any]:
    """The figures of one scenario over its ``worlds`` ((seed, scenario) pairs), pooled."""
    t0 = perf_counter()
    # The worlds are independent and each deterministic: run side by side, one process
    # per core, the figures are the same as one after another.
    workers = min(len(worlds), int(os.environ.get("KQ_BENCH_WORKERS", os.cpu_count() or 1)))
    if workers > 1:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            done = list(
                pool.map(_world, [scenario for _, scenario in worlds], [interval] * len(worlds))
            )
    else:
        done = [_world(scenario, interval) for _, scenario in worlds]
    runs = [(seed, watch, sim) for (seed, _), (watch, sim) in zip(worlds, done, strict=True)]
    out: dict[str, Any] = {"scenario": worlds[0][1].name}
    out.update(pooled([watch for _, watch, _ in runs]).metrics())
    out["max_feasible_wait_s"] = round(
        max(watch.longest_feasible_wait(sim.makespan_s) for _, watch, sim in runs), 1
    )
    out["inadmissible"] = sum(len(watch.never) for _, watch, _ in runs)
    out["invariant_violations"] = sum(watch.violations for _, watch, _ in runs)
    out["workloads"] = sum(len(scenario.arrivals) for _, scenario in worlds)
    out["cycles"] = sum(sim.cycles for _, _, sim in runs)
    out["makespan_s"] = round(max(sim.makespan_s for _, _, sim in runs), 1)
    out["wall_s"] = round(perf_counter() - t0, 1)
    if len(runs) > 1:
        out["worlds"] = []
        for seed, watch, _ in runs:
            own = watch.metrics()
            row: dict[str, Any] = {"seed": seed, "admitted_tracked": own["admitted_tracked"]}
            row.update({k: own[k] for k in _PER_WORLD})
            out["worlds"].append(row)
    examples = [e for _, watch, _ in runs for e in watch.contradiction_examples]
    if examples:
        out["contradiction_examples"] = examples[:2]
    violations = [e for _, watch, _ in runs for e in watch.violation_examples]
    if violations:
        out["violation_examples"] = violations[:3]
    return out


def eta_calibration() -> list[dict[str, Any]]:
    return [
        _run([(seed, demo_world(seed=seed, waves=True)) for seed in DEMO_SEEDS], 2.0),
        _run([(None, kueue_baseline())], 1.0),
        _run([(seed, gpu_heavy(seed=seed)) for seed in GPU_HEAVY_SEEDS], 2.0),
    ]


BENCHMARKS = {"eta_calibration": eta_calibration}
