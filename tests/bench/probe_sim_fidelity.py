"""How faithful the forecast's simulation is, told everything: a probe, not a benchmark.

The p50 is the median start of the forecast's forward simulation (:mod:`.forecast_sim`)
over draws of what is not known yet -- the runtimes and the arrivals. This probe asks
how far that simulation itself is from what then happens when nothing is left to
draw. At each wait's first forecast (as ``eta_calibration`` counts waits) it runs the
simulation again from the same cycle state:

- ``runtimes``: every workload's *actual* runtime, no arrivals (the oracle of
  ``probe_eta_floor``);
- ``everything``: every actual runtime *and* the scenario's actual arrivals after
  now, each with its actual runtime (:mod:`.forecast_arrivals`' way in), less those
  the cycle sets aside as never fitting (``forecast_arrivals.replayable``).

What ``everything`` misses is the simulation's own simplification (the preemption,
runtime quota and look-ahead rules its docstring lists); what ``runtimes`` misses
beyond it is the arrivals; the published p50 misses beyond both what the draws do not
know. ``late`` is the share of waits that started later than the point said.

Run: ``env -u DATABASE_URL .venv/bin/python -m tests.bench.probe_sim_fidelity
[demo | gpu-heavy | kueue] [seed ...]`` (default gpu-heavy, the benchmark's seeds;
one process per core). One JSON line per scenario, then the worst misses of
``everything`` (``--show=N``).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from time import perf_counter
from typing import Any
from unittest import mock

import queueing.engine.forecast as forecast_mod
import queueing.engine.forecast_sim as sim_mod
from queueing.engine.calibration import FLOOR_S, EtaRecorder
from queueing.engine.cyclestate import CycleState
from queueing.engine.forecast_arrivals import Arrival, arrival_id, replayable
from queueing.engine.scenarios import demo_world, gpu_heavy, kueue_baseline
from queueing.engine.simulator import Scenario, simulate
from queueing.engine.types import CycleResult, EngineConfig, Eta, Position, Snapshot, WorkloadSpec
from tests.bench.bench_eta_calibration import DEMO_SEEDS, GPU_HEAVY_SEEDS

EPOCH = 1_700_000_000.0
INTERVAL_S = 2.0
#: Kueue's baseline runs a cycle a second in the benchmark, as here.
KUEUE_INTERVAL_S = 1.0
#: A start the simulation did not reach.
NEVER = 86_400.0


class _Probe(EtaRecorder):
    """The benchmark's recorder, plus the told-everything starts at each first forecast."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__({a.workload.id: a.runtime_s for a in scenario.arrivals})
        self.future = sorted(
            ((EPOCH + a.at, a.workload, a.runtime_s) for a in scenario.arrivals),
            key=lambda x: x[0],
        )
        self.cycle: dict[int, tuple[float, float]] = {}
        self.first: dict[tuple[int, float], tuple[float, float]] = {}
        self.names = {a.workload.id: a.workload.name for a in scenario.arrivals}

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        known = set(self.tracks)
        super().after(snap, result)
        for wid in set(self.tracks) - known:
            got = self.cycle.get(wid)
            if got is not None:
                # A workload waits again after a preemption: each wait its own.
                self.first[(wid, self.tracks[wid].first_t)] = got

    def rerun(self, cy: CycleState, waiting: Mapping[int, float]) -> None:
        if all(wid in self.tracks for wid in waiting):
            self.cycle = {}
            return  # no first forecast in this cycle
        now = cy.now
        original = sim_mod.runtime_of

        def actual(c: Any, w: WorkloadSpec, q: int) -> float:
            got = self.runtimes.get(w.id)
            return got if got is not None else original(c, w, q)

        def run(arrivals: list[Arrival]) -> dict[int, float]:
            told = {arrival_id(k): r for k, (_, _, r) in enumerate(arrivals)}

            def draw(w: WorkloadSpec) -> float:
                r = told.get(w.id)
                return r if r is not None else actual(cy, w, 0)

            with (
                mock.patch.object(sim_mod, "runtime_of", actual),
                mock.patch.object(forecast_mod, "runtime_of", actual),
            ):
                events, _ = forecast_mod._holding_events(cy)
                sim = sim_mod.Simulation(
                    cy,
                    0,
                    events,
                    deadline=perf_counter() + 120,
                    draw=draw,
                    arrivals=arrivals or None,
                )
                return sim.run()

        alone = run([])
        # What the cycle sets aside on arrival (it can never fit) blocks nobody.
        memo: dict[object, bool] = {}
        later = [(t, w, r) for t, w, r in self.future if t > now and replayable(cy, w, memo)]
        told = run(later)
        self.cycle = {
            wid: (alone.get(wid, now + NEVER) - now, told.get(wid, now + NEVER) - now)
            for wid in waiting
        }


def _one(scenario: Scenario) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rec = _Probe(scenario)
    finish = forecast_mod.finish_etas

    def finish_and_rerun(
        cy: Any,
        pos: Mapping[int, Position],
        p50: Mapping[int, float],
        p90: Mapping[int, float],
        **kw: Any,
    ) -> dict[int, Eta]:
        etas = finish(cy, pos, p50, p90, **kw)
        rec.rerun(cy, p50)
        return etas

    interval = KUEUE_INTERVAL_S if scenario.name == "kueue-baseline" else INTERVAL_S
    with mock.patch.object(forecast_mod, "finish_etas", finish_and_rerun):
        simulate(
            scenario,
            cycle_interval_s=interval,
            config=EngineConfig(cycle_interval_s=interval, eta_budget_s=10.0),
            epoch=EPOCH,
            observer=rec,
        )
    rows: list[dict[str, Any]] = []
    for tr in rec.done:
        if tr.first_p50 is None or tr.admitted_at is None:
            continue
        got = rec.first.get((tr.workload_id, tr.first_t))
        if got is None:
            continue
        rows.append(
            {
                "name": rec.names.get(tr.workload_id, str(tr.workload_id)),
                "first_t": round(tr.first_t - EPOCH, 1),
                "actual": round(tr.admitted_at - tr.first_t, 1),
                "published": round(tr.first_p50 - tr.first_t, 1),
                "simulation": round((tr.raw_p50 or tr.first_p50) - tr.first_t, 1),
                "runtimes": round(got[0], 1),
                "everything": round(got[1], 1),
            }
        )
    return rows, rec.metrics()


def _err(actual: float, p: float) -> float:
    return abs(actual - p) / max(actual, FLOOR_S)


def _figures(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    errs = [_err(r["actual"], r[key]) for r in rows]
    return {
        "median_rel_err": round(statistics.median(errs), 3) if errs else -1.0,
        "within_30pct": round(100 * sum(e <= 0.3 for e in errs) / max(1, len(errs)), 1),
        "late_pct": round(
            100 * sum(r["actual"] > r[key] + 1e-6 for r in rows) / max(1, len(rows)), 1
        ),
    }


def _worlds(kind: str, seeds: list[int]) -> list[Scenario]:
    if kind == "kueue":
        return [kueue_baseline()]
    if kind == "demo":
        return [demo_world(seed=s, waves=True) for s in seeds or DEMO_SEEDS]
    return [gpu_heavy(seed=s) for s in seeds or GPU_HEAVY_SEEDS]


def main(argv: list[str]) -> int:
    show = 10
    for a in argv:
        if a.startswith("--show="):
            show = int(a.split("=", 1)[1])
    argv = [a for a in argv if not a.startswith("--show=")]
    kind = argv[0] if argv and not argv[0].isdigit() else "gpu-heavy"
    seeds = [int(a) for a in argv if a.isdigit()]
    worlds = _worlds(kind, seeds)
    t0 = perf_counter()
    with ProcessPoolExecutor(max_workers=min(2, len(worlds))) as pool:
        done = list(pool.map(_one, worlds))
    rows = [r for rs, _ in done for r in rs]
    line: dict[str, Any] = {"name": "probe_sim_fidelity", "scenario": kind, "waits": len(rows)}
    for key in ("published", "simulation", "runtimes", "everything"):
        line[key] = _figures(rows, key)
    line["wall_s"] = round(perf_counter() - t0, 1)
    print(json.dumps(line), flush=True)
    worst = sorted(rows, key=lambda r: -_err(r["actual"], r["everything"]))[:show]
    for r in worst:
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
