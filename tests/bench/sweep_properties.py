"""The engine's property tests over a range of worlds: a sweep, not a benchmark.

The property tests of ``tests/engine/test_invariants.py`` draw 150-300 random worlds a
CI run (``world_from_seed`` of a random seed). A family of worlds that breaks a property
once in ten thousand passes most runs and fails one now and then. This sweep runs each
property on every world of a seed range, one after another, and prints one JSON line:
the worlds swept, the seconds taken, and per property the worlds that broke it (their
count and the first of them) -- each a seed to replay with ``world_from_seed``.

    env -u DATABASE_URL .venv/bin/python -m tests.bench.sweep_properties FROM TO [name,...]

``name``: the properties to sweep (their test names; default all). About 50 ms a world
for all twelve; ``repeated_cycles_never_ping_pong`` alone, 6 ms.

``simulated`` as the name sweeps ``tests/engine/test_simulated_invariants.py`` instead:
each world run through the simulator with the quota invariants checked every cycle, in
its four configurations (cycles on a timer or woken by events; fair share instant or
blended). It prints the (seed, cycle, mode) triples that broke.
"""

from __future__ import annotations

import inspect
import json
import random
import sys
from collections.abc import Callable
from time import perf_counter
from typing import Any

from tests.engine import test_invariants


def properties(names: set[str] | None = None) -> dict[str, Callable[..., None]]:
    """The property tests (their inner functions), by name."""
    out: dict[str, Callable[..., None]] = {}
    for name in sorted(dir(test_invariants)):
        fn = getattr(test_invariants, name)
        inner = getattr(getattr(fn, "hypothesis", None), "inner_test", None)
        if name.startswith("test_") and inner is not None and (not names or name in names):
            out[name] = inner
    # The multi-cycle property also has a plain function of its own.
    if not names or "repeated_cycles_never_ping_pong" in names:
        out["repeated_cycles_never_ping_pong"] = test_invariants.repeated_cycles_never_ping_pong
    return out


def _args(fn: Callable[..., None], seed: int) -> list[Any]:
    """The arguments past the world, drawn from the seed as the test's strategies would."""
    out: list[Any] = []
    for name in list(inspect.signature(fn).parameters)[1:]:
        if name == "rnd":
            out.append(random.Random(seed))
        elif name == "seed":
            out.append((seed * 2_654_435_761) % 2**32)
        elif name == "head":
            out.append(seed % 3 + 1)
        else:
            raise TypeError(f"{fn.__name__}: no value for {name}")
    return out


def sweep(lo: int, hi: int, names: set[str] | None = None) -> dict[str, Any]:
    props = properties(names)
    if names and "repeated_cycles_never_ping_pong" not in names:
        props.pop("repeated_cycles_never_ping_pong", None)
    broken: dict[str, list[int]] = {}
    t0 = perf_counter()
    for seed in range(lo, hi):
        snap = test_invariants.world_from_seed(seed)
        for name, fn in props.items():
            try:
                fn(snap, *_args(fn, seed))
            except AssertionError:
                broken.setdefault(name, []).append(seed)
    return {
        "name": "sweep_properties",
        "worlds": [lo, hi],
        "properties": len(props),
        "seconds": round(perf_counter() - t0, 1),
        "broken": {k: {"count": len(v), "first": v[:20]} for k, v in sorted(broken.items())},
    }


def sweep_simulated(lo: int, hi: int) -> dict[str, Any]:
    """``test_simulated_invariants``' runs over worlds ``lo``..``hi`` in all four configurations."""
    from queueing.engine.types import EngineConfig
    from tests.engine import test_simulated_invariants as sim

    broken: list[tuple[int, str, str, str]] = []
    t0 = perf_counter()
    for seed in range(lo, hi):
        scenario = sim.scenario_from_seed(seed)
        for cycle in ("interval", "on-event"):
            for mode in ("instant", "blended"):
                try:
                    sim.run(scenario, cycle, EngineConfig(fair_share_mode=mode))
                except Exception as e:  # every failure is a finding
                    broken.append((seed, cycle, mode, f"{type(e).__name__}: {e}"[:300]))
    return {
        "name": "sweep_simulated",
        "worlds": [lo, hi],
        "seconds": round(perf_counter() - t0, 1),
        "broken": {"count": len(broken), "first": broken[:20]},
    }


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    if argv[2:3] == ["simulated"]:
        print(json.dumps(sweep_simulated(int(argv[0]), int(argv[1]))))
        return
    names = set(argv[2].split(",")) if len(argv) > 2 else None
    print(json.dumps(sweep(int(argv[0]), int(argv[1]), names)))


if __name__ == "__main__":
    main(sys.argv[1:])
