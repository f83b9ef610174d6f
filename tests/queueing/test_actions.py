"""Every write goes through an action and leaves an audit event with before and after."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from queueing import actions
from queueing.actions import ActionError, Actor
from queueing.choices import Phase, Role, Source
from queueing.models import AuditEvent, Membership, Queue, SimJob, Workload, WorkloadEvent
from tests import builders
from tests.builders import SYSTEM, submit


def last_audit(action: str) -> AuditEvent:
    return AuditEvent.objects.filter(action=action).latest("id")


def test_tenant_and_membership_actions_are_audited(db):
    admin = builders.user("root", superuser=True)
    actor = Actor.of(admin, Source.UI)
    tenant = actions.create_tenant(actor, name="blue", display_name="Blue team")
    event = last_audit("tenant.create")
    assert (event.actor, event.actor_name, event.source) == (admin, "root", Source.UI)
    assert event.after["display_name"] == "Blue team"
    assert event.tenant == tenant

    member = builders.user("mia")
    actions.set_membership(actor, tenant, member, Role.MEMBER)
    actions.set_membership(actor, tenant, member, Role.ADMIN)
    update = last_audit("membership.update")
    assert (update.before["role"], update.after["role"]) == ("member", "admin")
    actions.remove_membership(actor, Membership.objects.get(user=member))
    assert last_audit("membership.delete").before["role"] == "admin"


def test_an_unknown_role_is_refused(db):
    tenant = actions.create_tenant(SYSTEM, name="blue")
    with pytest.raises(ValidationError):
        actions.set_membership(SYSTEM, tenant, builders.user("x"), "owner")
    assert not Membership.objects.exists()


def test_queue_policy_fifo_is_an_alias_of_block(world):
    queue = actions.create_queue(SYSTEM, tenant=world.tenant, name="legacy", policy="FIFO")
    assert queue.policy == "Block"
    with pytest.raises(ValidationError) as info:
        actions.create_queue(SYSTEM, tenant=world.tenant, name="weird", policy="Lottery")
    assert "Lottery" in str(info.value)
    assert not Queue.objects.filter(name="weird").exists()


def test_queue_edits_check_versions_and_backoff_bounds(world):
    queue = actions.update_queue(SYSTEM, world.queue, expected_version=1, priority=5)
    assert (queue.priority, queue.version) == (5, 2)
    with pytest.raises(actions.ConflictError):
        actions.update_queue(SYSTEM, world.queue, expected_version=1, priority=9)
    with pytest.raises(ValidationError) as info:
        actions.update_queue(SYSTEM, world.queue, backoff_base_s=60, backoff_max_s=10)
    assert "backoff_max_s (10" in str(info.value)
    assert Queue.objects.get(pk=world.queue.pk).priority == 5


def test_submit_creates_a_suspended_job_and_a_pending_workload(world):
    workload = submit(world, "train-1", cpu="2", count=3)
    assert workload.phase == Phase.PENDING
    assert workload.total_request == {"cpu": 6000}
    assert workload.namespace == "team-a"
    assert workload.queue == world.queue
    job = SimJob.objects.get(name="train-1")
    assert job.suspended
    assert job.uid == workload.object_uid
    assert job.labels["koord-queue/queue-name"] == world.queue.name
    assert WorkloadEvent.objects.get(workload=workload).to_phase == Phase.PENDING
    assert last_audit("workload.submit").after["name"] == "train-1"


@pytest.mark.parametrize(
    ("pod_sets", "fragment"),
    [
        ([], "at least one pod set"),
        ([{"count": 0, "requests": {"cpu": "1"}}], "count must be"),
        ([{"count": 1, "requests": {"cpu": "many"}}], "not a Kubernetes quantity"),
        ([{"count": 1, "requests": {}}], "must ask for something"),
        (
            [{"name": "a", "requests": {"cpu": "1"}}, {"name": "a", "requests": {"cpu": "1"}}],
            "used twice",
        ),
    ],
)
def test_bad_submissions_are_refused_and_create_nothing(world, pod_sets, fragment):
    with pytest.raises(ValidationError) as info:
        actions.submit_workload(
            SYSTEM, tenant=None, quota=world.quota, name="bad", pod_sets=pod_sets
        )
    assert fragment in str(info.value)
    assert not Workload.objects.exists()
    assert not SimJob.objects.exists()


def test_submitting_to_a_parent_quota_is_refused(world):
    with pytest.raises(ValidationError) as info:
        actions.submit_workload(
            SYSTEM, tenant=None, quota=world.root, name="x", pod_sets=[{"requests": {"cpu": "1"}}]
        )
    assert "belongs to no tenant" in str(info.value) or "leaf" in str(info.value)


def test_a_queue_of_another_tenant_is_refused(world):
    other = actions.create_tenant(SYSTEM, name="other")
    foreign = actions.create_queue(SYSTEM, tenant=other, name="foreign")
    with pytest.raises(ValidationError) as info:
        actions.submit_workload(
            SYSTEM,
            tenant=world.tenant,
            quota=world.quota,
            queue=foreign,
            name="x",
            pod_sets=[{"requests": {"cpu": "1"}}],
        )
    assert "does not belong to tenant" in str(info.value)


def test_a_duplicate_live_name_is_refused(world):
    submit(world, "dup")
    with pytest.raises(ValidationError):
        submit(world, "dup")
    assert Workload.objects.count() == 1


def test_cancel_deletes_the_job_then_marks_the_workload(world):
    workload = submit(world, "stop-me")
    actor = Actor.of(builders.user("ann", tenant=world.tenant, role=Role.MEMBER), Source.API)
    actions.cancel_workload(actor, workload)
    workload.refresh_from_db()
    assert workload.phase == Phase.CANCELLED
    assert not SimJob.objects.filter(name="stop-me").exists()
    event = last_audit("workload.cancel")
    assert (event.before, event.after, event.actor_name) == (
        {"phase": "Pending"},
        {"phase": "Cancelled"},
        "ann",
    )
    with pytest.raises(ActionError, match="already Cancelled"):
        actions.cancel_workload(actor, workload)


def test_a_quota_with_workloads_cannot_get_children_or_be_deleted(world):
    submit(world, "holder")
    with pytest.raises(ValidationError, match="holds workloads"):
        actions.create_quota(SYSTEM, name="child", tenant=world.tenant, parent=world.quota)
    with pytest.raises(ActionError):
        actions.delete_quota(SYSTEM, world.quota)


def test_a_tenant_keeps_at_least_one_admin(db):
    tenant = actions.create_tenant(SYSTEM, name="blue")
    ana = builders.user("ana", tenant=tenant, role=Role.ADMIN)
    as_ana = Actor.of(ana, Source.UI)
    only = Membership.objects.get(user=ana)
    with pytest.raises(ActionError, match="last admin"):
        actions.set_membership(as_ana, tenant, ana, Role.MEMBER)
    with pytest.raises(ActionError, match="last admin"):
        actions.remove_membership(as_ana, only)
    assert Membership.objects.get(user=ana).role == Role.ADMIN
    bob = builders.user("bob", tenant=tenant, role=Role.ADMIN)
    actions.set_membership(as_ana, tenant, ana, Role.MEMBER)  # bob remains admin
    root = Actor.of(builders.user("root", superuser=True), Source.UI)
    actions.remove_membership(root, Membership.objects.get(user=bob))  # cluster admins may
    assert not Membership.objects.filter(tenant=tenant, role=Role.ADMIN).exists()


def test_actions_take_parsed_amounts_as_they_are_and_parse_text(world):
    from queueing.validation import Amounts

    quota = actions.update_quota(SYSTEM, world.quota, max=Amounts({"cpu": 12_500}))
    assert quota.max == {"cpu": 12_500}  # millicores as given, not 12,500 cores
    quota = actions.update_quota(SYSTEM, world.quota, max={"cpu": "13"})
    assert quota.max == {"cpu": 13_000}
