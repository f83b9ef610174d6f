"""Every endpoint, every method, every persona: the permission matrix of issue 6, item 4.

Viewers read; members submit and cancel in their tenant; tenant admins edit their queues
and the quotas of their subtree; cluster admins do everything; another tenant's object is
a 404; a read-only token only reads.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from portal import overview, tokens
from portal.models import APIToken
from queueing import actions
from queueing.choices import Role
from queueing.models import AuditEvent, CycleRun, Membership, Queue, Quota, SimNode, Tenant
from tests import builders
from tests.builders import SYSTEM
from tests.portal.api.base import (
    ADMINS,
    CLUSTER_ADMIN,
    MEMBERS,
    READERS,
    SIGNED_IN,
    CreateObject,
    DeleteObject,
    GetObject,
    ListObjects,
    ReadOnlyEndpoint,
    StandardEndpoint,
    matrix,
    outcomes,
)
from tests.portal.api.conftest import PERSONAS, ApiWorld

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(shared_api: ApiWorld) -> ApiWorld:
    return shared_api  # one world for the module (tests/portal/api/conftest.py)


class TestTenantAPI(StandardEndpoint):
    basename = "tenant"
    create_expect = matrix(201, CLUSTER_ADMIN)
    update_expect = matrix(200, CLUSTER_ADMIN, hidden=("outsider",))
    delete_expect = matrix(204, CLUSTER_ADMIN, hidden=("outsider",))

    def target(self, api: ApiWorld) -> Tenant:
        return api.tenant

    def hidden_from_team_a(self, api: ApiWorld) -> Tenant:
        return api.other

    def add_more(self, api: ApiWorld) -> None:
        for name in ("team-x", "team-y", "team-z"):
            tenant = actions.create_tenant(SYSTEM, name=name)
            actions.set_membership(SYSTEM, tenant, api.users["member"], Role.VIEWER)

    def create_data(self, api: ApiWorld) -> dict[str, Any]:
        return {"name": "team-new", "display_name": "New team"}

    def update_data(self, api: ApiWorld) -> dict[str, Any]:
        return {"display_name": "Team A", "description": "Vision research"}

    def delete_target(self, api: ApiWorld) -> Tenant:
        tenant = actions.create_tenant(SYSTEM, name="team-empty")
        for persona in ("viewer", "member", "tenant_admin"):
            role = {"viewer": Role.VIEWER, "member": Role.MEMBER}.get(persona, Role.ADMIN)
            actions.set_membership(SYSTEM, tenant, api.users[persona], role)
        return tenant

    def test_tenants_are_addressed_by_name_too(self, api: ApiWorld) -> None:
        response = api.call("viewer", "get", "/api/v1/tenants/team-a/")
        assert response.json()["role"] == "viewer"
        assert api.call("viewer", "get", "/api/v1/tenants/team-b/").status_code == 404


class TestMembershipAPI(StandardEndpoint):
    basename = "membership"
    create_expect = matrix(201, ADMINS, outsider=400)

    def target(self, api: ApiWorld) -> Membership:
        return Membership.objects.get(user=api.users["viewer"])

    def hidden_from_team_a(self, api: ApiWorld) -> Membership:
        return Membership.objects.get(user=api.users["outsider"])

    def add_more(self, api: ApiWorld) -> None:
        for name in ("x1", "x2", "x3"):
            builders.user(name, tenant=api.tenant, role=Role.VIEWER)

    def create_data(self, api: ApiWorld) -> dict[str, Any]:
        get_user_model().objects.get_or_create(username="newbie")
        return {"tenant": "team-a", "user": "newbie", "role": "viewer"}

    def update_data(self, api: ApiWorld) -> dict[str, Any]:
        return {"role": "member"}

    def test_a_second_membership_is_refused(self, api: ApiWorld) -> None:
        data = {"tenant": "team-a", "user": "vera", "role": "admin"}
        response = api.call("tenant_admin", "post", self.list_url(), data)
        assert response.status_code == 400
        assert "already a member" in response.json()["fields"]["user"][0]

    def test_tenant_and_user_cannot_change(self, api: ApiWorld) -> None:
        url = self.detail_url(self.target(api))
        response = api.call("cluster_admin", "patch", url, {"user": "mo"})
        assert response.status_code == 400
        assert response.json()["fields"] == {"user": ["user cannot be changed."]}


class TestQuotaAPI(StandardEndpoint):
    basename = "quota"
    create_expect = matrix(201, ADMINS, outsider=400)
    max_list_queries = 6

    def target(self, api: ApiWorld) -> Quota:
        return api.dev

    def hidden_from_team_a(self, api: ApiWorld) -> Quota:
        return api.other_quota

    def add_more(self, api: ApiWorld) -> None:
        for name in ("team-a-x", "team-a-y", "team-a-z"):
            actions.create_quota(
                SYSTEM, name=name, tenant=api.tenant, parent=api.dev, max={"cpu": "1"}
            )

    def create_data(self, api: ApiWorld) -> dict[str, Any]:
        return {
            "name": "team-a-new",
            "parent": "team-a-q",
            "min": {"cpu": "1"},
            "max": {"cpu": "4", "memory": "8Gi"},
        }

    def update_data(self, api: ApiWorld) -> dict[str, Any]:
        return {"max": {"cpu": "6"}, "shared_weight": {"cpu": "2"}}

    def test_cluster_quotas_are_visible_to_every_tenant(self, api: ApiWorld) -> None:
        url = self.detail_url(api.w.root)
        assert outcomes(api, "get", url) == matrix(200, SIGNED_IN)

    def test_a_tenants_entitlement_is_for_cluster_admins_to_change(self, api: ApiWorld) -> None:
        url = self.detail_url(api.entitlement)
        expected = matrix(200, CLUSTER_ADMIN, hidden=("outsider",))
        assert outcomes(api, "patch", url, {"max": {"cpu": "30"}}) == expected

    def test_tenant_admins_create_only_inside_their_subtree(self, api: ApiWorld) -> None:
        data = {"name": "rogue", "parent": "cluster", "tenant": "team-a", "min": {"cpu": "1"}}
        expected = matrix(201, CLUSTER_ADMIN, outsider=400)
        assert outcomes(api, "post", self.list_url(), data) == expected

    def test_tree_nests_what_you_may_see(self, api: ApiWorld) -> None:
        assert outcomes(api, "get", reverse("api:quota-tree")) == matrix(200, SIGNED_IN)
        tree = api.call("viewer", "get", reverse("api:quota-tree")).json()
        assert [node["name"] for node in tree] == ["cluster"]
        (team_a,) = tree[0]["children"]
        assert team_a["name"] == "team-a-q"
        assert [c["name"] for c in team_a["children"]] == ["team-a-dev", "team-a-train"]
        everything = api.call("cluster_admin", "get", reverse("api:quota-tree")).json()
        assert [c["name"] for c in everything[0]["children"]] == ["team-a-q", "team-b-q"]


def test_tree_and_timeline_query_counts_do_not_grow(api: ApiWorld) -> None:
    from tests.portal.api.base import count_queries

    client = api.client("member")
    tree = reverse("api:quota-tree")
    events = reverse("api:workload-events", kwargs={"pk": api.workload.pk})
    client.get(tree)
    before = (count_queries(lambda: client.get(tree)), count_queries(lambda: client.get(events)))
    for name in ("team-a-x", "team-a-y", "team-a-z"):
        actions.create_quota(SYSTEM, name=name, tenant=api.tenant, parent=api.dev, max={"cpu": "1"})
    url = f"/api/v1/workloads/{api.workload.pk}/cancel/"
    assert client.post(url, {}, format="json").status_code == 200
    after = (count_queries(lambda: client.get(tree)), count_queries(lambda: client.get(events)))
    assert after == before


class TestQueueAPI(StandardEndpoint):
    basename = "queue"
    create_expect = matrix(201, ADMINS, outsider=400)
    max_list_queries = 6

    def target(self, api: ApiWorld) -> Queue:
        return api.queue

    def hidden_from_team_a(self, api: ApiWorld) -> Queue:
        return api.other_queue

    def add_more(self, api: ApiWorld) -> None:
        for name in ("qa", "qb", "qc"):
            actions.create_queue(SYSTEM, tenant=api.tenant, name=name)
        builders.submit(api.w, "more-1", quota=api.train, queue=Queue.objects.get(name="qa"))

    def create_data(self, api: ApiWorld) -> dict[str, Any]:
        return {"name": "team-a-extra", "tenant": "team-a", "policy": "Block", "priority": 3}

    def update_data(self, api: ApiWorld) -> dict[str, Any]:
        return {"priority": 5, "policy": "Intelligent", "priority_threshold": 7000}

    def delete_target(self, api: ApiWorld) -> Queue:
        assert api.dev.default_queue is not None
        return api.dev.default_queue

    def test_pending_is_the_visibility_list(self, api: ApiWorld) -> None:
        url = reverse("api:queue-pending", kwargs={"pk": api.queue.pk})
        assert outcomes(api, "get", url) == matrix(200, READERS, hidden=("outsider",))
        rows = api.call("viewer", "get", url).json()["results"]
        assert [row["name"] for row in rows] == ["a-job-1"]
        assert {"position", "global_position", "eta_p50", "eta_p90", "reason"} <= set(rows[0])

    def test_pending_query_count_does_not_grow(self, api: ApiWorld) -> None:
        from tests.portal.api.base import count_queries

        url = reverse("api:queue-pending", kwargs={"pk": api.queue.pk})
        client = api.client("member")
        client.get(url)
        before = count_queries(lambda: client.get(url))
        for i in range(5):
            builders.submit(api.w, f"wait-{i}", quota=api.train)
        assert count_queries(lambda: client.get(url)) == before
        assert len(client.get(url).json()["results"]) == 6

    def test_counts_and_quotas_of_a_queue(self, api: ApiWorld) -> None:
        row = api.call("viewer", "get", self.detail_url(api.queue)).json()
        assert (row["pending"], row["admitted"], row["running"]) == (1, 0, 0)
        assert row["quotas"] == ["team-a-train"]

    def test_fifo_is_block(self, api: ApiWorld) -> None:
        data = {"name": "legacy", "tenant": "team-a", "policy": "FIFO"}
        response = api.call("tenant_admin", "post", self.list_url(), data)
        assert response.json()["policy"] == "Block"


class TestWorkloadAPI(ListObjects, GetObject, CreateObject, ReadOnlyEndpoint):
    basename = "workload"
    audit_verbs = {"create": "submit"}
    create_expect = matrix(201, MEMBERS, outsider=400)
    max_list_queries = 5

    def target(self, api: ApiWorld) -> Any:
        return api.workload

    def hidden_from_team_a(self, api: ApiWorld) -> Any:
        return api.other_workload

    def add_more(self, api: ApiWorld) -> None:
        for i in range(3):
            builders.submit(api.w, f"more-{i}", quota=api.train)

    def create_data(self, api: ApiWorld) -> dict[str, Any]:
        return {
            "name": "new-job",
            "queue": "team-a-train",
            "priority": 5000,
            "expected_runtime_s": 120,
            "pod_sets": [{"count": 2, "requests": {"cpu": "500m", "memory": "1Gi"}}],
        }

    def test_writes_are_not_allowed(self, api: ApiWorld) -> None:
        url = self.detail_url(api.workload)
        for method in ("put", "patch", "delete"):
            assert api.attempt("cluster_admin", method, url, {}).status_code == 405

    def test_cancel_permissions(self, api: ApiWorld) -> None:
        url = reverse("api:workload-cancel", kwargs={"pk": api.workload.pk})
        expected = matrix(200, MEMBERS, hidden=("outsider",))
        assert outcomes(api, "post", url, {"reason": "not needed"}) == expected

    def test_events_permissions(self, api: ApiWorld) -> None:
        url = reverse("api:workload-events", kwargs={"pk": api.workload.pk})
        assert outcomes(api, "get", url) == matrix(200, READERS, hidden=("outsider",))


class TestCycleRunAPI(ListObjects, GetObject, ReadOnlyEndpoint):
    basename = "cyclerun"
    get_expect = matrix(200, SIGNED_IN)

    def target(self, api: ApiWorld) -> CycleRun:
        return CycleRun.objects.create(root="cluster", started_at=timezone.now(), admitted=2)

    def list_params(self, api: ApiWorld) -> dict[str, Any]:
        self.target(api)
        return {}

    def add_more(self, api: ApiWorld) -> None:
        for _ in range(3):
            self.target(api)


class TestAuditEventAPI(ListObjects, GetObject, ReadOnlyEndpoint):
    basename = "auditevent"

    def target(self, api: ApiWorld) -> AuditEvent:
        return AuditEvent.objects.filter(tenant=api.tenant).latest("id")

    def hidden_from_team_a(self, api: ApiWorld) -> AuditEvent:
        return AuditEvent.objects.filter(tenant=api.other).latest("id")

    def add_more(self, api: ApiWorld) -> None:
        for name in ("qa", "qb", "qc"):
            actions.create_queue(SYSTEM, tenant=api.tenant, name=name)

    def test_events_of_no_tenant_are_for_cluster_admins(self, api: ApiWorld) -> None:
        event = AuditEvent.objects.filter(tenant=None, object_type="simnode").latest("id")
        expected = matrix(200, ("cluster_admin", "read_only"), hidden=SIGNED_IN[:-2])
        assert outcomes(api, "get", self.detail_url(event)) == expected


class TestAPITokenAPI(ListObjects, GetObject, CreateObject, DeleteObject):
    """Tokens are personal: nobody sees another's, not even a cluster admin."""

    basename = "apitoken"
    audit_object = "token"
    audit_verbs = {"delete": "revoke"}
    answered_once = ("key",)
    others = ("outsider", "viewer", "member", "cluster_admin", "read_only")
    get_expect = matrix(200, ("tenant_admin",), hidden=others)
    create_expect = matrix(201, (*SIGNED_IN[:-1], "cluster_admin"))
    delete_expect = matrix(204, ("tenant_admin",), hidden=others, read_only=403)

    def target(self, api: ApiWorld) -> APIToken:
        return APIToken.objects.filter(user=api.users["tenant_admin"]).get()

    def add_more(self, api: ApiWorld) -> None:
        for user in api.users.values():
            for _ in range(3):
                tokens.create_token(SYSTEM, user)

    def create_data(self, api: ApiWorld) -> dict[str, Any]:
        return {"name": "ci pipeline", "read_only": True}

    def test_list_leaves_out_other_tenants_objects(self, api: ApiWorld) -> None:
        """Not tenants here but people: each caller lists exactly their own tokens."""
        for persona in ("viewer", "member", "tenant_admin", "outsider", "cluster_admin"):
            own = set(APIToken.objects.filter(user=api.users[persona]).values_list("pk", flat=True))
            assert own, persona
            assert {row["id"] for row in self.rows(api, persona)} == own, persona


class TestSimNodeAPI(StandardEndpoint):
    basename = "simnode"
    get_expect = matrix(200, SIGNED_IN)
    create_expect = matrix(201, CLUSTER_ADMIN)
    update_expect = matrix(200, CLUSTER_ADMIN)
    delete_expect = matrix(204, CLUSTER_ADMIN)

    def target(self, api: ApiWorld) -> SimNode:
        return SimNode.objects.get(name="node-1")

    def add_more(self, api: ApiWorld) -> None:
        for i in range(3):
            builders.node(f"extra-{i}")

    def create_data(self, api: ApiWorld) -> dict[str, Any]:
        return {
            "name": "gpu-1",
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8"},
            "labels": {"koord-queue/pool": "gpu"},
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        }

    def update_data(self, api: ApiWorld) -> dict[str, Any]:
        return {"unschedulable": True, "reserved": {"cpu": "1"}}

    def test_there_are_no_sim_nodes_in_kubernetes_mode(self, api: ApiWorld, settings: Any) -> None:
        settings.KQ_CLUSTER = "kubernetes"
        response = api.call("cluster_admin", "get", self.list_url())
        assert response.status_code == 404


class TestClusterAPI:
    def test_permissions(self, api: ApiWorld) -> None:
        url = reverse("api:cluster")
        assert outcomes(api, "get", url) == matrix(200, SIGNED_IN)
        assert api.attempt("cluster_admin", "post", url, {}).status_code == 405

    def test_capacity_usage_and_quotas(self, api: ApiWorld) -> None:
        body = api.call("viewer", "get", reverse("api:cluster")).json()
        assert body["mode"] == "simulated"
        assert body["capacity"]["allocatable"] == {"cpu": "16", "memory": "64Gi"}
        names = {q["name"] for q in body["quotas"]}
        assert names == {"cluster", "team-a-q", "team-a-train", "team-a-dev"}
        by_name = {q["name"]: q for q in body["quotas"]}
        assert by_name["team-a-train"]["pending"] == {"cpu": "1"}
        assert by_name["team-a-q"]["pending"] == {"cpu": "1"}  # rolled up the tree
        assert by_name["cluster"]["pending"] == {"cpu": "2"}  # both tenants, in total only

    def test_free_room_kept_for_waiting_work_is_counted_without_naming_it(
        self, api: ApiWorld
    ) -> None:
        nodes = sorted(n.name for n in overview.node_source())
        CycleRun.objects.create(
            root="cluster",
            started_at=timezone.now(),
            holds=[
                {
                    "node": nodes[0],
                    "workload_id": 424242,
                    "kind": "drain",
                    "resources": {"cpu": 3000},
                },
                {
                    "node": nodes[-1],
                    "workload_id": 434343,
                    "kind": "reservation",
                    "resources": {"cpu": 1500, "memory": 2**30},
                },
            ],
        )
        body = api.call("viewer", "get", reverse("api:cluster")).json()
        assert body["capacity"]["kept"] == {"cpu": "4500m", "memory": "1Gi"}
        # A tenant's reader learns how much is kept, never for which workload.
        assert "424242" not in json.dumps(body)
        assert "434343" not in json.dumps(body)

    def test_runtime_quota_is_the_one_the_cluster_page_shows(self, api: ApiWorld) -> None:
        from portal.views.cluster import cluster_context
        from queueing.events import iso
        from queueing.models import UsageSample

        started = timezone.now()
        CycleRun.objects.create(root="cluster", started_at=started, admitted=0)
        Quota.objects.filter(pk=api.train.pk).update(runtime={"cpu": 3000})
        # The history chart's sample disagrees on purpose: neither view may read it.
        UsageSample.objects.create(
            quota=api.train, at=started, decayed={}, used={}, runtime={"cpu": 9000}
        )
        body = api.call("viewer", "get", reverse("api:cluster")).json()
        by_name = {q["name"]: q for q in body["quotas"]}
        assert by_name["team-a-train"]["runtime"] == {"cpu": "3"}
        assert by_name["team-a-train"]["runtime_at"] == iso(started)
        assert (by_name["cluster"]["runtime"], by_name["cluster"]["runtime_at"]) == ({}, None)
        page = {row.quota.name: row for row in cluster_context(1)["tree"]}
        assert page["team-a-train"].runtime == {"cpu": 3000}
        assert page["team-a-train"].pending == {"cpu": 1000}
        assert page["cluster"].pending == {"cpu": 2000}  # the API's numbers, same source

    def test_query_count_does_not_grow(self, api: ApiWorld) -> None:
        from tests.portal.api.base import count_queries

        client = api.client("member")
        client.get(reverse("api:cluster"))
        before = count_queries(lambda: client.get(reverse("api:cluster")))
        for i in range(5):
            builders.submit(api.w, f"more-{i}", quota=api.train, cpu=str(i + 1))
        assert count_queries(lambda: client.get(reverse("api:cluster"))) == before


class TestMeAPI:
    def test_permissions_and_content(self, api: ApiWorld) -> None:
        url = reverse("api:me")
        assert outcomes(api, "get", url) == matrix(200, SIGNED_IN)
        me = api.call("tenant_admin", "get", url).json()
        assert me["username"] == "tia"
        assert me["cluster_admin"] is False
        assert me["roles"] == {"team-a": "admin"}
        assert me["token"]["read_only"] is False
        ro = api.call("read_only", "get", url).json()
        assert ro["cluster_admin"] is True
        assert ro["token"]["read_only"] is True
        assert ro["roles"] == {"team-a": "admin", "team-b": "admin"}


class TestSchemaAndDocs:
    def test_public(self, db: None) -> None:
        from rest_framework.test import APIClient

        client = APIClient()
        assert client.get("/api/schema/").status_code == 200
        docs = client.get("/api/docs/")
        assert docs.status_code == 200
        assert b"drf_spectacular_sidecar/swagger-ui-dist" in docs.content  # local assets
        assert b"cdn." not in docs.content


def test_every_route_is_covered_by_a_test_class() -> None:
    """A new endpoint without permission tests fails here."""
    from portal.api.urls import router

    tested = {
        cls.basename
        for cls in globals().values()
        if isinstance(cls, type) and cls.__name__.startswith("Test") and hasattr(cls, "basename")
    }
    assert {basename for _, _, basename in router.registry} == tested


def test_personas_are_all_distinct(api: ApiWorld) -> None:
    assert len(set(api.keys.values())) == len(PERSONAS) - 1
    assert Membership.objects.filter(tenant=api.tenant).count() == 3
