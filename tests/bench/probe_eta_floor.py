"""How low the p50 error of ``eta_calibration`` can go: a probe, not a benchmark.

The issue's target is a median relative p50 error |actual - p50| / max(actual, 10 s)
of at most 0.3. This probe asks how much of the error is the forecast's model and how
much is what no forecast knows when it is made. It runs a scenario of the benchmark
(same recorder, same figures) and, at every cycle, re-runs the forecast's forward
simulation from the same cycle state:

- **oracle**: with each running and simulated job's *actual* runtime (what the forecast
  would say if it knew when every job ends) -- the model's own error;
- **Monte Carlo**: ``K`` times with runtimes drawn from the queue's history of actual /
  declared runtime (what the benchmark's recorder passes as ``runtime_ratio``), each
  running job's draw conditioned on the time it has already run. Its p50 is the
  median of the ``K`` starts (the median of the wait's distribution as the forecast
  knows it), and ``best-hit`` the start that the most draws put within +-30 % (the
  point that maximises the chance of counting as a hit for the issue's figure).

The published p50 is what the benchmark measures; the probe does not change it. Where
even the Monte Carlo points miss 0.3 while the oracle meets it, the error is the
spread of the runtimes, not the model: no point forecast made from the runtime
distribution reaches the target there. One JSON line per scenario.

Run: ``env -u DATABASE_URL .venv/bin/python -m tests.bench.probe_eta_floor [demo]
[gpu-heavy] [K] [truth] [pooled]`` (default both, K = 16; ``pooled``: the benchmark's
worlds, its seeds, pooled as it pools them; the demo's four take ~2 min of CPU).
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from collections.abc import Mapping
from time import perf_counter
from typing import Any
from unittest import mock

import queueing.engine.forecast as forecast_mod
import queueing.engine.forecast_sim as sim_mod
from queueing.engine.calibration import FLOOR_S, EtaRecorder, pooled
from queueing.engine.scenarios import demo_world, gpu_heavy
from queueing.engine.simulator import Scenario, simulate
from queueing.engine.types import CycleResult, EngineConfig, Eta, Position, Snapshot, WorkloadSpec
from tests.bench.bench_eta_calibration import DEMO_SEEDS, GPU_HEAVY_SEEDS

EPOCH = 1_700_000_000.0
#: A start the simulation did not reach within its horizon.
NEVER = 86_400.0


class _Probe(EtaRecorder):
    """The benchmark's recorder, plus the oracle's and the draws' starts at first sight."""

    def __init__(
        self,
        scenario: Scenario,
        draws: int,
        seed: int,
        usage: tuple[float, float] | None = None,
    ) -> None:
        super().__init__({a.workload.id: a.runtime_s for a in scenario.arrivals})
        self.draws = draws
        #: The scenario's own law of actual / declared runtime (uniform on ``usage``),
        #: drawn from instead of the history when given: the truth, not an estimate.
        self.usage = usage
        self.rng = random.Random(seed)
        self.history: dict[str, list[float]] = {}
        # This cycle's starts (wait from now): oracle, and the draws.
        self.cycle_oracle: dict[int, float] = {}
        self.cycle_draws: dict[int, list[float]] = {}
        # At each wait's first forecast.
        self.first_oracle: dict[int, float] = {}
        self.first_draws: dict[int, list[float]] = {}

    def before(self, snap: Snapshot) -> Snapshot:
        out = super().before(snap)
        self.history = {q: xs[-200:] for q, xs in self.ratios.items() if len(xs) >= 5}
        return out

    def observe(self, snap: Snapshot, result: CycleResult) -> None:
        known = set(self.tracks)
        super().observe(snap, result)
        for wid in set(self.tracks) - known:
            if wid in self.cycle_oracle:
                self.first_oracle[wid] = self.cycle_oracle[wid]
            if wid in self.cycle_draws:
                self.first_draws[wid] = self.cycle_draws[wid]

    def rerun(self, cy: Any, p50: Mapping[int, float]) -> None:
        """The forward simulation of this cycle again: with actual runtimes, then drawn."""
        now = cy.now
        original = sim_mod.runtime_of

        def simulate_with(runtime: Any) -> dict[int, float]:
            with (
                mock.patch.object(sim_mod, "runtime_of", runtime),
                mock.patch.object(forecast_mod, "runtime_of", runtime),
            ):
                events, _ = forecast_mod._holding_events(cy)
                return sim_mod.Simulation(cy, 0, events, deadline=perf_counter() + 60).run()

        def actual(c: Any, w: WorkloadSpec, q: int) -> float:
            got = self.runtimes.get(w.id)
            return got if got is not None else original(c, w, q)

        got = simulate_with(actual)
        self.cycle_oracle = {wid: got.get(wid, now + NEVER) - now for wid in p50}
        self.cycle_draws = {wid: [] for wid in p50}
        drawn: dict[int, float] = {}  # one draw's runtimes

        def sampled(c: Any, w: WorkloadSpec, q: int) -> float:
            r = drawn.get(w.id)
            if r is None:
                limit = w.expected_runtime_s
                ratios = self.history.get(w.queue)
                ran = (now - w.started_at) / limit if limit and w.started_at is not None else 0.0
                if limit and self.usage is not None:
                    lo, hi = self.usage
                    # The law itself, conditioned on the time already run.
                    r = drawn[w.id] = (
                        self.rng.uniform(max(lo, ran), hi) * limit if ran < hi else ran * limit
                    )
                    return r
                if not limit or not ratios:
                    return original(c, w, q)
                # Conditioned on the time already run: a draw it has not yet passed.
                pool = [x for x in ratios if x > ran] or [max(ran, 1.0)]
                r = drawn[w.id] = self.rng.choice(pool) * limit
            return r

        for _ in range(self.draws):
            drawn.clear()
            got = simulate_with(sampled)
            for wid, xs in self.cycle_draws.items():
                xs.append(got.get(wid, now + NEVER) - now)


def _best_hit_share(xs: list[float]) -> tuple[float, float]:
    """The point that the most of ``xs`` would count as a hit (within 30 %), and the
    share of ``xs`` it hits.

    A hit region is an interval of the actual wait ``a`` for a point ``p``
    (``|a - p| <= 0.3 * max(a, FLOOR_S)``), and its count is greatest at a point where
    some draw enters it, so trying every draw's entry points finds the maximum.
    """
    candidates = set(xs)
    for a in xs:
        lo = min(a - 0.3 * max(a, FLOOR_S), a)
        candidates.update((lo, a + 0.3 * max(a, FLOOR_S)))
    best = (-1, 0.0)
    for p in sorted(candidates):
        hits = sum(1 for a in xs if abs(a - p) <= 0.3 * max(a, FLOOR_S) + 1e-9)
        if hits > best[0]:
            best = (hits, p)
    return best[1], best[0] / max(1, len(xs))


def _best_hit(xs: list[float]) -> float:
    return _best_hit_share(xs)[0]


def _at_least_half(ps: list[float]) -> float:
    """P(at least half of independent Bernoulli(p_i) succeed): the chance that a median
    error of at most 0.3 is reached if wait i is a hit with probability p_i."""
    dist = [1.0]
    for p in ps:
        nxt = [0.0] * (len(dist) + 1)
        for k, q in enumerate(dist):
            nxt[k] += q * (1 - p)
            nxt[k + 1] += q * p
        dist = nxt
    need = (len(ps) + 1) // 2
    return sum(dist[need:])


def _hit(a: float, p: float) -> bool:
    """Whether a predicted wait ``p`` is within 30 % of the actual ``a`` (the floor)."""
    return abs(a - p) <= 0.3 * max(a, FLOOR_S) + 1e-9


def _figures(pairs: list[tuple[float, float]]) -> dict[str, float]:
    """Median relative error, coverage and share within 30 % of (actual wait,
    predicted wait) pairs."""
    rel = [abs(a - p) / max(a, FLOOR_S) for a, p in pairs]
    n = max(1, len(pairs))
    return {
        "p50_median_rel_err": round(statistics.median(rel), 3) if rel else 0.0,
        "p50_coverage_pct": round(100.0 * sum(a <= p + 1e-6 for a, p in pairs) / n, 1),
        "within_30pct": round(100.0 * sum(_hit(a, p) for a, p in pairs) / n, 1),
    }


def _oracle_misses(
    oracle: list[tuple[float, float]], median: list[tuple[float, float]]
) -> dict[str, float]:
    """Where even actual runtimes mispredict, and how the draws do where they do not.

    A wait the oracle misses by more than 30 % is one the model gets wrong whatever
    the runtimes: it started later (``late``: work that arrived after the forecast and
    went first -- higher priority, or smaller work backfilling the room a large job
    waited for) or earlier than the simulation put it. ``drawn_within_30pct_where_
    oracle_hits``: the draws' median on the waits the model gets right -- the part of
    the error that is the runtimes' spread.
    """
    n = max(1, len(oracle))
    late = sum(1 for a, o in oracle if not _hit(a, o) and a > o)
    early = sum(1 for a, o in oracle if not _hit(a, o) and a < o)
    right = [m for (a, o), m in zip(oracle, median, strict=True) if _hit(a, o)]
    return {
        "oracle_misses_pct": round(100.0 * (late + early) / n, 1),
        "oracle_late_pct": round(100.0 * late / n, 1),
        "oracle_early_pct": round(100.0 * early / n, 1),
        "drawn_within_30pct_where_oracle_hits": round(
            100.0 * sum(_hit(a, p) for a, p in right) / max(1, len(right)), 1
        ),
    }


def probe(
    scenarios: list[Scenario],
    draws: int = 16,
    seed: int = 5,
    usage: tuple[float, float] | None = None,
) -> dict[str, Any]:
    """The figures of ``scenarios`` (worlds of one scenario), their waits pooled."""
    t0 = perf_counter()
    recs = [_probe_one(scenario, draws, seed, usage) for scenario in scenarios]
    published: list[tuple[float, float]] = []
    oracle: list[tuple[float, float]] = []
    oracle_paired: list[tuple[float, float]] = []
    median_paired: list[tuple[float, float]] = []
    median: list[tuple[float, float]] = []
    best: list[tuple[float, float]] = []
    shares: list[float] = []
    for rec in recs:
        for tr in rec.done:
            if tr.first_p50 is None or tr.admitted_at is None:
                continue
            waited = tr.admitted_at - tr.first_t
            published.append((waited, tr.first_p50 - tr.first_t))
            o = rec.first_oracle.get(tr.workload_id)
            xs = rec.first_draws.get(tr.workload_id)
            if o is not None:
                oracle.append((waited, o))
            if xs:
                median.append((waited, statistics.median(xs)))
                point, share = _best_hit_share(xs)
                best.append((waited, point))
                shares.append(share)
                if o is not None:
                    oracle_paired.append((waited, o))
                    median_paired.append((waited, statistics.median(xs)))
    benchmark = pooled(recs).metrics()
    return {
        "name": "probe_eta_floor",
        "scenario": scenarios[0].name,
        "worlds": len(scenarios),
        "waits": len(published),
        "draws": draws,
        "published": _figures(published),
        "oracle_runtimes": _figures(oracle),
        **_oracle_misses(oracle_paired, median_paired),
        "drawn_median": _figures(median),
        "drawn_best_hit": _figures(best),
        # Each wait's best share of draws within 30 % of one point, averaged, and the
        # chance that half or more of the waits would be hits *if the draws were what
        # happens*. A diagnostic, not a bound: the draws leave arrivals out and are
        # narrower than what happens (the oracle's misses above are what they leave out).
        "hit_share_in_draws_pct": round(100 * statistics.fmean(shares), 1) if shares else 0.0,
        "p_half_hit_if_draws_true": round(_at_least_half(shares), 4) if shares else 0.0,
        "runtime_law": list(usage) if usage else "history",
        "benchmark": {k: benchmark[k] for k in ("p50_median_rel_err", "p50_coverage_pct")},
        "wall_s": round(perf_counter() - t0, 1),
    }


def _probe_one(
    scenario: Scenario,
    draws: int,
    seed: int,
    usage: tuple[float, float] | None,
) -> _Probe:
    rec = _Probe(scenario, draws, seed, usage)
    finish = forecast_mod.finish_etas

    def finish_and_rerun(
        cy: Any,
        pos: Mapping[int, Position],
        p50: Mapping[int, float],
        p90: Mapping[int, float],
        **kw: Any,
    ) -> dict[int, Eta]:
        # The forecast passes what it knows (out_of_time, with_arrivals, drawn_until):
        # taken as is, so that a new argument does not break the probe (one did).
        etas = finish(cy, pos, p50, p90, **kw)
        rec.rerun(cy, p50)
        return etas

    with mock.patch.object(forecast_mod, "finish_etas", finish_and_rerun):
        simulate(
            scenario,
            cycle_interval_s=2.0,
            config=EngineConfig(cycle_interval_s=2.0, eta_budget_s=10.0),
            epoch=EPOCH,
            observer=rec,
        )
    return rec


def main(argv: list[str]) -> int:
    worlds = {"demo": demo_world, "gpu-heavy": gpu_heavy}
    names = [a for a in argv if a in worlds] or list(worlds)
    draws = next((int(a) for a in argv if a.isdigit()), 16)
    # "pooled": the benchmark's worlds (its seeds), else each scenario's default world.
    seeds = {"demo": DEMO_SEEDS, "gpu-heavy": GPU_HEAVY_SEEDS}
    # "truth": draw from each scenario's own runtime law instead of the history.
    laws = {"demo": (0.4, 1.0), "gpu-heavy": (0.3, 1.0)}
    for name in names:
        usage = laws[name] if "truth" in argv else None
        scenarios = (
            [worlds[name](seed=s) for s in seeds[name]] if "pooled" in argv else [worlds[name]()]
        )
        print(json.dumps(probe(scenarios, draws, usage=usage)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
