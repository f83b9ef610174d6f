"""The fair-share weight of a quota (issue 12 item 7, Kueue's fairSharing weight).

The score that orders quotas is the weighted dominant share ``used / runtime / weight``,
so where quotas contend for the same nodes and their runtime quotas do not separate
them, a quota of weight 2 ends the cycle holding twice what a quota of weight 1 holds.
Runtime quota itself is Koordinator's (split by ``shared_weight``) and is untouched.
"""

from __future__ import annotations

import pytest

from queueing.engine import run_cycle
from queueing.engine.types import QueueSpec

from .builders import node, quota, snapshot, workload


def held(heavy: float, light: float) -> dict[str, int]:
    # Two trees (roots without a common parent) share twelve 1-cpu slots: each root's
    # capacity is the whole cluster, so only the nodes and the ordering decide.
    quotas = [quota("heavy", fair_weight=heavy), quota("light", fair_weight=light)]
    workloads = [workload(i, "heavy", req={"cpu": 1}) for i in range(1, 31)] + [
        workload(100 + i, "light", req={"cpu": 1}) for i in range(1, 31)
    ]
    snap = snapshot(
        quotas=quotas,
        nodes=[node(f"n{i}", {"cpu": 1}) for i in range(12)],
        workloads=workloads,
        queues=[QueueSpec("heavy"), QueueSpec("light")],
    )
    out = {"heavy": 0, "light": 0}
    for admission in run_cycle(snap, forecast=False).admissions:
        out["heavy" if admission.workload_id < 100 else "light"] += 1
    return out


@pytest.mark.parametrize(
    ("heavy", "light", "expected"),
    [
        (1.0, 1.0, {"heavy": 6, "light": 6}),
        (2.0, 1.0, {"heavy": 8, "light": 4}),
        (3.0, 1.0, {"heavy": 9, "light": 3}),
        (0.5, 1.0, {"heavy": 4, "light": 8}),
    ],
)
def test_a_heavier_weight_gets_a_proportionally_larger_share(
    heavy: float, light: float, expected: dict[str, int]
) -> None:
    assert held(heavy, light) == expected
