"""How the p50's calibration shift does, replayed offline on a run's first forecasts.

A probe, not a benchmark. The p50 published at a wait's first forecast is the
simulation's start moved by its class's measured error (``calibration.Residuals``,
see ``docs/eta.md``). Only that shift is under test here, so the engine runs once:
each of the benchmark's worlds (``eta_calibration``'s seeds, recorder and config) is
simulated, every wait's first forecast recorded (the simulation's start, the published
p50, when it was admitted), and then the shift is replayed for each setting of
``Residuals`` -- the same class, fed the same admissions in the same order and the same
censored errors of the waits still overdue at each first forecast, as the recorder
feeds it during the run. With the settings the run used, the replay gives the
published figures back (Kueue's exactly; elsewhere up to the strict-order cap that
follows the shift, ``eta._order``).

Prints one JSON line per setting and scenario: ``p50_minimum``, ``shrink`` and ``band``
(see ``calibration.P50_MINIMUM``, ``SHRINK_N``, ``P50_BAND``; band null: the class's
median), the p50's median relative error and coverage as ``eta_calibration`` counts
them, and the simulation's alone.

Run: ``env -u DATABASE_URL .venv/bin/python -m tests.bench.probe_p50_shift [scenario]
[seed ...]``; scenario ``demo`` (default; seeds 7-10, or e.g. 11 12 13 14 held out),
``kueue`` or ``gpu-heavy`` (seeds 11-20). About 7 minutes for the demo's four worlds
on two cores.
"""

from __future__ import annotations

import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from queueing.engine.calibration import (
    FLOOR_S,
    P50_BAND,
    P50_MINIMUM,
    SHRINK_N,
    Residuals,
    banded,
    overdue_errors,
)
from queueing.engine.scenarios import demo_world, gpu_heavy, kueue_baseline
from tests.bench.bench_eta_calibration import DEMO_SEEDS, GPU_HEAVY_SEEDS, _world

#: (p50_minimum, shrink, band) settings replayed: the shift before 6 December 2026
#: (the median from 10 errors), each later change alone, and the settings now.
SETTINGS: tuple[tuple[int, float, tuple[float, float] | None], ...] = (
    (10, 0.0, None),
    (40, 0.0, None),
    (10, SHRINK_N, None),
    (P50_MINIMUM, SHRINK_N, None),
    (P50_MINIMUM, 0.0, P50_BAND),
    (P50_MINIMUM, SHRINK_N, P50_BAND),
)

#: One wait's first forecast: classes, first seen, simulated start, published p50,
#: admitted (None: still waiting at the end).
Row = tuple[tuple[str, ...], float, float, float, float | None]


def _rows(args: tuple[str, int | None]) -> list[Row]:
    kind, seed = args
    if kind == "kueue":
        scenario, interval = kueue_baseline(), 1.0
    elif kind == "gpu-heavy":
        scenario, interval = gpu_heavy(seed=seed or 11), 2.0
    else:
        scenario, interval = demo_world(seed=seed or 7, waves=True), 2.0
    watch, _ = _world(scenario, interval)
    return [
        (t.classes, t.first_t, t.raw_p50, t.first_p50, t.admitted_at)
        for t in [*watch.done, *watch.tracks.values()]
        if t.raw_p50 is not None and t.first_p50 is not None
    ]


def replay(
    rows: list[Row], p50_minimum: int, shrink: float, band: tuple[float, float] | None
) -> list[tuple[float, bool]]:
    """(relative error, covered) of the replayed p50 of every admitted wait."""
    res = Residuals(p50_minimum=p50_minimum, shrink=shrink, band=band)
    admitted = sorted((r for r in rows if r[4] is not None), key=lambda r: r[4] or 0.0)
    fed = 0
    out: list[tuple[float, bool]] = []
    at_t: float | None = None
    quantiles: dict[str, tuple[float | None, float]] = {}
    for classes, t0, raw, _, at in sorted(rows, key=lambda r: r[1]):
        if t0 != at_t:
            # A cycle's snapshot: the admissions of earlier cycles, and the censored
            # errors of the waits overdue now (``EtaRecorder.before``).
            at_t = t0
            while fed < len(admitted) and (admitted[fed][4] or 0.0) < t0:
                c, f, s, _, a = admitted[fed]
                res.add(c, s - f, (a or 0.0) - f)
                fed += 1
            overdue = overdue_errors(
                (c, s - f, t0 - f) for c, f, s, _, a in rows if f < t0 and (a is None or a >= t0)
            )
            quantiles = res.quantiles(overdue)
        if at is None:
            continue
        d = max(0.0, raw - t0)
        # The finest class measured enough for the p50's shift (``eta.finish_etas``).
        got = (quantiles[k][0] for k in banded(classes, d) if k in quantiles)
        e50 = next((e for e in got if e is not None), 0.0)
        p50 = max(0.0, d + max(d, FLOOR_S) * e50)
        waited = at - t0
        out.append((abs(waited - p50) / max(waited, FLOOR_S), waited <= p50 + 1e-6))
    return out


def _figures(got: list[tuple[float, bool]]) -> dict[str, Any]:
    return {
        "p50_median_rel_err": round(statistics.median(e for e, _ in got), 3) if got else None,
        "p50_coverage_pct": round(100.0 * sum(c for _, c in got) / max(1, len(got)), 1),
    }


def main(argv: list[str]) -> int:
    kind = argv[0] if argv else "demo"
    if kind not in ("demo", "kueue", "gpu-heavy"):
        print(f"unknown scenario {kind!r}: demo, kueue or gpu-heavy", file=sys.stderr)
        return 2
    seeds: list[int | None] = [int(x) for x in argv[1:]] or (
        [None] if kind == "kueue" else list(GPU_HEAVY_SEEDS if kind == "gpu-heavy" else DEMO_SEEDS)
    )
    with ProcessPoolExecutor(max_workers=min(2, len(seeds))) as pool:
        worlds = list(pool.map(_rows, [(kind, s) for s in seeds]))
    admitted = [r for rows in worlds for r in rows if r[4] is not None]
    published = [
        (abs((a or 0.0) - p) / max((a or 0.0) - f, FLOOR_S), (a or 0.0) <= p + 1e-6)
        for _, f, _, p, a in admitted
    ]
    simulation = [
        (abs((a or 0.0) - s) / max((a or 0.0) - f, FLOOR_S), (a or 0.0) <= s + 1e-6)
        for _, f, s, _, a in admitted
    ]
    base = {"name": "probe_p50_shift", "scenario": kind, "seeds": seeds, "waits": len(admitted)}
    print(json.dumps({**base, "p50": "published by the run", **_figures(published)}))
    print(json.dumps({**base, "p50": "the simulation alone", **_figures(simulation)}))
    for p50_minimum, shrink, band in SETTINGS:
        got = [x for rows in worlds for x in replay(rows, p50_minimum, shrink, band)]
        line = {**base, "p50": "replayed", "p50_minimum": p50_minimum, "shrink": shrink}
        line["band"] = band
        print(json.dumps({**line, **_figures(got)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
