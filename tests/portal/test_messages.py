"""Messages that give the real reason and the role."""

from __future__ import annotations

from queueing import actions
from queueing.models import Membership
from tests.builders import SYSTEM, user


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def test_adding_and_changing_a_member_names_the_role(site):
    user("newbie")
    ada = site.client("ada")
    url = f"/tenants/{site.tenant.name}/members/"
    added = ada.post(url, {"op": "add", "username": "newbie", "role": "viewer"}, follow=True)
    assert "newbie is now a viewer of team-a." in messages_of(added)
    membership = Membership.objects.get(user__username="newbie")
    changed = ada.post(
        url, {"op": "role", "membership": membership.pk, "role": "admin"}, follow=True
    )
    assert "newbie is now an admin of team-a." in messages_of(changed)


def test_a_refused_quota_edit_says_why_for_this_quota_and_role(site):
    child = actions.create_quota(
        SYSTEM,
        name="team-a-dev",
        tenant=site.tenant,
        parent=site.quota,
        min={"cpu": "1"},
        max={"cpu": "2"},
    )
    t = site.tenant.name
    viewer = site.client("vic").get(f"/tenants/{t}/quotas/{child.name}/edit/")
    assert viewer.status_code == 403
    page = viewer.content.decode()
    expected = (
        f"You are viewer of {site.tenant}; only its admins (and cluster admins) edit its quotas."
    )
    assert expected in page
    assert "top quota" not in page
    top = site.client("ada").get(f"/tenants/{t}/quotas/{site.quota.name}/edit/")
    assert top.status_code == 403
    assert (
        f"{site.quota.name} is the top quota of {site.tenant}, its entitlement"
        in top.content.decode()
    )
    assert site.client("ada").get(f"/tenants/{t}/quotas/{child.name}/edit/").status_code == 200
