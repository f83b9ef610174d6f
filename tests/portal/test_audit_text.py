"""The audit log reads as sentences with names and units for people."""

from __future__ import annotations

from portal import audit_text, tokens
from queueing import actions
from queueing.actions import Actor
from queueing.choices import Role
from queueing.models import AuditEvent
from tests.builders import SYSTEM, submit, user


def said(**filters) -> list[str]:
    events = list(AuditEvent.objects.filter(**filters).order_by("id"))
    return [line.sentence for line in audit_text.lines(events)]


def test_a_quota_edit_names_each_resource_its_quota_and_who(site):
    ada = Actor.of(site.users["root"], "ui")
    actions.update_quota(
        ada, site.quota, max={"cpu": "12", "memory": "9835802968"}, min={"cpu": "500m"}
    )
    [sentence] = said(action="quota.update")
    assert sentence == (
        f"cpu min 8 → 500m; cpu max 16 → 12; memory max none → 9.16Gi "
        f"on quota {site.quota.name} by root"
    )


def test_references_become_names_and_creations_say_what_was_made(site):
    child = actions.create_quota(
        SYSTEM, name="team-a-dev", tenant=site.tenant, parent=site.quota,
        min={"cpu": "2"}, max={"cpu": "4", "memory": "64Gi"},
    )  # fmt: skip
    [created] = said(action="quota.create", object_id=str(child.pk))
    assert created == (
        f"system created quota team-a-dev (min cpu 2; max cpu 4, memory 64Gi; parent {site.quota.name})"
    )
    actions.update_quota(SYSTEM, child, parent=site.world.root)
    [moved] = said(action="quota.update", object_id=str(child.pk))
    assert moved == f"parent {site.quota.name} → cluster on quota team-a-dev by system"
    assert "_id" not in moved
    assert "#" not in moved


def test_memberships_tokens_and_cancellations(site):
    newbie = user("newbie")
    admin = Actor.of(site.users["ada"], "ui")
    membership = actions.set_membership(admin, site.tenant, newbie, Role.VIEWER)
    membership = actions.set_membership(admin, site.tenant, newbie, Role.MEMBER)
    membership_id = membership.pk
    actions.remove_membership(admin, membership)
    assert said(object_type="membership", object_id=str(membership_id)) == [
        "ada added newbie to team-a as viewer",
        "ada made newbie member of team-a (was viewer)",
        "ada removed newbie (member) from team-a",
    ]
    made = tokens.create_token(admin, site.users["ada"], name="ci", read_only=True)
    [token_line] = said(action="token.create")
    assert token_line == f"ada created API token {made.token.prefix}… “ci” of ada, read-only"

    w = submit(site.world, "stop-me")
    actions.cancel_workload(Actor.of(site.users["mem"], "api"), w)
    assert said(action="workload.cancel") == [
        "mem cancelled workload team-a/stop-me (it was Pending)"
    ]


def test_a_deleted_reference_keeps_its_id_and_one_query_per_kind(
    site, django_assert_max_num_queries
):
    queue = actions.create_queue(SYSTEM, tenant=site.tenant, name="short-lived")
    actions.update_quota(SYSTEM, site.quota, default_queue=queue)
    actions.update_quota(SYSTEM, site.quota, default_queue=site.queue)
    queue_id = queue.pk
    actions.delete_queue(SYSTEM, queue)
    events = list(AuditEvent.objects.filter(action="quota.update").order_by("id"))
    with django_assert_max_num_queries(4):  # users, tenants, quotas, queues at most
        lines = audit_text.lines(events)
    assert lines[1].sentence == (
        f"default queue queue #{queue_id} → {site.queue.name} on quota {site.quota.name} by system"
    )
