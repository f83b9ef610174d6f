"""A quota mirrored from Kubernetes says so on its page, and an edit there is refused
with the place to edit it (issue 12 item 2: one source per quota, shown in the UI)."""

from __future__ import annotations

import re

from queueing import actions
from queueing.models import Quota
from tests.builders import SYSTEM
from tests.portal.test_forms import digest_of, edit_url, grid


def test_a_quota_managed_in_kubernetes_is_shown_as_such_and_not_edited(site):
    root = site.client("root")
    page = root.get(edit_url(site)).content.decode()
    assert 'id="kube-managed"' not in page  # positive control: managed here, no notice
    actions.set_kube_ref(SYSTEM, site.quota, "ElasticQuota team-a/team-a")
    page = root.get(edit_url(site)).content.decode()
    assert "Managed in Kubernetes: <code>ElasticQuota team-a/team-a</code>" in page
    data = grid(site.quota, **{"res-0-max": "8"})
    preview = root.post(edit_url(site), data | {"action": "preview"})
    refused = root.post(
        edit_url(site), data | {"action": "save", "preview_digest": digest_of(preview)}
    )
    assert refused.status_code == 400
    assert "is managed in Kubernetes (ElasticQuota team-a/team-a): edit that object" in (
        refused.content.decode()
    )
    assert Quota.objects.get(pk=site.quota.pk).max == site.quota.max


def _sources(page: str) -> list[tuple[str, str]]:
    """(data-source, text) of every source tag on a page, in order."""
    return [
        (m.group(1), re.sub(r"<[^>]+>", "", m.group(2)).strip())
        for m in re.finditer(
            r'<span class="tag source" data-source="(\w+)"[^>]*>(.*?)</span>', page
        )
    ]


def test_every_list_and_detail_page_says_where_a_quota_or_queue_is_edited(site):
    root = site.client("root")
    tenant_url = f"/tenants/{site.tenant.name}/"
    queue_url = f"/tenants/{site.tenant.name}/queues/{site.queue.name}/"
    # Managed here: said so everywhere (positive control for the tags below).
    assert _sources(root.get(tenant_url).content.decode()) == [("here", "managed here")] * 2
    assert _sources(root.get(queue_url).content.decode()) == [("here", "managed here")]
    assert _sources(root.get(edit_url(site)).content.decode()) == [("here", "managed here")]
    actions.set_kube_ref(SYSTEM, site.quota, "ElasticQuota team-a/team-a")
    actions.set_kube_ref(SYSTEM, site.queue, "Queue team-a/q")
    tenant_page = root.get(tenant_url).content.decode()
    # The tenant page lists its queues, then its quotas: each with its object.
    assert _sources(tenant_page) == [
        ("kubernetes", "managed in Kubernetes Queue team-a/q"),
        ("kubernetes", "managed in Kubernetes ElasticQuota team-a/team-a"),
    ]
    cluster_page = root.get("/cluster/").content.decode()
    assert ("kubernetes", "managed in Kubernetes ElasticQuota team-a/team-a") in _sources(
        cluster_page
    )
    assert _sources(root.get(queue_url).content.decode()) == [
        ("kubernetes", "managed in Kubernetes Queue team-a/q")
    ]
