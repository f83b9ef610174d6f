"""The cycle process's own informers (the watch cache) wake its cycle: a Job finishing
that this process's watch sees wakes a sync at once, as the watch_cluster process's
would, instead of waiting for beat's tick (issue 10)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache

from queueing import wake, watch
from queueing.cluster.kubernetes import KubernetesCluster
from tests.fakekube import FakeKube
from tests.kube.conftest import job_manifest, make_adapter
from tests.services import wait_until


@pytest.fixture
def cached(fake: FakeKube) -> Iterator[KubernetesCluster]:
    fake.add_namespace("team-a")
    fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})
    cluster = make_adapter(fake.url, namespaces=["team-a"], kinds=["Job"], watch_cache=True)
    yield cluster
    cluster.stop_watching()
    cluster.api.close()


@pytest.fixture
def sent(settings: Any) -> Iterator[list[str]]:
    settings.KQ_WAKE = True
    cache.clear()
    out: list[str] = []
    wake.set_sender(lambda target, countdown_s: out.append(target))
    yield out
    wake.set_sender(None)
    cache.clear()


def job(cached: KubernetesCluster, name: str) -> Any:
    cached.refresh()
    return next(j for j in cached.jobs() if j.ref.name == name)


def test_a_job_finishing_seen_by_the_process_own_informers_wakes_a_sync(
    fake: FakeKube, cached: KubernetesCluster, sent: list[str]
):
    heard: list[dict[str, int]] = []

    def trigger(reasons: Any) -> None:
        heard.append(dict(reasons))
        watch.wake_sync(reasons)

    cached.reader.on_change = watch.Coalescer(trigger)
    fake.runner.paused = True  # the job waits to finish until the test lets it
    fake.create("jobs", job_manifest("short", runtime=0.2), "team-a")
    wait_until(lambda: any(j.ref.name == "short" for j in cached.jobs()), timeout=10)
    cached.admit(job(cached, "short").ref, node_selector={})
    wait_until(lambda: heard, timeout=10, interval=0.02)  # created, unsuspended
    wait_until(lambda: sent, timeout=10, interval=0.02)
    # The informers' first listing may still be adding the node: that wakes every tree.
    assert sent[0] == wake.SYNC
    assert set(sent) <= {wake.SYNC, wake.ALL}
    # The admission's wake has gone out; its task would now start (and drop its key).
    wake.taken(wake.SYNC)
    wake.taken(wake.ALL)
    heard.clear()
    sent.clear()

    fake.runner.paused = False
    wait_until(lambda: job(cached, "short").state == "Succeeded", timeout=20, interval=0.05)
    wait_until(lambda: any("Job succeeded" in batch for batch in heard), timeout=10)
    wait_until(lambda: sent, timeout=10, interval=0.02)
    assert sent == [wake.SYNC]  # one sync (then the trees it touches), however many events


def test_without_the_hook_the_informers_wake_nothing(
    fake: FakeKube, cached: KubernetesCluster, sent: list[str]
):
    fake.create("jobs", job_manifest("quiet", runtime=0.1), "team-a")
    wait_until(lambda: any(j.ref.name == "quiet" for j in cached.jobs()), timeout=10)
    cached.admit(job(cached, "quiet").ref, node_selector={})
    wait_until(lambda: job(cached, "quiet").state == "Succeeded", timeout=20, interval=0.05)
    assert sent == []


def test_the_cycle_process_adapter_is_wired_to_wake(settings: Any, monkeypatch: Any):
    from queueing import cluster as clusters

    class Reader:
        on_change = None

    class Stub:
        reader = Reader()

    monkeypatch.setattr(KubernetesCluster, "from_settings", classmethod(lambda cls: Stub))
    settings.KQ_CLUSTER = "kubernetes"
    clusters.set_cluster(None)
    try:
        assert clusters.get_cluster() is Stub
    finally:
        clusters.set_cluster(None)
    assert isinstance(Stub.reader.on_change, watch.Coalescer)
    assert Stub.reader.on_change.trigger is watch.wake_sync


def test_bursts_are_coalesced_and_fired_from_one_thread_of_its_own():
    """One trigger per burst, every burst from the same long-lived thread: a thread per
    burst cost its start and a new Redis connection for the wake's key each time."""
    import threading

    heard: list[tuple[dict[str, int], threading.Thread]] = []
    coalescer = watch.Coalescer(
        lambda reasons: heard.append((dict(reasons), threading.current_thread())),
        debounce_s=0.05,
    )
    for reason in ("Job added", "Job added", "capacity"):
        coalescer(reason)
    wait_until(lambda: len(heard) == 1, timeout=5, interval=0.01)
    coalescer("Job succeeded")
    wait_until(lambda: len(heard) == 2, timeout=5, interval=0.01)
    assert [batch for batch, _ in heard] == [
        {"Job added": 2, "capacity": 1},
        {"Job succeeded": 1},
    ]
    assert heard[0][1] is heard[1][1] is not threading.main_thread()
    assert coalescer.fired == 2
