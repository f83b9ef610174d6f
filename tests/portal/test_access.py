"""Roles on every page and action: other tenants' pages are 404, too-low roles 403."""

from __future__ import annotations

import pytest
from django.test import Client

from queueing.choices import Phase
from queueing.models import Membership, Queue, Quota, Workload
from tests.builders import submit


def tenant_pages(site, workload_id: int) -> list[str]:
    t, q = site.tenant.name, site.queue.name
    return [
        f"/tenants/{t}/",
        f"/tenants/{t}/queues/{q}/",
        f"/tenants/{t}/workloads/{workload_id}/",
    ]


def admin_pages(site) -> list[str]:
    t, q = site.tenant.name, site.queue.name
    return [
        f"/tenants/{t}/queues/new/",
        f"/tenants/{t}/queues/{q}/edit/",
        f"/tenants/{t}/quotas/new/",
        f"/tenants/{t}/members/",
        f"/tenants/{t}/audit/",
    ]


def test_anonymous_visitors_are_sent_to_log_in(site):
    workload = submit(site.world, "w")
    for url in [*tenant_pages(site, workload.pk), *admin_pages(site), "/", "/cluster/", "/audit/"]:
        response = Client().get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/"), url


@pytest.mark.parametrize("who", ["vic", "mem", "ada", "root"])
def test_members_read_their_tenant(site, who):
    workload = submit(site.world, "w")
    client = site.client(who)
    for url in tenant_pages(site, workload.pk):
        assert client.get(url).status_code == 200, url


@pytest.mark.parametrize(("who", "status"), [("vic", 403), ("mem", 403), ("ada", 200)])
def test_only_tenant_admins_open_admin_pages(site, who, status):
    client = site.client(who)
    for url in admin_pages(site):
        assert client.get(url).status_code == status, url


def test_another_tenants_pages_are_not_found(site):
    workload = submit(site.world, "w")
    bob = site.client("bob")
    for url in [*tenant_pages(site, workload.pk), *admin_pages(site)]:
        assert bob.get(url).status_code == 404, url
        assert bob.post(url, {}).status_code == 404, url
    url = f"/tenants/{site.tenant.name}/workloads/{workload.pk}/cancel/"
    assert bob.post(url).status_code == 404
    assert bob.get("/switch/", {"tenant": site.tenant.name}).status_code == 404
    # a workload of the other tenant under this tenant's URL is not found either
    assert site.client("ada").get(f"/tenants/team-b/workloads/{workload.pk}/").status_code == 404
    assert Workload.objects.get(pk=workload.pk).phase == Phase.PENDING


def test_cluster_pages_are_for_cluster_admins(site):
    for url in ["/cluster/", "/audit/", "/cluster/quotas/new/", "/cluster/quotas/cluster/edit/"]:
        assert site.client("ada").get(url).status_code == 403, url
        assert site.client("root").get(url).status_code == 200, url


def test_viewers_cannot_cancel_members_can(site):
    workload = submit(site.world, "w")
    url = f"/tenants/{site.tenant.name}/workloads/{workload.pk}/cancel/"
    assert site.client("vic").post(url).status_code == 403
    assert Workload.objects.get(pk=workload.pk).phase == Phase.PENDING
    assert site.client("vic").get(url).status_code == 405
    response = site.client("mem").post(url, {"reason": "wrong image"})
    assert response.status_code == 302
    workload.refresh_from_db()
    assert workload.phase == Phase.CANCELLED
    assert "wrong image" in workload.events.latest("id").message


def test_tenant_admins_edit_below_their_top_quota_only(site):
    from queueing import actions
    from tests.builders import SYSTEM

    child = actions.create_quota(
        SYSTEM, name="team-a-dev", tenant=site.tenant, parent=site.quota, min={"cpu": "2"}
    )
    ada = site.client("ada")
    t = site.tenant.name
    assert ada.get(f"/tenants/{t}/quotas/{site.quota.name}/edit/").status_code == 403
    assert ada.get(f"/tenants/{t}/quotas/{child.name}/edit/").status_code == 200
    assert site.client("mem").get(f"/tenants/{t}/quotas/{child.name}/edit/").status_code == 403
    # a cluster quota is not under a tenant's URL
    assert site.client("root").get(f"/tenants/{t}/quotas/cluster/edit/").status_code == 404


def test_the_switcher_lists_only_visible_tenants(site):
    page = site.client("ada").get(f"/tenants/{site.tenant.name}/").content.decode()
    assert "team-b" not in page
    root = site.client("root")
    page = root.get(f"/tenants/{site.tenant.name}/").content.decode()
    assert 'name="tenant"' in page
    assert 'value="team-b"' in page
    response = root.get("/switch/", {"tenant": "team-b"})
    assert response["Location"] == "/tenants/team-b/"


def test_home_redirects_a_single_tenant_member_and_lists_for_admins(site):
    assert site.client("vic").get("/")["Location"] == f"/tenants/{site.tenant.name}/"
    page = site.client("root").get("/").content.decode()
    assert "team-a" in page
    assert "team-b" in page
    Membership.objects.filter(user=site.users["vic"]).delete()
    assert "not a member of any tenant" in site.client("vic").get("/").content.decode()
    assert Queue.objects.count() == 2
    assert Quota.objects.count() == 3
