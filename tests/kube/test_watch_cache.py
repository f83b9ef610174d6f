"""The watch cache (KQ_KUBE_WATCH_CACHE): a worker reads jobs, nodes and pods from its
own informers instead of listing them every tick, reads its own writes, confirms a stop
with a fresh read, and lists again when a watch has been failing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from queueing.cluster.kubernetes import CACHE_STALE_S, KubernetesCluster
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


def job_lists(fake: FakeKube) -> int:
    return sum(
        1
        for r in fake.log_entries(types=["request"])
        if r.get("verb") == "list" and str(r.get("resource")).startswith("jobs")
    )


def states(cluster: KubernetesCluster) -> dict[str, tuple[bool, str]]:
    cluster.refresh()
    return {j.ref.name: (j.suspended, j.state) for j in cluster.jobs()}


def test_reads_come_from_the_watch_not_from_lists(fake: FakeKube, cached: KubernetesCluster):
    fake.create("jobs", job_manifest("first"), "team-a")
    assert states(cached) == {"first": (True, "Suspended")}
    lists = job_lists(fake)
    assert lists == 1  # the informer's initial list

    fake.create("jobs", job_manifest("second"), "team-a")
    wait_until(lambda: "second" in states(cached), timeout=10, interval=0.02)
    for _ in range(5):
        cached.refresh()
    assert job_lists(fake) == lists  # followed by the watch, never listed again
    assert [n.name for n in cached.nodes()] == ["n1"]


def test_the_cache_reads_its_own_writes(fake: FakeKube, cached: KubernetesCluster):
    fake.runner.paused = True  # nothing else changes the job meanwhile
    fake.create("jobs", job_manifest("mine", runtime=600), "team-a")
    wait_until(lambda: "mine" in states(cached), timeout=10, interval=0.02)
    ref = next(j.ref for j in cached.jobs() if j.ref.name == "mine")
    watcher = cached.reader.watching()
    assert watcher is not None
    watcher.stop()  # from here on, only our own writes can change the cache
    cached.admit(ref, node_selector={})
    assert states(cached)["mine"] == (False, "Starting")
    # An older copy (a late watch event, a slower writer) never replaces a newer one.
    informer = watcher.job_informers[("Job", "team-a")]
    newer = informer.snapshot()[0]
    older = {**newer, "metadata": {**newer["metadata"], "resourceVersion": "1"}}
    informer.put(older)
    assert informer.snapshot()[0] is newer
    # Write-through updates what the watch knows; it never adds what it does not.
    stranger = {"metadata": {"namespace": "team-a", "name": "stranger", "resourceVersion": "9"}}
    informer.put(stranger)
    assert {o["metadata"]["name"] for o in informer.snapshot()} == {"mine"}


def test_a_stop_is_confirmed_by_a_fresh_read(fake: FakeKube, cached: KubernetesCluster):
    fake.create("jobs", job_manifest("fresh"), "team-a")
    wait_until(lambda: "fresh" in states(cached), timeout=10, interval=0.02)
    assert cached.views_may_lag
    ref = next(j.ref for j in cached.jobs() if j.ref.name == "fresh")
    fake.store.patch("jobs", "team-a", "fresh", {"spec": {"suspend": False}})
    info = cached.fresh_job(ref)
    assert info.suspended is False


def test_a_failing_watch_falls_back_to_listing(fake: FakeKube, cached: KubernetesCluster):
    fake.create("jobs", job_manifest("listed"), "team-a")
    cached.refresh()
    before = job_lists(fake)
    watcher = cached.reader.watching()
    assert watcher is not None
    watcher.job_informers[("Job", "team-a")].failing_since = time.monotonic() - (CACHE_STALE_S + 1)
    cached.refresh()
    assert job_lists(fake) == before + 1


def test_the_cache_is_off_by_default(fake: FakeKube):
    fake.add_namespace("team-a")
    cluster = make_adapter(fake.url, namespaces=["team-a"], kinds=["Job"])
    try:
        fake.create("jobs", job_manifest("plain"), "team-a")
        cluster.refresh()
        cluster.refresh()
        assert job_lists(fake) == 2
        assert cluster.reader.watching() is None
        assert not cluster.views_may_lag
    finally:
        cluster.api.close()


def test_nodes_come_from_the_informers_with_what_unmanaged_pods_use(
    fake: FakeKube, cached: KubernetesCluster
):
    cached.refresh()
    fake.create("jobs", job_manifest("not-ours", suspend=False, cpu="2", runtime=600), "team-a")
    wait_until(lambda: cached.nodes()[0].reserved.get("cpu") == 2000, timeout=10, interval=0.02)
    pod_lists = sum(
        1
        for r in fake.log_entries(types=["request"])
        if r.get("verb") == "list" and str(r.get("resource")).startswith("pods")
    )
    assert pod_lists == 1  # the informer's first list; the rest came by watch


def test_the_journal_gives_each_change_once_and_forgets_what_it_gave(
    fake: FakeKube, cached: KubernetesCluster
):
    fake.create("jobs", job_manifest("one"), "team-a")
    # Once the cache has seen it: under load its event could arrive after the cursor
    # below, and would then rightly be a change since (failed once in a loaded run).
    first = ("Job", "team-a", "one")
    wait_until(lambda: cached.job_infos({first}).get(first) is not None, timeout=10, interval=0.02)
    cursor, everything = cached.changed_jobs(None)
    assert everything is None  # no cursor yet: look at everything
    fake.create("jobs", job_manifest("two"), "team-a")
    key = ("Job", "team-a", "two")
    wait_until(lambda: key in (cached.changed_jobs(cursor)[1] or ()), timeout=10, interval=0.02)
    later, changed = cached.changed_jobs(cursor)
    assert changed == {key}
    info = cached.job_infos(changed)[key]
    assert info is not None
    assert info.suspended
    assert cached.changed_jobs(later)[1] == set()
    watcher = cached.reader.watching()
    assert watcher is not None
    assert key not in watcher.changed_at


def test_a_cursor_of_replaced_informers_means_look_at_everything(
    fake: FakeKube, cached: KubernetesCluster
):
    cursor, _ = cached.changed_jobs(None)
    assert cached.changed_jobs(cursor)[1] == set()
    cached.stop_watching()  # as a forked or restarted process starts informers anew
    fresh_cursor, keys = cached.changed_jobs(cursor)
    assert keys is None
    assert cached.changed_jobs(fresh_cursor)[1] == set()


def test_a_kind_without_its_crd_does_not_keep_the_cache_from_being_used(
    fake_kube_factory: Callable[..., FakeKube],
):
    fake = fake_kube_factory()
    fake.registry._types = {k: v for k, v in fake.registry._types.items() if v.kind != "JobSet"}
    fake.add_namespace("team-a")
    cluster = make_adapter(
        fake.url, namespaces=["team-a"], kinds=["Job", "JobSet"], watch_cache=True
    )
    try:
        fake.create("jobs", job_manifest("plain"), "team-a")
        started = time.monotonic()
        cluster.refresh()
        assert time.monotonic() - started < 10  # no wait for a collection that is not there
        assert cluster.reader.watching() is not None
        assert [j.ref.name for j in cluster.jobs()] == ["plain"]
        lists = job_lists(fake)
        cluster.refresh()
        assert job_lists(fake) == lists  # read from the cache, not listed
    finally:
        cluster.stop_watching()
        cluster.api.close()


def test_a_changed_job_is_decoded_once_per_resource_version(
    fake: FakeKube, cached: KubernetesCluster, monkeypatch: pytest.MonkeyPatch
):
    from queueing.cluster.kubernetes import reader

    decoded: list[str] = []
    job_info = reader.job_info

    def counting(kind: Any, obj: Any, *args: Any) -> Any:
        decoded.append(str(obj["metadata"]["resourceVersion"]))
        return job_info(kind, obj, *args)

    monkeypatch.setattr(reader, "job_info", counting)
    fake.create("jobs", job_manifest("one"), "team-a")
    key = ("Job", "team-a", "one")
    wait_until(lambda: cached.job_infos({key}).get(key) is not None, timeout=10, interval=0.02)
    first = cached.job_infos({key})[key]
    assert cached.job_infos({key})[key] is first
    assert len(decoded) == len(set(decoded))  # each version once, however often asked
    fake.store.patch("jobs", "team-a", "one", {"metadata": {"labels": {"seen": "twice"}}})
    wait_until(
        lambda: (cached.job_infos({key})[key] or first).labels.get("seen") == "twice",
        timeout=10,
        interval=0.02,
    )
    assert len(decoded) == len(set(decoded)) >= 2  # the new version was decoded anew
    # The next full view keeps what the journal's reads decoded.
    before = len(decoded)
    cached.refresh()
    assert next(j for j in cached.jobs() if j.ref.name == "one") is cached.job_infos({key})[key]
    assert len(decoded) == before
