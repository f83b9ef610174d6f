"""Starvation and usage over the demo worlds in virtual time (issue 11, item 6).

Not a `make bench` benchmark (no ``bench_`` prefix): run it before and after an engine
change, `.venv/bin/python -m tests.bench.measure_starvation [WORLD ...]`, where a WORLD
is ``demo``, ``demo-waves`` or ``gpu-heavy`` with options ``:minutes=45:seed=2`` (demo
worlds) or ``:seed=12`` (gpu-heavy), and ``:interval=2`` (the cycle, seconds). One JSON
line per world: the longest wait of a feasible workload (from arrival or eviction to
admission; still waiting at the end counts to the end; workloads set aside as never
fitting are left out), how many waits passed 300 and 600 s, the five longest, the
cluster's usage (allocated / allocatable, stepwise at cycles) over the arrivals' window
-- all cpu, all GPUs, and the cpu pool of the demo (its 16 cpu nodes: 496 cpu, where
cpu-only work runs) -- and the quota invariants checked in every cycle.
"""

from __future__ import annotations

import json
import sys
from time import perf_counter
from typing import Any

from queueing.engine.invariants import check_cycle
from queueing.engine.scenarios import demo_world, gpu_heavy
from queueing.engine.simulator import Scenario, simulate
from queueing.engine.types import CycleResult, EngineConfig, Snapshot

EPOCH = 1_700_000_000.0
GPU = "nvidia.com/gpu"
CPU_POOL_M = 16 * 31_000  # the demo's cpu nodes, allocatable
HOLDING = ("Running", "Admitted", "Preempted")


class Watch:
    """Waits, usage and invariant breaks, cycle by cycle."""

    def __init__(self, sc: Scenario) -> None:
        self.start = {a.workload.id: a.at for a in sc.arrivals}
        self.name = {a.workload.id: (a.workload.name, a.workload.queue) for a in sc.arrivals}
        self.waits: list[tuple[float, int]] = []
        self.never: set[int] = set()
        self.cap = {"cpu": 0, GPU: 0}
        for n in sc.nodes:
            for k in self.cap:
                self.cap[k] += n.allocatable.get(k, 0) - n.reserved.get(k, 0)
        self.window = max(a.at for a in sc.arrivals)
        self.last_t: float | None = None
        self.last_used: dict[str, int] = {}
        self.int_win = {"cpu": 0.0, GPU: 0.0, "pool": 0.0}
        self.violations = 0

    def before(self, snap: Snapshot) -> Snapshot:
        return snap

    def after(self, snap: Snapshot, result: CycleResult) -> None:
        t = snap.now - EPOCH
        self.violations += len(check_cycle(snap, result))
        if self.last_t is not None:
            lo, hi = self.last_t, min(t, self.window)
            if hi > lo:
                for k in self.int_win:
                    self.int_win[k] += self.last_used[k] * (hi - lo)
        used = {"cpu": 0, GPU: 0, "pool": 0}
        admitted = {a.workload_id for a in result.admissions}
        for w in snap.workloads:
            if w.phase in HOLDING or w.id in admitted:
                used["cpu"] += w.request.get("cpu", 0)
                used[GPU] += w.request.get(GPU, 0)
                if not w.request.get(GPU, 0):
                    used["pool"] += w.request.get("cpu", 0)
        self.last_t, self.last_used = t, used
        for a in result.admissions:
            s = self.start.pop(a.workload_id, None)
            if s is not None:
                self.waits.append((t - s, a.workload_id))
        for p in result.preemptions:
            self.start[p.victim_id] = t
        for wid, e in result.explanations.items():
            if e.kind == "never-fits":
                self.never.add(wid)
                self.start.pop(wid, None)


def measure(sc: Scenario, interval: float = 2.0) -> dict[str, Any]:
    watch = Watch(sc)
    t0 = perf_counter()
    sim = simulate(
        sc,
        cycle_interval_s=interval,
        config=EngineConfig(cycle_interval_s=interval, eta_budget_s=10.0),
        epoch=EPOCH,
        observer=watch,
    )
    end = sim.makespan_s
    waits = [*watch.waits, *((end - s, wid) for wid, s in watch.start.items())]
    waits.sort(reverse=True)
    win = watch.window or 1.0

    def pct(x: float, cap: float) -> float:
        return round(100 * x / (cap * win), 2) if cap else 0.0

    return {
        "longest_wait_s": round(waits[0][0], 1) if waits else 0.0,
        "waits_over_600": sum(1 for x, _ in waits if x > 600),
        "waits_over_300": sum(1 for x, _ in waits if x > 300),
        "worst": [(round(x), *watch.name[i]) for x, i in waits[:5]],
        "usage_cpu_pct": pct(watch.int_win["cpu"], watch.cap["cpu"]),
        "usage_gpu_pct": pct(watch.int_win[GPU], watch.cap[GPU]),
        "usage_cpu_pool_pct": pct(watch.int_win["pool"], CPU_POOL_M),
        "makespan_s": round(end, 1),
        "evictions": sim.evictions,
        "invariant_violations": watch.violations,
        "wall_s": round(perf_counter() - t0, 1),
    }


def world(spec: str) -> tuple[Scenario, float]:
    name, *opts = spec.split(":")
    kw: dict[str, str] = dict(o.split("=", 1) for o in opts)
    interval = float(kw.pop("interval", "2"))
    seed = int(kw.pop("seed")) if "seed" in kw else None
    if name == "gpu-heavy":
        return (gpu_heavy(seed=seed) if seed is not None else gpu_heavy()), interval
    minutes = float(kw.pop("minutes", "15"))
    waves = name == "demo-waves"
    if seed is not None:
        return demo_world(minutes, seed=seed, waves=waves), interval
    return demo_world(minutes, waves=waves), interval


if __name__ == "__main__":
    for spec in sys.argv[1:] or ["demo", "demo-waves", "gpu-heavy"]:
        sc, interval = world(spec)
        print(json.dumps({"world": spec, **measure(sc, interval)}), flush=True)
