"""A live run replayed in virtual time: `make run`'s own arrivals through the simulator.

The live demo is random and a watch of it measures one draw with a few dozen waits;
the engine's changes are judged on ``eta_calibration``'s fixed worlds. This replays
what a live run *did* -- every workload it was submitted, when, with its shape,
priority, quota, queue and declared runtime, and the runtime its job then actually ran
(the simulated cluster's ``SimJob.runtime_s``) -- in the simulator, on the demo's tree
and nodes (``scenarios.demo_world``), with the benchmark's recorder and the quota
invariants checked in every cycle. The same run can then be measured on two versions
of the engine, pair by pair, and its figures set against what the live run showed.

It prints one JSON line: the benchmark's figures (``eta_calibration``), and against
aging's bound ("starts by T at the latest"): how many workloads it was stated for,
how many started after the first / last bound stated for them, how often a stated
bound moved later, and the longest waits of work that fits.

Run, beside or after ``make run`` (its database, read through Django):
``.venv/bin/python -m tests.bench.replay_demo [cycle interval s, default 2]``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
django.setup()

from queueing.engine.resources import Resources  # noqa: E402
from queueing.engine.scenarios import GPU_TOLERATION, demo_world  # noqa: E402
from queueing.engine.simulator import Arrival, Scenario, simulate  # noqa: E402
from queueing.engine.types import (  # noqa: E402
    CycleResult,
    EngineConfig,
    PodSet,
    Snapshot,
    WorkloadSpec,
)
from queueing.models import SimJob, Workload  # noqa: E402
from tests.bench.bench_eta_calibration import _Watch  # noqa: E402

EPOCH = 1_700_000_000.0


def live_scenario() -> Scenario:
    """The live run's workloads as arrivals on the demo's tree and nodes."""
    runtimes = dict(SimJob.objects.values_list("uid", "runtime_s"))
    rows = list(
        Workload.objects.order_by("created_at", "id").values(
            "id",
            "name",
            "object_uid",
            "quota__name",
            "queue__name",
            "priority",
            "pod_sets",
            "expected_runtime_s",
            "created_at",
        )
    )
    if not rows:
        raise SystemExit("no workloads in this database: run `make run` first")
    t0 = rows[0]["created_at"].timestamp()
    arrivals = []
    for r in rows:
        at = r["created_at"].timestamp() - t0 + 1.0
        sets = tuple(
            PodSet(
                p["name"],
                int(p["count"]),
                Resources({k: int(v) for k, v in p["requests"].items()}),
                tolerations=(GPU_TOLERATION,) if p.get("tolerations") else (),
            )
            for p in r["pod_sets"]
        )
        spec = WorkloadSpec(
            id=r["id"],
            name=r["name"],
            quota=r["quota__name"],
            queue=r["queue__name"],
            priority=r["priority"],
            queue_order_at=EPOCH + at,
            pod_sets=sets,
            expected_runtime_s=r["expected_runtime_s"],
        )
        runtime = runtimes.get(r["object_uid"], r["expected_runtime_s"] or 60.0)
        arrivals.append(Arrival(at, spec, r["name"].split("-")[0], float(runtime)))
    return dataclasses.replace(demo_world(waves=True), name="replay", arrivals=tuple(arrivals))


class _Bounds(_Watch):
    """The recorder, and aging's stated bounds against the starts."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.bounds: dict[int, list[float]] = {}  # id -> [first, last] stated
        self.moved_later = 0

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        super().after(snap, result)
        for wid, e in result.explanations.items():
            if e.starts_by is None:
                continue
            seen = self.bounds.setdefault(wid, [e.starts_by, e.starts_by])
            if e.starts_by > seen[1] + 5.0:
                self.moved_later += 1
            seen[1] = e.starts_by


def replay(interval: float = 2.0) -> dict[str, Any]:
    scenario = live_scenario()
    watch = _Bounds(scenario)
    sim = simulate(
        scenario,
        cycle_interval_s=interval,
        config=EngineConfig(cycle_interval_s=interval, eta_budget_s=10.0),
        epoch=EPOCH,
        observer=watch,
    )
    t0 = watch.t0 or 0.0
    after_first = after_last = started = 0
    for wid, (first, last) in watch.bounds.items():
        at = watch.admitted_at.get(wid)
        if at is None:
            continue
        started += 1
        after_first += at + t0 > first + 5.0
        after_last += at + t0 > last + 5.0
    waits = sorted(
        (watch.admitted_at.get(wid, sim.makespan_s) - created, wid)
        for wid, created in watch.created.items()
        if wid not in watch.never
    )
    names = {a.workload.id: a.workload.name for a in scenario.arrivals}
    out: dict[str, Any] = {"name": "replay_demo", "workloads": len(scenario.arrivals)}
    out.update(watch.metrics())
    out.update(
        {
            "bounded_started": started,
            "started_after_first_bound": after_first,
            "started_after_last_bound": after_last,
            "bound_moved_later": watch.moved_later,
            "waits_over_600s": sum(1 for w, _ in waits if w > 600.0),
            "longest_waits": [[names[wid], round(w)] for w, wid in waits[-5:][::-1]],
            "invariant_violations": watch.violations,
            "cycles": sim.cycles,
        }
    )
    return out


if __name__ == "__main__":
    print(json.dumps(replay(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)))
