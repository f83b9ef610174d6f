"""Fixtures of the API tests: two tenants, users of every role, a token each."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.core.cache import cache
from django.db import transaction
from rest_framework.test import APIClient

from portal import tokens
from queueing import actions
from queueing.choices import Role
from queueing.cluster import set_cluster
from queueing.models import Queue, Quota, Tenant, Workload
from tests import builders
from tests.builders import SYSTEM

# Who calls, from least to most allowed. "read_only" is a cluster admin's read-only token;
# "outsider" is an admin of the other tenant.
PERSONAS = (
    "anonymous",
    "outsider",
    "viewer",
    "member",
    "tenant_admin",
    "cluster_admin",
    "read_only",
)


@dataclass
class ApiWorld:
    """Tenant team-a (every persona's home) and team-b (the outsider's), with quotas
    cluster > team-a-q > {team-a-train, team-a-dev} and cluster > team-b-q > team-b-train."""

    w: builders.World
    tenant: Tenant
    other: Tenant
    entitlement: Quota
    train: Quota
    dev: Quota
    queue: Queue
    other_quota: Quota
    other_queue: Queue
    workload: Workload
    other_workload: Workload
    users: dict[str, Any]
    keys: dict[str, str] = field(default_factory=dict)

    def client(self, persona: str) -> APIClient:
        client = APIClient()
        if persona != "anonymous":
            client.credentials(HTTP_AUTHORIZATION=f"Token {self.keys[persona]}")
        return client

    def call(self, persona: str, method: str, url: str, data: Any = None, **extra: Any) -> Any:
        client = self.client(persona)
        return getattr(client, method.lower())(url, data, format="json", **extra)

    def attempt(self, persona: str, method: str, url: str, data: Any = None, **extra: Any) -> Any:
        """Call, then roll back whatever the call changed: personas share one world."""
        with transaction.atomic():
            response = self.call(persona, method, url, data, **extra)
            transaction.set_rollback(True)
        return response


def build_api_world() -> ApiWorld:
    w = builders.world(root_cpu="32", quota_min={"cpu": "16"}, quota_max={"cpu": "32"})
    tenant, entitlement = w.tenant, w.quota
    # The entitlement quota gets children; its own default queue is the tenant's queue.
    train = actions.create_quota(
        SYSTEM, name="team-a-train", tenant=tenant, parent=entitlement,
        min={"cpu": "8"}, max={"cpu": "16"}, namespaces=["team-a-train"],
    )  # fmt: skip
    dev = actions.create_quota(
        SYSTEM, name="team-a-dev", tenant=tenant, parent=entitlement,
        min={"cpu": "4"}, max={"cpu": "8"},
    )  # fmt: skip
    other = actions.create_tenant(SYSTEM, name="team-b")
    other_entitlement = actions.create_quota(
        SYSTEM, name="team-b-q", tenant=other, parent=w.root, min={"cpu": "8"}, max={"cpu": "32"}
    )
    other_quota = actions.create_quota(
        SYSTEM, name="team-b-train", tenant=other, parent=other_entitlement,
        min={"cpu": "4"}, max={"cpu": "16"}, namespaces=["team-b-train"],
    )  # fmt: skip
    assert train.default_queue is not None
    assert other_quota.default_queue is not None
    workload = builders.submit(w, "a-job-1", quota=train)
    other_workload = builders.submit(w, "b-job-1", quota=other_quota)
    users = {
        "viewer": builders.user("vera", tenant=tenant, role=Role.VIEWER),
        "member": builders.user("mo", tenant=tenant, role=Role.MEMBER),
        "tenant_admin": builders.user("tia", tenant=tenant, role=Role.ADMIN),
        "outsider": builders.user("otto", tenant=other, role=Role.ADMIN),
        "cluster_admin": builders.user("root", superuser=True),
    }
    world = ApiWorld(
        w=w,
        tenant=tenant,
        other=other,
        entitlement=entitlement,
        train=train,
        dev=dev,
        queue=train.default_queue,
        other_quota=other_quota,
        other_queue=other_quota.default_queue,
        workload=workload,
        other_workload=other_workload,
        users=users,
    )
    for persona, user in users.items():
        world.keys[persona] = tokens.create_token(SYSTEM, user).key
    world.keys["read_only"] = tokens.create_token(
        SYSTEM, users["cluster_admin"], read_only=True
    ).key
    return world


@pytest.fixture(autouse=True)
def _fast_passwords(settings: Any) -> None:
    """Users are made by the dozen here; the production hasher would take seconds."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def api(db: None) -> Iterator[ApiWorld]:
    world = build_api_world()
    set_cluster(world.w.cluster)
    yield world
    set_cluster(None)


@pytest.fixture(scope="module")
def shared_api_world(django_db_setup: None, django_db_blocker: Any) -> Iterator[ApiWorld]:
    """The ApiWorld of ``shared_api``: built once per module inside a transaction that is
    rolled back after the module's last test."""
    with django_db_blocker.unblock(), transaction.atomic():
        world = build_api_world()
        yield world
        transaction.set_rollback(True)


@pytest.fixture
def shared_api(shared_api_world: ApiWorld, db: None) -> Iterator[ApiWorld]:
    """``api`` for modules whose tests change the world only in the database (their API
    calls, their own rows): the module's one world, whose rows each test reads afresh.
    Each test runs in a transaction of its own (a savepoint inside the module's), rolled
    back after it, as with ``api``; building the world for each test cost more than most
    of these tests. A module opts in with an ``api`` fixture that returns this one."""
    world = shared_api_world
    rows = [
        *(world.tenant, world.other, world.entitlement, world.train, world.dev, world.queue),
        *(world.other_quota, world.other_queue, world.workload, world.other_workload),
        *(world.w.root, world.w.tenant, world.w.quota, world.w.queue),
        *world.users.values(),
    ]
    for row in rows:
        row.refresh_from_db()
    set_cluster(world.w.cluster)
    yield world
    set_cluster(None)


@pytest.fixture(autouse=True)
def _fresh_throttle_counts(settings: Any) -> Iterator[None]:
    """Throttle counts live in the cache; start each test from zero, with room to spare."""
    cache.clear()
    settings.KQ_API_RATES = {"token": "100000/min", "anon": "100000/min"}
    yield
    cache.clear()
