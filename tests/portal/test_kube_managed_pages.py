"""A quota mirrored from Kubernetes says so on its page, and an edit there is refused
with the place to edit it (issue 12 item 2: one source per quota, shown in the UI)."""

from __future__ import annotations

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
