"""Zulip's check for configuration: every action that changes a quota, queue, membership,
tenant or node publishes the rows it changed, so a client that applies the messages to
what it fetched holds what a fresh fetch returns.

The messages take the real path: the actions publish on commit, portal.delivery buffers
and merges them as a connection does, and the frames are validated against
portal.event_schema before they are applied.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from portal.delivery import Stream, Subscription
from portal.event_schema import NOTIFICATIONS, SERVER_MESSAGES
from portal.stream_queries import deliver_now
from queueing import actions, events
from queueing.choices import Role
from queueing.events import member_row, node_row, queue_row, quota_row, tenant_row
from queueing.models import Membership, Queue, Quota, SimNode, Tenant
from tests.builders import SYSTEM, user

KEYS = {"quotas": "id", "queues": "id", "members": "user", "tenants": "id", "nodes": "name"}


def fetch() -> dict[str, dict[Any, dict[str, Any]]]:
    """Everything the configuration messages describe, read afresh."""
    return {
        "quotas": {q.pk: quota_row(q) for q in Quota.objects.all()},
        "queues": {q.pk: queue_row(q) for q in Queue.objects.all()},
        "members": {
            (m.tenant_id, m.user_id): member_row(m)
            for m in Membership.objects.select_related("user")
        },
        "tenants": {t.pk: tenant_row(t) for t in Tenant.objects.all()},
        "nodes": {n.name: node_row(n) for n in SimNode.objects.all()},
    }


def apply(state: dict[str, dict[Any, dict[str, Any]]], frame: dict[str, Any]) -> None:
    """What a client does with a frame: merge rows by key, drop the removed ones."""
    kind = frame["type"]
    jsonschema.validate(frame, SERVER_MESSAGES[kind])
    key = KEYS[kind]

    def at(value: Any) -> Any:  # members are per tenant
        return (frame["tenant"], value) if kind == "members" else value

    for row in frame[kind]:
        state[kind].setdefault(at(row[key]), {}).update(row)
    for gone in frame.get("removed", []):
        assert at(gone) in state[kind], f"{kind}: removed {gone!r}, which the client never had"
        del state[kind][at(gone)]


@pytest.mark.django_db
def test_configuration_events_applied_to_a_fetched_state_match_a_fresh_fetch(
    monkeypatch, django_capture_on_commit_callbacks
):
    sent: list[tuple[int | None, dict[str, Any]]] = []
    monkeypatch.setattr(
        events, "send", lambda tenant_id, payload: sent.append((tenant_id, payload))
    )
    stream = Stream(Subscription.parse({"summary": True}))
    root = actions.create_quota(
        SYSTEM, name="root", tenant=None, parent=None, min={"cpu": "100"}, max={"cpu": "100"}
    )
    state = fetch()
    made: dict[str, Any] = {}

    def step(action) -> None:
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            action()
        assert sent, "every step changes configuration, so it publishes"
        for tenant_id, payload in sent:
            jsonschema.validate(payload, NOTIFICATIONS[payload["type"]])
            assert payload["tenant"] == tenant_id, "sent to the group the payload names"
        for frame in deliver_now(stream, [payload for _, payload in sent]):
            apply(state, frame)
        assert state == fetch()

    def new_tenant() -> None:
        made["tenant"] = actions.create_tenant(SYSTEM, name="vision", display_name="Vision")

    step(new_tenant)
    alice = user("alice")
    bob = user("bob")
    step(lambda: actions.set_membership(SYSTEM, made["tenant"], alice, Role.ADMIN))
    step(lambda: actions.set_membership(SYSTEM, made["tenant"], bob, Role.VIEWER))

    def new_quota() -> None:  # a tenant quota brings its default queue: two messages
        made["quota"] = actions.create_quota(
            SYSTEM,
            name="vision",
            tenant=made["tenant"],
            parent=root,
            min={"cpu": "40"},
            max={"cpu": "80"},
        )

    step(new_quota)
    assert {p["type"] for _, p in sent} == {"quotas", "queues"}
    step(lambda: actions.update_quota(SYSTEM, made["quota"], max={"cpu": "90", "memory": "1Ti"}))
    step(lambda: actions.update_quota(SYSTEM, root, max={"cpu": "120"}))  # a cluster quota
    assert [tenant_id for tenant_id, _ in sent] == [None]

    def new_queue() -> None:
        made["queue"] = actions.create_queue(SYSTEM, tenant=made["tenant"], name="batch")

    step(new_queue)
    step(lambda: actions.update_queue(SYSTEM, made["queue"], priority=7, policy="Block"))
    step(lambda: actions.update_quota(SYSTEM, made["quota"], default_queue=made["queue"]))
    step(lambda: actions.delete_queue(SYSTEM, made["queue"]))  # the quota loses its default
    assert state["quotas"][made["quota"].pk]["default_queue_id"] is None
    step(lambda: actions.set_membership(SYSTEM, made["tenant"], bob, Role.MEMBER))
    step(lambda: actions.remove_membership(SYSTEM, Membership.objects.get(user=bob)))
    step(lambda: actions.update_tenant(SYSTEM, made["tenant"], description="Cameras"))
    step(lambda: actions.upsert_sim_node(SYSTEM, name="n1", allocatable={"cpu": "64"}))
    step(lambda: actions.upsert_sim_node(SYSTEM, name="n1", allocatable={"cpu": "32"}))
    step(lambda: actions.delete_sim_node(SYSTEM, SimNode.objects.get(name="n1")))

    def new_child() -> None:
        made["child"] = actions.create_quota(
            SYSTEM, name="vision-a", tenant=made["tenant"], parent=made["quota"], max={"cpu": "8"}
        )

    step(new_child)
    step(lambda: actions.delete_quota(SYSTEM, made["child"]))
    assert made["child"].pk not in state["quotas"]
    assert state["tenants"][made["tenant"].pk]["description"] == "Cameras"


@pytest.mark.django_db
def test_an_edit_that_fails_publishes_nothing(monkeypatch, django_capture_on_commit_callbacks):
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "send", lambda tenant_id, payload: sent.append(payload))
    root = actions.create_quota(SYSTEM, name="root", tenant=None, parent=None, max={"cpu": "10"})
    with django_capture_on_commit_callbacks(execute=True):
        actions.update_quota(SYSTEM, root, max={"cpu": "12"})
    assert [p["type"] for p in sent] == ["quotas"], "positive control: an edit publishes"
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(actions.ConflictError):
        actions.update_quota(SYSTEM, root, expected_version=1, max={"cpu": "14"})
    assert sent == []
    assert Quota.objects.get(pk=root.pk).max == {"cpu": 12_000}  # millicores


@pytest.mark.django_db
def test_a_rolled_back_notification_does_not_ride_with_the_next(
    monkeypatch, django_capture_on_commit_callbacks
):
    """The batch of a transaction that rolled back is not reused by the next one, even
    while other callbacks are pending (found when these tests ran before others)."""
    from django.db import transaction

    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(events, "send", lambda tenant_id, payload: sent.append(payload))

    def rolled_back() -> None:
        with transaction.atomic():
            events.notify_changes([(1, 1, 1)])
            raise RuntimeError("abort")

    with pytest.raises(RuntimeError):
        rolled_back()
    with django_capture_on_commit_callbacks(execute=True):
        transaction.on_commit(lambda: None)  # someone else's, pending
        events.notify_changes([(1, 1, 2)])
    assert [payload["workloads"] for payload in sent] == [[2]]


@pytest.mark.django_db
def test_the_cycles_quota_messages_bring_a_fetched_state_up_to_date(
    world, monkeypatch, django_capture_on_commit_callbacks
):
    """Runtime quota and usage move in a cycle: its ``quotas`` messages (the tenant's to
    its group, the cluster quota's to the cluster admins only) carry them."""
    from queueing.admission import tick
    from tests.builders import submit

    sent: list[tuple[int | None, dict[str, Any]]] = []
    monkeypatch.setattr(
        events, "send", lambda tenant_id, payload: sent.append((tenant_id, payload))
    )
    state = fetch()
    submit(world, "w", cpu="4")
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        tick(cluster=world.cluster, now=world.clock())
    quota_messages = [(t, p) for t, p in sent if p["type"] == "quotas"]
    assert sorted(t is None for t, _ in quota_messages) == [False, True]
    for tenant_id, payload in quota_messages:
        jsonschema.validate(payload, NOTIFICATIONS["quotas"])
        assert payload["tenant"] == tenant_id
        assert isinstance(payload["cycle"], int)
    stream = Stream(Subscription.parse({"summary": True}))
    for frame in deliver_now(stream, [p for _, p in quota_messages]):
        apply(state, frame)
    assert state["quotas"] == fetch()["quotas"]
    assert state["quotas"][world.quota.pk]["used"] == {"cpu": 4000}
