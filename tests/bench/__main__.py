"""Run benchmarks: `python -m tests.bench [NAME ...]`.

Each module `tests/bench/bench_*.py` exposes `BENCHMARKS: dict[str, Callable[[], dict]]`.
Every benchmark prints one JSON line that carries its `name` (a benchmark that returns
a list of dicts -- one per scenario -- prints one line for each). Benchmarks are not tests:
they assert nothing about time; the figures go to docs/BENCHMARKS.md.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path


def discover() -> dict[str, Callable[[], dict | list[dict]]]:
    found: dict[str, Callable[[], dict | list[dict]]] = {}
    here = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(here)]), key=lambda m: m.name):
        if not info.name.startswith("bench_"):
            continue
        module = importlib.import_module(f"tests.bench.{info.name}")
        for name, func in getattr(module, "BENCHMARKS", {}).items():
            if name in found:
                raise SystemExit(f"benchmark {name!r} is defined twice")
            found[name] = func
    return found


def main(argv: list[str]) -> int:
    benchmarks = discover()
    wanted = argv or list(benchmarks)
    unknown = [name for name in wanted if name not in benchmarks]
    if unknown:
        print(
            f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(sorted(benchmarks))}",
            file=sys.stderr,
        )
        return 2
    for name in wanted:
        results = benchmarks[name]()
        for result in results if isinstance(results, list) else [results]:
            line = {"name": name, **{k: v for k, v in result.items() if k != "name"}}
            print(json.dumps(line, sort_keys=False), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
