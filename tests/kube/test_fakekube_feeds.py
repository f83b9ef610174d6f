"""The fake API server's watch feeds: a commit goes only to the watches that can match it
(its kind, its namespace or all namespaces), with the history's semantics kept (resume
from a resourceVersion, 410 Gone once compacted past, selectors' transitions); one JSON
encoding per committed version, shared by watches and reads; the job runner's sleep."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client, watch

from tests.fakekube import RUNTIME_ANNOTATION, ApiError, FakeKube, ManualClock, api_client
from tests.fakekube.store import Feed, Store


def configmap(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": {"k": "v"}}


@pytest.fixture
def fake() -> FakeKube:
    """A fake that is not serving: the store's feeds are driven directly, no timing."""
    fake = FakeKube(runner=False, seed=0)
    for namespace in ("team-a", "team-b"):
        fake.add_namespace(namespace)
    return fake


def taken(feed: Feed) -> list[tuple[str, str, str]]:
    """(type, namespace, name) of what the feed holds now (no waiting)."""
    events, _ = feed.take(0)
    return [
        (e.type, e.obj["metadata"].get("namespace", ""), e.obj["metadata"]["name"]) for e in events
    ]


def test_a_namespace_watch_gets_its_namespace_only_and_an_all_namespaces_watch_both(
    fake: FakeKube,
) -> None:
    store, configmaps = fake.store, fake.registry.resolve("configmaps")
    _, in_a = store.watch(configmaps, "team-a", None)
    _, in_b = store.watch(configmaps, "team-b", None)
    _, everywhere = store.watch(configmaps, None, None)
    fake.create("configmaps", configmap("one"), "team-a")
    fake.create("configmaps", configmap("two"), "team-b")
    fake.create("secrets", {"metadata": {"name": "other-kind"}}, "team-a")
    store.patch("configmaps", "team-a", "one", {"data": {"k": "w"}})
    store.delete("configmaps", "team-b", "two")

    assert taken(in_a) == [("ADDED", "team-a", "one"), ("MODIFIED", "team-a", "one")]
    assert taken(in_b) == [("ADDED", "team-b", "two"), ("DELETED", "team-b", "two")]
    assert taken(everywhere) == [
        ("ADDED", "team-a", "one"),
        ("ADDED", "team-b", "two"),
        ("MODIFIED", "team-a", "one"),
        ("DELETED", "team-b", "two"),
    ]
    for feed in (in_a, in_b, everywhere):
        store.unwatch(feed)
    fake.create("configmaps", configmap("after"), "team-a")
    assert store._feeds == {}  # closed watches are offered nothing
    assert taken(in_a) == []


def test_cluster_scoped_kinds_have_one_feed(fake: FakeKube) -> None:
    _, nodes = fake.store.watch(fake.registry.resolve("nodes"), None, None)
    fake.add_node("n1", {"cpu": "1"})
    fake.add_namespace("team-c")
    assert taken(nodes) == [("ADDED", "", "n1")]


def test_a_resumed_watch_replays_its_kind_and_namespace_only(fake: FakeKube) -> None:
    store, configmaps = fake.store, fake.registry.resolve("configmaps")
    since = str(store.rv)
    fake.create("configmaps", configmap("a1"), "team-a")
    fake.create("configmaps", configmap("b1"), "team-b")
    fake.create("secrets", {"metadata": {"name": "s"}}, "team-a")
    initial, feed = store.watch(configmaps, "team-a", since)
    assert initial is None
    fake.create("configmaps", configmap("a2"), "team-a")
    fake.create("configmaps", configmap("b2"), "team-b")
    assert taken(feed) == [("ADDED", "team-a", "a1"), ("ADDED", "team-a", "a2")]


def test_a_watch_that_has_not_read_what_compaction_dropped_gets_410(fake: FakeKube) -> None:
    store, configmaps = fake.store, fake.registry.resolve("configmaps")
    _, behind = store.watch(configmaps, "team-a", None)
    _, caught_up = store.watch(configmaps, None, None)
    fake.create("configmaps", configmap("x"), "team-b")  # not behind's: it moves the clock
    assert taken(caught_up) == [("ADDED", "team-b", "x")]
    fake.create("configmaps", configmap("y"), "team-a")
    taken(caught_up)
    store.compact()
    with pytest.raises(ApiError) as gone:
        behind.take(0)
    assert gone.value.code == 410
    fake.create("configmaps", configmap("z"), "team-a")
    assert taken(caught_up) == [("ADDED", "team-a", "z")]  # a watch that kept up goes on
    with pytest.raises(ApiError):
        store.watch(configmaps, "team-a", str(store.rv - 2))


def test_a_label_selector_watch_sees_objects_enter_and_leave_per_namespace(
    fake_kube_factory: Callable[..., FakeKube],
) -> None:
    fake = fake_kube_factory(seed=0)
    for namespace in ("team-a", "team-b"):
        fake.add_namespace(namespace)
    core = client.CoreV1Api(api_client(fake.url))
    start = core.list_namespaced_config_map("team-a").metadata.resource_version
    core.create_namespaced_config_map("team-b", configmap("elsewhere", {"q": "1"}))
    core.create_namespaced_config_map("team-a", configmap("joins", {"q": "2"}))
    core.patch_namespaced_config_map("joins", "team-a", {"metadata": {"labels": {"q": "1"}}})
    core.patch_namespaced_config_map("joins", "team-a", {"data": {"k": "w"}})
    core.patch_namespaced_config_map("joins", "team-a", {"metadata": {"labels": {"q": "3"}}})
    core.delete_namespaced_config_map("joins", "team-a")  # already out of the selector
    core.create_namespaced_config_map("team-a", configmap("last", {"q": "1"}))

    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        "team-a",
        resource_version=start,
        label_selector="q=1",
        timeout_seconds=10,
    )
    events = []
    for event in stream:
        events.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if len(events) == 4:
            break
    w.stop()
    assert events == [
        ("ADDED", "joins"),  # MODIFIED into the selector: ADDED for this watch
        ("MODIFIED", "joins"),
        ("DELETED", "joins"),  # MODIFIED out of it: DELETED, and its deletion is not sent
        ("ADDED", "last"),
    ]


def test_one_encoding_per_version_shared_by_the_watch_and_reads(fake: FakeKube) -> None:
    store, configmaps = fake.store, fake.registry.resolve("configmaps")
    _, feed = store.watch(configmaps, None, None)
    created = fake.create("configmaps", configmap("c"), "team-a")
    (event,), _ = feed.take(0)
    assert store.encoded(created) is event.json()  # the same bytes, encoded once
    assert json.loads(event.line()) == {"type": "ADDED", "object": created}
    changed = store.patch("configmaps", "team-a", "c", {"data": {"k": "new"}})
    assert json.loads(store.encoded(changed))["data"] == {"k": "new"}
    assert json.loads(store.encoded(created))["data"] == {"k": "v"}  # an old version
    deleted = store.delete("configmaps", "team-a", "c")
    assert json.loads(store.encoded(deleted))["metadata"]["name"] == "c"
    assert json.loads(event.line("DELETED"))["type"] == "DELETED"


def test_a_get_and_a_list_answer_the_encoded_objects(fake_kube_factory: Callable[..., FakeKube]):
    fake = fake_kube_factory(seed=0)
    core = client.CoreV1Api(api_client(fake.url))
    core.create_namespaced_config_map("default", configmap("a", {"q": "1"}))
    core.patch_namespaced_config_map("a", "default", {"data": {"k": "w"}})
    core.create_namespaced_config_map("default", configmap("b"))
    assert core.read_namespaced_config_map("a", "default").data == {"k": "w"}
    listed = core.list_namespaced_config_map("default", label_selector="q=1")
    assert [(i.metadata.name, i.data) for i in listed.items] == [("a", {"k": "w"})]
    page = core.list_namespaced_config_map("default", limit=1)
    assert page.metadata._continue
    assert page.metadata.remaining_item_count == 1


def test_request_headers_are_read_in_any_case_and_connection_close_is_honoured(
    fake_kube_factory: Callable[..., FakeKube],
) -> None:
    fake = fake_kube_factory(seed=0)
    host, port = fake.url.removeprefix("http://").split(":")
    body = json.dumps(configmap("raw")).encode()
    request = (
        b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\n"
        b"host: fake\r\ncontent-TYPE: application/json\r\nUSER-AGENT: raw-client/1\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):  # the server closes after one answer
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 201")
    assert b"\r\nDate: " in head
    assert json.loads(payload)["metadata"]["name"] == "raw"
    created = [e for e in fake.log_entries(types=["request"]) if e["verb"] == "create"]
    assert [e["user_agent"] for e in created] == ["raw-client/1"]


def test_the_runner_sleeps_until_its_next_timer() -> None:
    clock = ManualClock()
    fake = FakeKube(clock=clock, runner=False, default_runtime=30)
    runner = fake.runner
    assert runner._sleep() == runner.idle  # nothing due: only a change wakes it
    fake.add_node("n", {"cpu": "8"})
    body = {
        "metadata": {"name": "timed", "annotations": {RUNTIME_ANNOTATION: "0.25"}},
        "spec": {
            "suspend": False,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                }
            },
        },
    }
    fake.create("jobs", body, "default")
    runner.step()  # the pod starts: a timer 0.25 s ahead
    assert runner._sleep() == pytest.approx(0.25)
    clock.advance(0.25)
    assert runner._sleep() == 0.0
    runner.paused = True
    assert runner._sleep() == runner.idle


def test_feeds_are_per_store() -> None:
    """Two stores (two fakes in one process) share nothing."""
    one, two = FakeKube(runner=False).store, FakeKube(runner=False).store
    assert isinstance(one, Store)
    _, feed = one.watch(one.registry.resolve("namespaces"), None, None)
    two.create("namespaces", None, {"metadata": {"name": "elsewhere"}})
    assert taken(feed) == []
