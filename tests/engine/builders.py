"""Small fluent-ish builders for engine tests (Kueue's MakeClusterQueue(...).Obj() habit)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from queueing.engine.invariants import check_cycle
from queueing.engine.resources import Resources
from queueing.engine.simulator import Arrival, Scenario, simulate
from queueing.engine.types import (
    CycleResult,
    EngineConfig,
    NodeSpec,
    PodSet,
    QueueSpec,
    QuotaNode,
    Snapshot,
    Taint,
    Toleration,
    WorkloadSpec,
)

GI = 2**30
EPOCH = 1_700_000_000.0


def res(**kw: int) -> Resources:
    """Resources with friendly names: cpu in cores, mem in GiB, gpu as count."""
    out: dict[str, int] = {}
    for k, v in kw.items():
        if k == "cpu":
            out["cpu"] = int(v * 1000)
        elif k == "mem":
            out["memory"] = int(v * GI)
        elif k == "gpu":
            out["nvidia.com/gpu"] = int(v)
        else:
            out[k] = int(v)
    return Resources(out)


def quota(
    name: str,
    parent: str | None = None,
    *,
    min: Mapping[str, int] | None = None,
    max: Mapping[str, int] | None = None,
    weight: Mapping[str, int] | None = None,
    lend: bool = True,
    fair_weight: float = 1.0,
) -> QuotaNode:
    return QuotaNode(
        name=name,
        parent=parent,
        min=Resources(min or {}),
        max=dict(max or {}),
        shared_weight=dict(weight or {}),
        allow_lent=lend,
        fair_weight=fair_weight,
    )


def node(
    name: str,
    alloc: Mapping[str, int],
    *,
    reserved: Mapping[str, int] | None = None,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    unschedulable: bool = False,
) -> NodeSpec:
    return NodeSpec(
        name=name,
        allocatable=Resources(alloc),
        reserved=Resources(reserved or {}),
        labels=dict(labels or {}),
        taints=tuple(taints),
        unschedulable=unschedulable,
    )


def podset(
    count: int,
    requests: Mapping[str, int],
    *,
    name: str = "main",
    selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Toleration] = (),
) -> PodSet:
    return PodSet(
        name=name,
        count=count,
        requests=Resources(requests),
        node_selector=dict(selector or {}),
        tolerations=tuple(tolerations),
    )


def workload(
    wid: int,
    quota: str,
    queue: str | None = None,
    *,
    req: Mapping[str, int] | None = None,
    count: int = 1,
    pod_sets: Sequence[PodSet] | None = None,
    priority: int = 0,
    ts: float | None = None,
    phase: str = "Pending",
    assignment: Mapping[str, Mapping[str, int]] | None = None,
    **extra: Any,
) -> WorkloadSpec:
    if pod_sets is None:
        pod_sets = (podset(count, req or {}),)
    assign = {n: Resources(r) for n, r in (assignment or {}).items()}
    return WorkloadSpec(
        id=wid,
        name=f"w{wid}",
        quota=quota,
        queue=queue or quota,
        priority=priority,
        queue_order_at=float(wid if ts is None else ts),
        pod_sets=tuple(pod_sets),
        phase=phase,
        assignment=assign,
        **extra,
    )


def running(
    wid: int,
    quota: str,
    node_name: str,
    *,
    req: Mapping[str, int],
    count: int = 1,
    queue: str | None = None,
    priority: int = 0,
    **extra: Any,
) -> WorkloadSpec:
    """A Running workload holding ``count * req`` on one node."""
    total = Resources(req) * count
    extra.setdefault("admitted_at", 0.0)
    extra.setdefault("started_at", 0.0)
    return workload(
        wid,
        quota,
        queue,
        req=req,
        count=count,
        priority=priority,
        phase=extra.pop("phase", "Running"),
        assignment={node_name: total},
        **extra,
    )


def snapshot(
    *,
    quotas: Sequence[QuotaNode],
    nodes: Sequence[NodeSpec],
    workloads: Sequence[WorkloadSpec] = (),
    queues: Sequence[QueueSpec] | None = None,
    now: float = 1000.0,
    config: EngineConfig | None = None,
    **extra: Any,
) -> Snapshot:
    if queues is None:
        names = sorted({w.queue for w in workloads} | {q.name for q in quotas})
        queues = [QueueSpec(name=n) for n in names]
    return Snapshot(
        now=now,
        quotas=tuple(quotas),
        queues=tuple(queues),
        workloads=tuple(workloads),
        nodes=tuple(nodes),
        config=config or EngineConfig(fair_share_mode="instant"),
        **extra,
    )


def arrival(
    wid: int,
    quota: str,
    at: float,
    pods: int,
    per_pod: Mapping[str, int],
    runtime: float,
    *,
    priority: int = 0,
) -> Arrival:
    """A job of ``pods`` pods of ``per_pod`` each in queue ``quota`` (the queue is named
    as its quota), arriving ``at`` seconds after EPOCH and running ``runtime`` s (which
    it also declares)."""
    w = WorkloadSpec(
        id=wid,
        name=f"{quota}-{wid}",
        quota=quota,
        queue=quota,
        priority=priority,
        queue_order_at=EPOCH + at,
        pod_sets=(PodSet("w", pods, Resources(per_pod)),),
        expected_runtime_s=runtime,
    )
    return Arrival(at, w, quota, runtime)


@dataclass
class Watched:
    """What ``simulate_checked`` saw: each workload's first admission (seconds after
    EPOCH) and every preemption's message."""

    started: dict[int, float] = field(default_factory=dict)
    evicted: list[str] = field(default_factory=list)


def simulate_checked(
    sc: Scenario,
    *,
    cycle_interval_s: float = 5.0,
    each: Callable[[Snapshot, CycleResult], None] | None = None,
) -> Watched:
    """``sc`` simulated (instant fair share, from EPOCH), every cycle held to the
    engine's invariants (``check_cycle``); ``each`` sees every cycle too."""
    seen = Watched()

    class Watch:
        def before(self, snap: Snapshot) -> Snapshot:
            return snap

        def after(self, snap: Snapshot, result: CycleResult) -> None:
            assert check_cycle(snap, result) == []
            for a in result.admissions:
                seen.started.setdefault(a.workload_id, snap.now - EPOCH)
            seen.evicted.extend(p.message for p in result.preemptions)
            if each is not None:
                each(snap, result)

    simulate(
        sc,
        cycle_interval_s=cycle_interval_s,
        config=EngineConfig(fair_share_mode="instant"),
        epoch=EPOCH,
        observer=Watch(),
    )
    return seen
