"""koord-queue's ``available-queue`` annotation on Namespaces (issue 12 item 4): each
managed namespace says, as kube-queue's namespace controller writes it, which queues
its jobs may use and for which of its quotas; it is read back and rewritten only when
it differs, and removed when the namespace has no quota any more."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from queueing import actions, namespacequeues
from queueing.actions import Actor
from tests.fakekube import FakeKube
from tests.kube.conftest import ApiErrors, make_adapter
from tests.kube.test_kube_cycle import build_world

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system()


def annotations(fake: FakeKube, namespace: str) -> dict[str, str]:
    return dict(fake.store.get("namespaces", None, namespace)["metadata"].get("annotations") or {})


def patches(fake: FakeKube) -> int:
    return sum(
        1
        for e in fake.log_entries(types=["request"])
        if e.get("resource") == "namespaces" and e["verb"] == "patch"
    )


def test_each_namespace_says_which_queues_its_jobs_may_use(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> None:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    fake.add_namespace("elsewhere")  # not managed: never annotated
    batch = actions.create_queue(SYSTEM, tenant=world.quota_a.tenant, name="team-a-batch")
    fake.store.patch(
        "namespaces",
        None,
        "team-b",
        {"metadata": {"annotations": {"kube-queue/available-queue-in-namespace": "{}"}}},
    )
    ticks = iter(range(0, 10_000, 100))
    assert namespacequeues.publish(cluster, clock=lambda: next(ticks)) == 2
    a = annotations(fake, "team-a")
    expected = {"team-a-batch": ["team-a-q"], "team-a-q": ["team-a-q"]}
    assert json.loads(a["koord-queue/available-queue"]) == expected
    assert (
        a["koord-queue/available-queue"] == '{"team-a-batch":["team-a-q"],"team-a-q":["team-a-q"]}'
    )
    assert a["kube-queue/available-queue"] == a["koord-queue/available-queue"]
    b = annotations(fake, "team-b")
    # The -in-namespace key the namespace already had is kept up to date too.
    assert json.loads(b["kube-queue/available-queue-in-namespace"]) == {"team-b-q": ["team-b-q"]}
    assert json.loads(b["koord-queue/available-queue"]) == {"team-b-q": ["team-b-q"]}
    assert "koord-queue/available-queue" not in annotations(fake, "elsewhere")

    # Read back: nothing changed, nothing written.
    before = patches(fake)
    assert namespacequeues.publish(cluster, clock=lambda: next(ticks)) == 0
    assert patches(fake) == before

    # A queue goes away: the namespace's annotation follows at the next pass.
    actions.delete_queue(SYSTEM, batch)
    assert namespacequeues.publish(cluster, clock=lambda: next(ticks)) == 1
    assert json.loads(annotations(fake, "team-a")["koord-queue/available-queue"]) == {
        "team-a-q": ["team-a-q"]
    }

    # No quota claims the namespace any more: every key of the family is removed.
    actions.update_quota(SYSTEM, world.quota_b, namespaces=[])
    assert namespacequeues.publish(cluster, clock=lambda: next(ticks)) == 1
    left = annotations(fake, "team-b")
    assert not set(left) & set(namespacequeues.FAMILY), left
    cluster.api.close()


def test_a_pass_within_the_interval_writes_nothing(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> None:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    build_world(fake, cluster)
    assert namespacequeues.publish(cluster, clock=lambda: 1000.0) == 2
    fake.store.patch(
        "namespaces",
        None,
        "team-a",
        {"metadata": {"annotations": {"koord-queue/available-queue": "stale"}}},
    )
    assert namespacequeues.publish(cluster, clock=lambda: 1001.0) == 0  # a moment later
    assert annotations(fake, "team-a")["koord-queue/available-queue"] == "stale"
    assert namespacequeues.publish(cluster, clock=lambda: 1100.0) == 1  # later: put right
    assert annotations(fake, "team-a")["koord-queue/available-queue"] != "stale"
    cluster.api.close()


def test_the_patch_for_one_namespace() -> None:
    family = {"koord-queue/available-queue": '{"q":["a"]}'}
    assert namespacequeues.changes_for(family, '{"q":["a"]}') == {}
    assert namespacequeues.changes_for({}, "") == {}
    assert namespacequeues.changes_for(family, "") == {"koord-queue/available-queue": None}
    assert namespacequeues.changes_for({}, '{"q":["a"]}') == {
        "koord-queue/available-queue": '{"q":["a"]}',
        "kube-queue/available-queue": '{"q":["a"]}',
    }
    assert namespacequeues.encode({}) == ""
    assert namespacequeues.encode({"b": ["y", "x"], "a": ["z"]}) == '{"a":["z"],"b":["y","x"]}'
