"""List + watch: resume from resourceVersion, bookmarks, relist on 410, and the
watch_cluster process that starts cycles on events."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from queueing.choices import Phase
from queueing.cluster.kubernetes import ClusterWatcher, Informer, KubernetesCluster
from queueing.models import Workload
from queueing.watch import run_watch
from tests.fakekube import FakeKube
from tests.kube.conftest import job_manifest, make_adapter
from tests.kube.test_kube_cycle import build_world
from tests.services import wait_until

JOBS = "/apis/batch/v1/namespaces/team-a/jobs"


@pytest.fixture
def watched(
    fake: FakeKube, adapter: KubernetesCluster
) -> Iterator[tuple[Informer, list[tuple[str, str]]]]:
    fake.add_namespace("team-a")
    # These tests are about the informer, not the Job controller: a running controller
    # writes each new Job's Suspended condition a moment later, an extra MODIFIED that lands
    # before or after the initial list depending on timing.
    fake.runner.paused = True
    events: list[tuple[str, str]] = []
    informer = Informer(
        adapter.rest,
        JOBS,
        watch_timeout_s=1,
        on_event=lambda type_, obj, old: events.append((type_, obj["metadata"]["name"])),
    )
    stop = threading.Event()
    thread = threading.Thread(target=informer.run, args=(stop,), daemon=True)
    fake.create("jobs", job_manifest("before"), "team-a")
    thread.start()
    wait_until(informer.synced.is_set, timeout=10, interval=0.01)
    yield informer, events
    stop.set()
    informer.close()
    thread.join(10)
    assert not thread.is_alive()


def names(informer: Informer) -> set[str]:
    return {o["metadata"]["name"] for o in informer.snapshot()}


def test_an_informer_lists_then_follows_changes(fake: FakeKube, watched):
    informer, events = watched
    assert names(informer) == {"before"}
    fake.create("jobs", job_manifest("after"), "team-a")
    fake.store.patch("jobs", "team-a", "before", {"metadata": {"labels": {"seen": "yes"}}})
    fake.store.delete("jobs", "team-a", "after")
    wait_until(lambda: ("DELETED", "after") in events, timeout=10, interval=0.01)
    assert events == [
        ("ADDED", "before"),
        ("ADDED", "after"),
        ("MODIFIED", "before"),
        ("DELETED", "after"),
    ]
    assert informer.objects["team-a/before"]["metadata"]["labels"]["seen"] == "yes"


def test_a_watch_that_ends_resumes_from_its_resource_version(fake: FakeKube, watched):
    informer, _ = watched
    wait_until(lambda: informer.watches >= 3, timeout=10, interval=0.01)  # 1 s sessions
    assert informer.relists == 1
    watches = [e for e in fake.log_entries(types=["request"]) if e["verb"] == "watch"]
    assert all(
        "resourceVersion=" in e["query"] and "allowWatchBookmarks=true" in e["query"]
        for e in watches
    )


def test_bookmarks_move_the_resource_version_on(fake: FakeKube, watched):
    informer, _ = watched
    listed = int(informer.resource_version)
    fake.add_node("elsewhere", {"cpu": "1"})  # a change to another kind moves the clock
    wait_until(lambda: int(informer.resource_version) > listed, timeout=10, interval=0.01)
    assert informer.bookmarks >= 1
    assert names(informer) == {"before"}


def test_expired_history_relists_and_reports_what_changed_meanwhile(fake: FakeKube, watched):
    informer, events = watched
    with fake.store.cond:  # changes and compaction at once: the watch cannot resume
        fake.store.delete("jobs", "team-a", "before")
        fake.create("jobs", job_manifest("during"), "team-a")
        fake.compact()
    wait_until(lambda: names(informer) == {"during"}, timeout=10, interval=0.01)
    assert ("DELETED", "before") in events
    assert ("ADDED", "during") in events


def test_the_cluster_watcher_reports_what_matters(fake: FakeKube, adapter: KubernetesCluster):
    fake.add_namespace("team-a")
    reasons: list[str] = []
    watcher = ClusterWatcher(adapter, reasons.append, watch_timeout_s=2)
    watcher.start()
    try:
        assert watcher.wait_synced(10)
        reasons.clear()
        fake.create("jobs", job_manifest("queued"), "team-a")
        wait_until(lambda: "Job added" in reasons, timeout=10, interval=0.01, what=str(reasons))
        fake.create("jobs", job_manifest("not-ours", suspend=False, runtime=600), "team-a")
        fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})
        wait_until(
            lambda: "capacity" in reasons and "node added" in reasons, timeout=10, interval=0.01
        )
        assert "Job added" in reasons
    finally:
        watcher.stop()


@pytest.mark.django_db(transaction=True)
def test_watch_cluster_starts_a_cycle_when_a_job_arrives(
    fake: FakeKube, use_cluster: Callable[[Any], None]
):
    from portal.celery import app

    cluster = make_adapter(fake.url, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    build_world(fake, cluster)
    eager = app.conf.task_always_eager
    app.conf.task_always_eager = True  # the tick runs right here, in the watcher
    out = StringIO()
    done = threading.Event()

    def admitted() -> bool:
        return Workload.objects.filter(
            name="arrived", phase__in=[Phase.ADMITTED, Phase.RUNNING, Phase.SUCCEEDED]
        ).exists()

    fake.create("jobs", job_manifest("arrived", cpu="2"), "team-a")
    with override_settings(KQ_CLUSTER="kubernetes"):
        thread = threading.Thread(
            target=lambda: (
                call_command("watch_cluster", "--max-seconds", "3", stdout=out),
                done.set(),
            ),
            daemon=True,
        )
        thread.start()
        try:
            wait_until(admitted, timeout=10, interval=0.05)
            thread.join(20)
        finally:
            app.conf.task_always_eager = eager
    assert done.is_set()
    assert "Stopped after requesting" in out.getvalue()


def test_run_watch_coalesces_bursts(fake: FakeKube, adapter: KubernetesCluster):
    """A burst of 20 Jobs is one trigger: the first Job's trigger is held while the other
    19 arrive, and those 19 go out together in exactly one more."""
    fake.add_namespace("team-a")
    fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})  # the first list reports it
    batches: list[dict[str, int]] = []
    gate = threading.Event()
    gate.set()

    def trigger(batch: dict[str, int]) -> None:
        batches.append(batch)
        gate.wait(30)  # a slow trigger (a busy broker): the watch must keep collecting

    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: run_watch(adapter, stop, trigger=trigger, debounce_s=2.0, watch_timeout_s=5),
        daemon=True,
    )
    thread.start()
    try:
        wait_until(lambda: batches, timeout=10, interval=0.01)
        before = len(batches)
        gate.clear()
        fake.create("jobs", job_manifest("burst-0"), "team-a")
        wait_until(lambda: len(batches) > before, timeout=10, interval=0.01)
        for i in range(1, 20):
            fake.create("jobs", job_manifest(f"burst-{i}"), "team-a")
        gate.set()
        wait_until(
            lambda: sum(b.get("Job added", 0) for b in batches) >= 20, timeout=15, interval=0.01
        )
    finally:
        gate.set()
        stop.set()
        thread.join(15)
    assert not thread.is_alive()
    added = [b.get("Job added", 0) for b in batches[before:]]
    assert [n for n in added if n] == [1, 19]  # other changes may trigger on their own


@pytest.mark.django_db(transaction=True)
def test_watch_cluster_without_wakes_watches_no_jobs(
    fake: FakeKube, use_cluster: Callable[[Any], None]
):
    """``KQ_WATCH_WAKES=false``: the command lists and watches no jobs, nodes or pods of
    its own (the cycle workers' caches wake them); its teller still tells."""
    cluster = make_adapter(fake.url, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    build_world(fake, cluster)
    before = fake.log.last_seq
    out = StringIO()
    with override_settings(KQ_CLUSTER="kubernetes", KQ_WATCH_WAKES=False):
        call_command("watch_cluster", "--max-seconds", "1", stdout=out)
    said = out.getvalue()
    assert "KQ_WATCH_WAKES is off" in said
    assert "Stopped after requesting 0 cycle(s)." in said
    asked = {
        (e.get("verb"), str(e.get("resource")).split(".")[0])
        for e in fake.log_entries(before, types=["request"])
    }
    assert not any(resource in ("jobs", "nodes", "pods") for _, resource in asked), asked
    assert ("list", "namespaces") in asked  # its teller ran (the namespaces' annotations)
