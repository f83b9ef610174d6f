"""The forecast under the live budget: how often its draws run, and what they cost.
A probe, not a benchmark.

``eta_calibration`` gives the forecast a 10-s budget, so that its figures do not depend
on the machine's load; live, the forecaster has ``KQ_FORECASTER_ETA_BUDGET_S`` (1 s) and
a cycle that forecasts itself ``KQ_ETA_BUDGET_S`` (0.25 s, the default here). This probe
runs a demo world as ``make run`` runs it (with its waves) in virtual time with such a
budget (one process, the wall clock spent by the forecast as it is) and prints one JSON
line: the cycles whose p50 is a median of draws (``drawn_pct``), of all ``DRAWS`` of
them (``full_pct``), the forecast's time per cycle (median, 90th percentile, max), and
the benchmark's p50 and p90 figures for that world. Its times depend on the host: run
it on a quiet one.

    env -u DATABASE_URL .venv/bin/python -m tests.bench.probe_live_budget [seed] [budget_s]
"""

from __future__ import annotations

import json
import sys
from time import perf_counter

from queueing.engine.forecast import DRAWS
from queueing.engine.scenarios import demo_world
from queueing.engine.simulator import Scenario, simulate
from queueing.engine.types import CycleResult, EngineConfig, Snapshot
from tests.bench.bench_eta_calibration import _Watch


class _Costs(_Watch):
    """The benchmark's recorder, plus each forecasting cycle's draws and time."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.cycles: list[tuple[float, int]] = []

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        super().after(snap, result)
        if result.etas:
            stats = result.stats
            self.cycles.append((float(stats.get("eta_s", 0.0)), int(stats.get("eta_draws", 0))))


def main(seed: int = 7, budget_s: float = 0.25) -> dict[str, object]:
    scenario = demo_world(seed=seed, waves=True)
    watch = _Costs(scenario)
    t0 = perf_counter()
    simulate(
        scenario,
        cycle_interval_s=2.0,
        config=EngineConfig(cycle_interval_s=2.0, eta_budget_s=budget_s),
        epoch=1_700_000_000.0,
        observer=watch,
    )
    m = watch.metrics()
    n = max(1, len(watch.cycles))
    times = sorted(t for t, _ in watch.cycles) or [0.0]
    return {
        "name": "probe_live_budget",
        "seed": seed,
        "budget_s": budget_s,
        "forecasting_cycles": len(watch.cycles),
        "drawn_pct": round(100.0 * sum(1 for _, d in watch.cycles if d) / n, 1),
        "full_pct": round(100.0 * sum(1 for _, d in watch.cycles if d == DRAWS) / n, 1),
        "eta_s_p50": round(times[len(times) // 2], 4),
        "eta_s_p90": round(times[int(0.9 * len(times))], 4),
        "eta_s_max": round(times[-1], 4),
        "p50_median_rel_err": m["p50_median_rel_err"],
        "p50_coverage_pct": m["p50_coverage_pct"],
        "p90_coverage_pct": m["p90_coverage_pct"],
        "wall_s": round(perf_counter() - t0, 1),
    }


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(main(int(args[0]) if args else 7, float(args[1]) if len(args) > 1 else 0.25)))
