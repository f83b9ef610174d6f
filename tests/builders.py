"""Small builders for tests: a world of tenants, quotas, queues and nodes in a few lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model

from queueing import actions
from queueing.actions import Actor
from queueing.choices import Role
from queueing.cluster.simulated import SimulatedCluster
from queueing.models import Queue, Quota, Tenant

SYSTEM = Actor.system()


class Clock:
    """A clock tests move by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@dataclass
class World:
    root: Quota
    tenant: Tenant
    quota: Quota
    queue: Queue
    cluster: SimulatedCluster
    clock: Clock
    extra: dict[str, Any] = field(default_factory=dict)


def user(
    username: str, *, tenant: Tenant | None = None, role: str = Role.VIEWER, superuser: bool = False
) -> Any:
    users = get_user_model()
    if superuser:
        account = users.objects.create_superuser(
            username, f"{username}@example.invalid", "pw-" + username
        )
    else:
        account = users.objects.create_user(
            username, f"{username}@example.invalid", "pw-" + username
        )
    if tenant is not None:
        actions.set_membership(SYSTEM, tenant, account, role)
    return account


def node(name: str, cpu: str = "8", memory: str = "32Gi", **extra: Any) -> None:
    """A simulated node (the node view follows: queueing.actions.nodes)."""
    actions.upsert_sim_node(
        SYSTEM,
        name=name,
        allocatable={"cpu": cpu, "memory": memory, **extra.pop("alloc", {})},
        **extra,
    )


def tree(name: str, cpu: str = "8") -> Quota:
    """Another quota tree: a root ``name`` with one leaf ``name-q`` (min = max = ``cpu``)
    of a tenant ``name-t`` whose namespace is ``name-t``. Returns the leaf."""
    root = actions.create_quota(
        SYSTEM, name=name, tenant=None, parent=None, min={"cpu": cpu}, max={"cpu": cpu}
    )
    tenant = actions.create_tenant(SYSTEM, name=f"{name}-t")
    return actions.create_quota(
        SYSTEM,
        name=f"{name}-q",
        tenant=tenant,
        parent=root,
        min={"cpu": cpu},
        max={"cpu": cpu},
        namespaces=[f"{name}-t"],
    )


def tenant_quota(w: World, name: str, *, min: dict[str, str], max: dict[str, str]) -> Quota:
    """Another tenant ``name`` with a leaf quota ``name-q`` beside ``w``'s, under its root
    (namespace ``name``)."""
    tenant = actions.create_tenant(SYSTEM, name=name)
    return actions.create_quota(
        SYSTEM,
        name=f"{name}-q",
        tenant=tenant,
        parent=w.root,
        min=min,
        max=max,
        namespaces=[name],
    )


def world(
    *,
    nodes: int = 2,
    node_cpu: str = "8",
    root_cpu: str = "16",
    quota_min: dict[str, str] | None = None,
    quota_max: dict[str, str] | None = None,
    policy: str = "Priority",
    failure_rate: float = 0.0,
    tenant_name: str = "team-a",
) -> World:
    clock = Clock()
    cluster = SimulatedCluster(clock=clock, failure_rate=failure_rate)
    for i in range(nodes):
        node(f"node-{i + 1}", cpu=node_cpu)
    root = actions.create_quota(
        SYSTEM,
        name="cluster",
        tenant=None,
        parent=None,
        min={"cpu": root_cpu, "memory": "1Ti"},
        max={"cpu": root_cpu, "memory": "1Ti"},
    )
    tenant = actions.create_tenant(SYSTEM, name=tenant_name)
    quota = actions.create_quota(
        SYSTEM,
        name=f"{tenant_name}-q",
        tenant=tenant,
        parent=root,
        min=quota_min or {"cpu": "8"},
        max=quota_max or {"cpu": root_cpu},
        namespaces=[tenant_name],
        default_queue_policy=policy,
    )
    assert quota.default_queue is not None
    return World(
        root=root,
        tenant=tenant,
        quota=quota,
        queue=quota.default_queue,
        cluster=cluster,
        clock=clock,
    )


def submit(
    w: World,
    name: str,
    *,
    cpu: str = "1",
    count: int = 1,
    priority: int = 0,
    runtime: float = 60,
    quota: Quota | None = None,
    queue: Queue | None = None,
) -> Any:
    return actions.submit_workload(
        SYSTEM,
        tenant=None,
        quota=quota or w.quota,
        queue=queue,
        name=name,
        pod_sets=[{"count": count, "requests": {"cpu": cpu}}],
        priority=priority,
        expected_runtime_s=runtime,
    )
