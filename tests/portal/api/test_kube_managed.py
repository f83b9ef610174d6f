"""The REST API shows where a quota or queue is edited, and refuses to edit one that
Kubernetes manages (issue 12 item 2)."""

from __future__ import annotations

from queueing import actions
from queueing.models import Quota
from tests.builders import SYSTEM
from tests.portal.api.conftest import ApiWorld


def test_source_and_kube_ref_are_shown_and_a_mirrored_quota_is_not_edited(api: ApiWorld) -> None:
    shown = api.call("tenant_admin", "get", "/api/v1/quotas/team-a-dev/").json()
    assert (shown["source"], shown["kube_ref"]) == ("here", "")
    quota = Quota.objects.get(name="team-a-dev")
    actions.set_kube_ref(SYSTEM, quota, "ElasticQuota team-a/team-a-dev")
    shown = api.call("tenant_admin", "get", "/api/v1/quotas/team-a-dev/").json()
    assert (shown["source"], shown["kube_ref"]) == ("kubernetes", "ElasticQuota team-a/team-a-dev")
    edit = {"max": {"cpu": "6"}, "version": shown["version"]}
    refused = api.call("tenant_admin", "patch", "/api/v1/quotas/team-a-dev/", edit)
    assert refused.status_code in (400, 409), refused.content
    assert "managed in Kubernetes" in refused.content.decode()
    assert Quota.objects.get(name="team-a-dev").max == quota.max
    # kube_ref and source are read-only: a client cannot take a quota over.
    sneaky = api.call(
        "tenant_admin",
        "patch",
        "/api/v1/quotas/team-a-dev/",
        {"kube_ref": "", "version": shown["version"]},
    )
    assert Quota.objects.get(name="team-a-dev").kube_ref == "ElasticQuota team-a/team-a-dev"
    assert sneaky.status_code in (400, 409)
