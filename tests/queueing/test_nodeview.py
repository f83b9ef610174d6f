"""The node view: the cycle stores what it read, writes only changes, announces them."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from portal.event_schema import NOTIFICATIONS
from queueing import events, nodeview
from queueing.cluster.base import NodeInfo
from queueing.models import ClusterNode

pytestmark = pytest.mark.django_db


def node(name: str, cpu: int = 8000, **extra: Any) -> NodeInfo:
    return NodeInfo(name=name, allocatable={"cpu": cpu, "memory": 2**35}, reserved={}, **extra)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    def send(tenant_id: int | None, payload: dict[str, Any]) -> None:
        assert tenant_id is None  # cluster-wide: cluster admins only
        out.append(payload)

    monkeypatch.setattr(events, "send", send)
    return out


def test_first_reading_creates_rows_and_announces_them_after_commit(
    sent: list[dict[str, Any]], django_capture_on_commit_callbacks: Any
) -> None:
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        changes = nodeview.persist(
            [node("b"), node("a", labels={"pool": "gpu"}, taints=(taint,), unschedulable=True)]
        )
    assert changes.created == ["a", "b"]
    assert sent == []  # nothing before the commit
    for callback in callbacks:
        callback()
    (message,) = sent
    jsonschema.validate(message, NOTIFICATIONS["nodes"])
    assert [row["name"] for row in message["nodes"]] == ["a", "b"]
    assert message["removed"] == []
    a, b = nodeview.read()
    assert (a.name, dict(a.labels), list(a.taints), a.unschedulable) == (
        "a", {"pool": "gpu"}, [taint], True
    )  # fmt: skip
    assert (b.name, dict(b.allocatable), b.unschedulable) == (
        "b", {"cpu": 8000, "memory": 2**35}, False
    )  # fmt: skip


def test_an_unchanged_reading_writes_nothing_and_announces_nothing(
    sent: list[dict[str, Any]],
    django_assert_num_queries: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        nodeview.persist([node("a"), node("b")])
    sent.clear()  # the creation's announcement
    before = list(ClusterNode.objects.values_list("name", "changed_at"))
    # The reading this process just stored: not even read.
    with django_capture_on_commit_callbacks(execute=True), django_assert_num_queries(0):
        changes = nodeview.persist([node("b"), node("a")])
    assert not changes
    # Past RECHECK_S (or in another process): one read of names and digests; no write.
    nodeview.forget()
    with django_capture_on_commit_callbacks(execute=True), django_assert_num_queries(1):
        changes = nodeview.persist([node("b"), node("a")])
    assert not changes
    assert sent == []
    assert list(ClusterNode.objects.values_list("name", "changed_at")) == before


def test_a_view_changed_elsewhere_is_put_right_within_the_recheck_bound(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        nodeview.persist([node("a")])
    # Another process stored an older reading meanwhile.
    ClusterNode.objects.filter(name="a").update(allocatable={"cpu": 1000}, digest="old")
    nodeview.persist([node("a")])  # within the bound: taken as stored
    assert nodeview.read()[0].allocatable["cpu"] == 1000
    monkeypatch.setattr(nodeview, "RECHECK_S", 0.0)
    with django_capture_on_commit_callbacks(execute=True):
        assert nodeview.persist([node("a")]).updated == ["a"]
    assert nodeview.read()[0].allocatable["cpu"] == 8000


def test_changes_are_written_in_bulk_and_a_vanished_node_is_removed(
    sent: list[dict[str, Any]],
    django_assert_max_num_queries: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    nodeview.persist([node(f"n{i}") for i in range(20)])
    # n0 cordoned, n1 grows, n2 gone, n20 new: statements per kind, not per node.
    reading = [
        node("n0", unschedulable=True),
        node("n1", cpu=16000),
        *(node(f"n{i}") for i in range(3, 21)),
    ]
    with django_capture_on_commit_callbacks(execute=True), django_assert_max_num_queries(8):
        changes = nodeview.persist(reading)
    assert (changes.created, changes.updated, changes.removed) == (["n20"], ["n0", "n1"], ["n2"])
    (message,) = sent[-1:]
    jsonschema.validate(message, NOTIFICATIONS["nodes"])
    assert [row["name"] for row in message["nodes"]] == ["n20", "n0", "n1"]
    assert message["removed"] == ["n2"]
    assert message["nodes"][1]["unschedulable"] is True
    by_name = {n.name: n for n in nodeview.read()}
    assert "n2" not in by_name
    assert by_name["n0"].unschedulable is True
    assert by_name["n1"].allocatable["cpu"] == 16000
    assert len(by_name) == 20


def test_a_simulated_node_edit_shows_in_the_view_at_once(settings: Any) -> None:
    from queueing import actions
    from queueing.actions import Actor
    from queueing.models import SimNode

    settings.KQ_CLUSTER = "simulated"
    actions.upsert_sim_node(Actor.system(), name="sim-1", allocatable={"cpu": "4"})
    (view,) = nodeview.read()
    assert (view.name, view.allocatable["cpu"]) == ("sim-1", 4000)
    actions.upsert_sim_node(
        Actor.system(), name="sim-1", allocatable={"cpu": "4"}, unschedulable=True
    )
    assert nodeview.read()[0].unschedulable is True
    actions.delete_sim_node(Actor.system(), SimNode.objects.get(name="sim-1"))
    assert nodeview.read() == []


def test_in_kubernetes_mode_a_simulated_node_is_not_the_cluster(settings: Any) -> None:
    from queueing import actions
    from queueing.actions import Actor

    settings.KQ_CLUSTER = "kubernetes"
    actions.upsert_sim_node(Actor.system(), name="sim-1", allocatable={"cpu": "4"})
    assert nodeview.read() == []


def test_a_simulated_node_edit_is_announced_once(
    settings: Any, sent: list[dict[str, Any]], django_capture_on_commit_callbacks: Any
) -> None:
    from queueing import actions
    from queueing.actions import Actor

    settings.KQ_CLUSTER = "simulated"
    with django_capture_on_commit_callbacks(execute=True):
        actions.upsert_sim_node(Actor.system(), name="sim-1", allocatable={"cpu": "4"})
    assert [(m["type"], [row["name"] for row in m["nodes"]]) for m in sent] == [
        ("nodes", ["sim-1"])
    ]
    # Positive control: the cycle's reading of a changed node is announced.
    with django_capture_on_commit_callbacks(execute=True):
        nodeview.persist([node("sim-1", cpu=8000)])
    assert len(sent) == 2
