"""Stored pod sets (``Workload.pod_sets``, canonical JSON) as the engine's ``PodSet``s.

One parser for the cycle's snapshot (:mod:`queueing.state.snapshot`) and the forecast's
history of recent arrivals (:mod:`queueing.forecasting`): many workloads share a shape,
so each distinct one is parsed once per ``cache``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from queueing.engine.resources import Resources
from queueing.engine.types import PodSet, Toleration

__all__ = ["engine_pod_sets"]

_TOLERATION_KEYS = ("key", "operator", "value", "effect")


def engine_pod_sets(
    raw: Sequence[Mapping[str, Any]], cache: dict[str, tuple[PodSet, ...]]
) -> tuple[PodSet, ...]:
    """The engine's pod sets of one stored ``pod_sets`` value."""
    key = json.dumps(raw, sort_keys=True, separators=(",", ":"))
    found = cache.get(key)
    if found is None:
        found = tuple(
            PodSet(
                name=str(ps.get("name", "main")),
                count=int(ps.get("count", 1)),
                requests=Resources(ps.get("requests") or {}),
                node_selector=dict(ps.get("node_selector") or {}),
                tolerations=tuple(
                    Toleration(**{k: str(t[k]) for k in _TOLERATION_KEYS if t.get(k) is not None})
                    for t in ps.get("tolerations") or ()
                ),
            )
            for ps in raw
        )
        cache[key] = found
    return found
