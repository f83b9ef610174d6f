"""Past this machine: Kueue's baseline at 10x in virtual time, `make bench
BENCH=kueue_baseline_10x_sim`.

150,000 workloads, 300 queues, 50 quota trees (``kueue-baseline-10x`` in
``queueing/engine/scenarios.py``) through the real engine, with cycles woken by every
arrival and completion (the cycler's 20 ms debounce), next to the same run at 1x. One
engine call covers every tree here; the product cycles each tree on its own, so the
figures per tree-cycle (engine time over the number of trees) are what
``docs/scaling.md`` builds on. Wall and engine times are real; makespan, usage and
times to admission are virtual.
"""

from __future__ import annotations

import os
from typing import Any

from queueing.engine.scenarios import kueue_baseline, kueue_baseline_10x
from queueing.engine.simulator import simulate

DEBOUNCE_S = 0.02  # KQ_WAKE_DEBOUNCE_MS


def _run(scenario: Any, trees: int) -> dict[str, Any]:
    result = simulate(scenario, cycle="on-event", debounce_s=DEBOUNCE_S)
    data = result.to_dict()
    workloads = len(scenario.arrivals)
    data.update(
        trees=trees,
        queues=len(scenario.queues),
        workloads=workloads,
        admissions_per_virtual_s=round(workloads / result.makespan_s, 1),
        engine_ms_per_tree_cycle=round(1000 * result.engine_mean_s / trees, 3),
    )
    return data


def kueue_baseline_10x_sim() -> dict[str, Any]:
    one = _run(kueue_baseline(), trees=5)
    ten = _run(kueue_baseline_10x(), trees=50)
    return {
        **ten,
        "baseline_1x": {
            k: one[k]
            for k in (
                "makespan_s",
                "avg_usage_pct",
                "cycles",
                "engine_mean_s",
                "engine_p95_s",
                "engine_ms_per_tree_cycle",
                "admissions_per_cycle_max",
                "wall_s",
            )
        },
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


BENCHMARKS = {"kueue_baseline_10x_sim": kueue_baseline_10x_sim}
