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
        engine_cpu_ms_per_tree_cycle=round(1000 * result.engine_cpu_mean_s / trees, 3),
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
                "engine_cpu_ms_per_tree_cycle",
                "admissions_per_cycle_max",
                "wall_s",
            )
        },
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def db_transitions() -> dict[str, Any]:
    """What PostgreSQL here takes of the cycle's writes: workload transitions per second,
    one UPDATE per workload against one UPDATE per batch (``UPDATE ... FROM unnest``),
    on a scratch table shaped like ``queueing_workload``'s hot columns with 150,000 rows
    (the 10x load). A measurement of the database for ``docs/scaling.md``, not of the
    product's code; needs PostgreSQL (``DATABASE_URL`` or 127.0.0.1:5432)."""
    import json
    import time

    import psycopg

    from tests.bench.bench_api import drop_database, scratch_database

    base = os.environ.get("DATABASE_URL") or "postgres://postgres@127.0.0.1:5432/postgres"
    url = scratch_database(base, f"kq_bench_scale_{os.getpid()}")
    rows = 150_000
    out: dict[str, Any] = {"rows": rows}
    try:
        with psycopg.connect(url.replace("postgres://", "postgresql://", 1)) as conn:
            conn.execute(
                "CREATE TABLE w (id bigint PRIMARY KEY, quota_id int NOT NULL, phase varchar(10),"
                " admitted_at timestamptz, assignment jsonb, position int, reason text)"
            )
            conn.execute("CREATE INDEX w_quota_phase ON w (quota_id, phase)")
            conn.execute(
                "INSERT INTO w SELECT g, g %% 300, 'Pending', NULL, '{}'::jsonb, g, ''"
                " FROM generate_series(1, %s) g",
                (rows,),
            )
            conn.commit()
            assignment = json.dumps({"sim-node": {"cpu": 5000}})
            next_id = 1

            def take(n: int) -> list[int]:
                nonlocal next_id
                ids = list(range(next_id, next_id + n))
                next_id += n
                return ids

            # One statement per workload, one transaction per cycle of `batch`.
            for batch in (10, 100):
                done, t0 = 0, time.perf_counter()
                while done < 10_000:
                    with conn.transaction():
                        for wid in take(batch):
                            conn.execute(
                                "UPDATE w SET phase='Admitted', admitted_at=now(),"
                                " assignment=%s::jsonb WHERE id=%s AND phase='Pending'",
                                (assignment, wid),
                            )
                    done += batch
                out[f"per_row_batch{batch}_rows_per_s"] = round(done / (time.perf_counter() - t0))
            # One statement per cycle.
            for batch in (10, 100, 360):
                done, t0 = 0, time.perf_counter()
                while done < 20_000:
                    ids = take(batch)
                    with conn.transaction():
                        conn.execute(
                            "UPDATE w SET phase='Admitted', admitted_at=now(), assignment=u.a"
                            " FROM unnest(%s::bigint[], %s::jsonb[]) AS u(id, a)"
                            " WHERE w.id=u.id AND w.phase='Pending'",
                            (ids, [assignment] * len(ids)),
                        )
                    done += batch
                out[f"bulk_batch{batch}_rows_per_s"] = round(done / (time.perf_counter() - t0))
    finally:
        drop_database(url)
    out["load_avg_1m"] = round(os.getloadavg()[0], 2)
    return out


BENCHMARKS = {"kueue_baseline_10x_sim": kueue_baseline_10x_sim, "db_transitions": db_transitions}
