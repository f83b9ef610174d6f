"""Positive controls of :func:`queueing.engine.invariants.check_cycle` on doctored results.

The invariants hold on every real cycle (tests/engine/test_invariants.py and the
simulated runs), so what the check says of a broken one is proved here: an admission
that takes its quota past a max (invariant 3), and children given more than their
parent keeps once its own workloads are served (invariant 1).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from queueing.engine.invariants import check_cycle
from queueing.engine.resources import Resources
from queueing.engine.types import (
    Admission,
    CycleResult,
    NodeSpec,
    PodSet,
    QueueSpec,
    QuotaNode,
    Snapshot,
    WorkloadSpec,
)

EPOCH = datetime(2026, 1, 1, tzinfo=UTC).timestamp()
NODES = (NodeSpec("n", Resources({"cpu": 8})),)


def _w(wid: int, quota: str, cpu: int, phase: str = "Pending") -> WorkloadSpec:
    return WorkloadSpec(
        id=wid,
        name=f"w{wid}",
        quota=quota,
        queue=quota,
        priority=0,
        queue_order_at=EPOCH,
        pod_sets=(PodSet("main", 1, Resources({"cpu": cpu})),),
        phase=phase,
    )


def _result(**fields: Any) -> CycleResult:
    base: dict[str, Any] = {
        "admissions": (),
        "preemptions": (),
        "requeues": (),
        "explanations": {},
        "positions": {},
        "etas": {},
        "runtime_quota": {},
        "used": {},
        "demand": {},
        "shares": {},
        "stats": {},
    }
    base.update(fields)
    return CycleResult(**base)


def test_an_admission_past_a_max_is_named_and_usage_alone_is_not() -> None:
    quotas = (QuotaNode("root"), QuotaNode("a", "root", max=Resources({"cpu": 4})))
    snap = Snapshot(
        now=EPOCH,
        quotas=quotas,
        queues=(QueueSpec("a"),),
        workloads=(_w(1, "a", 2, "Admitted"), _w(2, "a", 3)),
        nodes=NODES,
    )
    over = {"a": Resources({"cpu": 5}), "root": Resources({"cpu": 5})}
    admitted = Admission(2, "a", "a", {"n": Resources({"cpu": 3})}, (("main", "n", 1),))
    assert check_cycle(snap, _result(admissions=(admitted,), used=over)) == [
        "an admission took a to 5 cpu, past its max 4"
    ]
    # The same usage without an admission into a: not this cycle's doing.
    assert check_cycle(snap, _result(used=over)) == []
    # An admission of a workload the snapshot does not hold is not charged to a.
    ghost = Admission(99, "a", "a", {"n": Resources({"cpu": 3})}, (("main", "n", 1),))
    assert check_cycle(snap, _result(admissions=(ghost,), used=over)) == []


def test_children_get_no_more_than_their_parent_keeps_after_its_own_work() -> None:
    quotas = (QuotaNode("root"), QuotaNode("a", "root"))
    given = {"root": Resources({"cpu": 8}), "a": Resources({"cpu": 6})}
    alone = Snapshot(now=EPOCH, quotas=quotas, queues=(QueueSpec("a"),), workloads=(), nodes=NODES)
    assert check_cycle(alone, _result(runtime_quota=given)) == []
    # 3 cpu of the root's own (running and waiting) work leave 5 for its children.
    own = (_w(1, "root", 2, "Running"), _w(2, "root", 1), _w(3, "root", 4, "Succeeded"))
    busy = Snapshot(now=EPOCH, quotas=quotas, queues=(QueueSpec("a"),), workloads=own, nodes=NODES)
    assert check_cycle(busy, _result(runtime_quota=given)) == [
        "children of root get 6 cpu, more than the 5 it has"
    ]
