"""The dashboard's test world: two tenants with a person in every role."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.test import Client

from queueing import actions
from queueing.choices import Role
from queueing.models import Queue, Quota, Tenant
from tests import builders
from tests.builders import SYSTEM


@dataclass
class Site:
    world: builders.World
    tenant: Tenant
    other: Tenant
    quota: Quota
    queue: Queue
    other_queue: Queue
    users: dict[str, Any]

    def client(self, who: str) -> Client:
        client = Client()
        client.force_login(self.users[who])
        return client


def make_site() -> Site:
    """team-a (ada admin, mem member, vic viewer) and team-b (bob admin); root is cluster admin.

    Every user's password is "pw-<username>".
    """
    w = builders.world(root_cpu="32", quota_min={"cpu": "8"}, quota_max={"cpu": "16"})
    other = actions.create_tenant(SYSTEM, name="team-b", display_name="Team B")
    other_quota = actions.create_quota(
        SYSTEM,
        name="team-b-q",
        tenant=other,
        parent=w.root,
        min={"cpu": "4"},
        max={"cpu": "16"},
        namespaces=["team-b"],
    )
    assert other_quota.default_queue is not None
    users = {
        "root": builders.user("root", superuser=True),
        "ada": builders.user("ada", tenant=w.tenant, role=Role.ADMIN),
        "mem": builders.user("mem", tenant=w.tenant, role=Role.MEMBER),
        "vic": builders.user("vic", tenant=w.tenant, role=Role.VIEWER),
        "bob": builders.user("bob", tenant=other, role=Role.ADMIN),
    }
    return Site(
        world=w,
        tenant=w.tenant,
        other=other,
        quota=w.quota,
        queue=w.queue,
        other_queue=other_quota.default_queue,
        users=users,
    )
