"""The admission and fair-share engine: pure Python, no framework imports.

``run_cycle(snapshot) -> CycleResult`` is the entry point (see :mod:`.cycle`);
the snapshot and decision types live in :mod:`.types`, the resource vector in
:mod:`.resources`.
"""

from queueing.engine.cycle import run_cycle
from queueing.engine.resources import EMPTY, Resources
from queueing.engine.types import (
    Admission,
    CycleResult,
    EngineConfig,
    Eta,
    Explanation,
    NodeHold,
    NodeSpec,
    PodSet,
    Position,
    Preemption,
    QueueSpec,
    QuotaNode,
    Requeue,
    Snapshot,
    Taint,
    Toleration,
    WorkloadSpec,
)

__all__ = [
    "EMPTY",
    "Admission",
    "CycleResult",
    "EngineConfig",
    "Eta",
    "Explanation",
    "NodeHold",
    "NodeSpec",
    "PodSet",
    "Position",
    "Preemption",
    "QueueSpec",
    "QuotaNode",
    "Requeue",
    "Resources",
    "Snapshot",
    "Taint",
    "Toleration",
    "WorkloadSpec",
    "run_cycle",
]
