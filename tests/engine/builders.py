"""Small fluent-ish builders for engine tests (Kueue's MakeClusterQueue(...).Obj() habit)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from queueing.engine.resources import Resources
from queueing.engine.types import (
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
