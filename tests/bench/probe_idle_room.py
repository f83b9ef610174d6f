"""Room left idle while work that fits it waits for its runtime quota. A probe, not a
benchmark.

Runs the demo world (``demo_world(waves=True)``, seeds 7-10 by default) through the
engine in virtual time without forecasts and, after every cycle, counts the waiting
workloads whose explanation is a runtime quota short (limit ``runtime``), though the
work would fit under every ``max`` of its quota chain at the cycle's usage and its pods
would place on the nodes' free room after the cycle's admissions and the room it keeps
(``CycleResult.holds``). Such work waits only because the split gave its room to other
quotas: their guaranteed min for their demand (kept on purpose), or a share they
cannot use this cycle (lent since ``queueing/engine/lending.py``).

    env -u DATABASE_URL .venv/bin/python -m tests.bench.probe_idle_room [SEED ...]

Prints one JSON line per seed: cycles, the cycles with such work, the observations
of it and the workloads, the admissions and how many of them were lent
(``stats["lent"]``), and per workload its observations, first and last time.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import queueing.engine.simulator as simulator
from queueing.engine.cycle import run_cycle
from queueing.engine.cyclestate import CycleState
from queueing.engine.nodes import NodeIndex
from queueing.engine.scenarios import demo_world
from queueing.engine.types import HOLDING_PHASES, CycleResult, EngineConfig, Snapshot

EPOCH = 1_700_000_000.0


class _Probe:
    def __init__(self) -> None:
        self.cycles = 0
        self.cycles_with = 0
        self.observations = 0
        self.admitted = 0
        self.lent = 0
        self.seen: dict[int, list[float]] = {}

    def __call__(self, snap: Snapshot, forecast: bool = True) -> CycleResult:
        result = run_cycle(snap, forecast=False)
        self.cycles += 1
        self.admitted += len(result.admissions)
        self.lent += int(result.stats.get("lent", 0))
        if self._count(snap, result):
            self.cycles_with += 1
        return result

    def _count(self, snap: Snapshot, result: CycleResult) -> bool:
        nodes = NodeIndex(snap.nodes, snap.config.pool_label)
        nodes.hold_all([w for w in snap.workloads if w.phase in HOLDING_PHASES])
        for a in result.admissions:
            for n, r in a.assignment.items():
                nodes.hold(n, r.raw)
        for h in result.holds:
            nodes.hold(h.node, h.resources.raw)
        quotas = {q.name: q for q in snap.quotas}
        by_id = {w.id: w for w in snap.workloads}
        hit = False
        for wid, e in result.explanations.items():
            if e.limit != "runtime":
                continue
            w = by_id[wid]
            req = w.request.raw
            name: str | None = w.quota
            fits = True
            while name is not None and fits:
                q = quotas[name]
                used = result.used[name].raw
                fits = all(used.get(k, 0) + v <= q.max[k] for k, v in req.items() if k in q.max)
                name = q.parent
            if fits and nodes.place(CycleState.reqs(w)) is not None:
                self.observations += 1
                self.seen.setdefault(wid, []).append(snap.now - EPOCH)
                hit = True
        return hit

    def figures(self, seed: int) -> dict[str, Any]:
        return {
            "probe": "idle_room",
            "seed": seed,
            "cycles": self.cycles,
            "cycles_with": self.cycles_with,
            "observations": self.observations,
            "workloads": len(self.seen),
            "admitted": self.admitted,
            "lent": self.lent,
            "per_workload": {w: [len(t), t[0], t[-1]] for w, t in sorted(self.seen.items())},
        }


def main(seeds: list[int]) -> None:
    real = simulator.run_cycle
    try:
        for seed in seeds:
            probe = _Probe()
            simulator.run_cycle = probe  # type: ignore[assignment]
            simulator.simulate(
                demo_world(seed=seed, waves=True),
                cycle_interval_s=2.0,
                config=EngineConfig(cycle_interval_s=2.0),
                epoch=EPOCH,
            )
            print(json.dumps(probe.figures(seed)), flush=True)
    finally:
        simulator.run_cycle = real


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [7, 8, 9, 10])
