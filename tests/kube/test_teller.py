"""The telling in the watcher process (queueing.teller): it holds the ``telling`` lease
while it lives, the workers' syncs leave the telling to it, and take it back from the
same cursors when the watcher is gone."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from queueing import kubeevents, kubesync
from queueing.choices import Phase
from queueing.models import CycleLease, Workload
from queueing.teller import NICE, Teller
from tests.fakekube import FakeKube
from tests.kube.conftest import ApiErrors, job_manifest, make_adapter
from tests.kube.test_events import Sink, events_of
from tests.kube.test_kube_cycle import build_world
from tests.services import wait_until


@pytest.fixture(autouse=True)
def fresh_telling() -> Any:
    cache.set(kubeevents.CURSOR_KEY, 0, None)  # tell everything from the start
    kubeevents._since.clear()
    kubeevents._explained.clear()
    kubesync._told_elsewhere_until = 0.0
    yield
    kubesync.settle()
    kubesync._told_elsewhere_until = 0.0


def telling_lease() -> dict[str, Any]:
    return dict(CycleLease.objects.filter(name="telling").values("holder", "token")[0])


@pytest.mark.django_db(transaction=True)
def test_the_watchers_teller_tells_and_the_workers_syncs_leave_it_alone(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> None:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    fake.runner.paused = True  # it stays admitted: the story is the queue's
    watcher = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    teller = Teller(watcher, interval_s=0.05)
    stop = threading.Event()
    teller.start(stop)
    try:
        wait_until(lambda: teller.held is not None, timeout=10, interval=0.01)
        fake.create("jobs", job_manifest("told", cpu="4"), "team-a")
        world.tick_until(
            lambda: Workload.objects.filter(name="told", phase=Phase.ADMITTED).exists()
        )
        kubesync.settle()
        # The sync's telling found the lease held and leaves it alone for a while.
        assert kubesync._told_elsewhere_until > time.monotonic()
        reasons = lambda: {e["reason"] for e in events_of(fake, "team-a", "told")}  # noqa: E731
        wait_until(lambda: reasons() >= {"Queued", "Admitted"}, timeout=10, interval=0.02)
        # The events are on the server before the teller's thread counts its telling
        # (``tell`` returns, then ``tellings += 1``): wait for the count, not race it.
        wait_until(lambda: teller.tellings > 0, timeout=10, interval=0.01)
        assert teller.tellings > 0
        # Advice yields the cores: the teller's thread alone runs niced (Linux).
        native = int(teller._thread.native_id or 0)  # type: ignore[union-attr]
        assert os.getpriority(os.PRIO_PROCESS, native) == NICE
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) < NICE
        assert telling_lease()["holder"] == teller.held.holder  # type: ignore[union-attr]
    finally:
        stop.set()
        teller.join()
        watcher.api.close()
        cluster.api.close()
    assert teller.held is None
    assert telling_lease()["holder"] == ""  # given back: a worker tells at its next sync
    told = {e["reason"]: e for e in events_of(fake, "team-a", "told")}
    assert told["Admitted"]["count"] == 1  # told once, by one teller


@pytest.mark.django_db(transaction=True)
def test_a_gone_watcher_strands_the_telling_only_for_its_lease(
    fake: FakeKube,
    api_errors: ApiErrors,
    use_cluster: Callable[[Any], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    build_world(fake, cluster)
    teller = Teller(cluster)
    assert teller.once() is False  # nothing to tell, and nothing left over
    first = teller.held
    assert first is not None
    worker_told: list[Any] = []
    monkeypatch.setattr(kubesync, "tell", lambda *a, **kw: worker_told.append(a))
    now = timezone.now()
    kubesync._tell_in_background(cluster, now, 0.0)
    assert worker_told == []  # the watcher holds the lease
    assert kubesync._told_elsewhere_until > time.monotonic()
    # The watcher is killed (or stalls): nobody renews its lease, which runs out. Time
    # is moved on rather than slept through (the row's expiry and the teller's own view
    # of it, both into the past), so that a slow machine cannot make the lease run out
    # before the first attempt above.
    past = timezone.now() - timedelta(seconds=1)
    CycleLease.objects.filter(name="telling", token=first.token).update(expires_at=past)
    teller.held = replace(first, expires_at=past)
    kubesync._told_elsewhere_until = 0.0
    kubesync._tell_in_background(cluster, now, 0.0)
    assert len(worker_told) == 1  # a worker's sync tells again
    assert telling_lease()["holder"] == ""  # and gives the lease back after each telling
    # A watcher back (or this one, if it only stalled) finds its old lease gone, and
    # takes a new one: one teller at a time throughout.
    monkeypatch.undo()
    assert teller.once() is False
    assert teller.held is not None
    assert teller.held.token > first.token
    teller.release()
    cluster.api.close()


@pytest.mark.django_db
def test_a_telling_that_stops_at_its_budget_says_it_is_behind(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> None:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    for name in ("one", "two", "three"):
        fake.create("jobs", job_manifest(name, cpu="20"), "team-a")  # never fits: stays queued
    world.tick_until(lambda: Workload.objects.count() == 3)
    kubesync.settle()
    cache.set(kubeevents.CURSOR_KEY, 0, None)
    sink = Sink()
    now = Workload.objects.latest("id").created_at
    rounds = 0
    while True:
        kubeevents.publish(sink, now, budget=1, clock=lambda: 0.0)
        rounds += 1
        if not kubeevents.behind():
            break
        assert rounds < 20
    queued = [e.ref.name for e in sink.told if e.reason == "Queued"]
    assert sorted(queued) == ["one", "three", "two"]  # each told once, none lost
    assert rounds >= 3  # one step per telling, each saying more was left
    kubeevents.publish(sink, now, clock=lambda: 0.0)
    assert not kubeevents.behind()  # within the budget: nothing left over
    cluster.api.close()


@pytest.mark.django_db(transaction=True)
def test_an_idle_teller_waits_for_a_change_of_the_cluster(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> None:
    """After a telling that told nothing, the next waits for the watcher's informers to
    see a change (``poke``), not for the interval: an idle cluster is not read twice a
    second."""
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    fake.runner.paused = True
    watcher = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    teller = Teller(watcher, interval_s=0.01, idle_s=600.0)
    stop = threading.Event()
    teller.start(stop)
    try:
        wait_until(lambda: teller.tellings == 1, timeout=10, interval=0.01)
        fake.create("jobs", job_manifest("told", cpu="4"), "team-a")
        world.tick_until(
            lambda: Workload.objects.filter(name="told", phase=Phase.ADMITTED).exists()
        )
        kubesync.settle()
        assert teller.tellings == 1  # still waiting: nothing poked it
        assert events_of(fake, "team-a", "told") == []
        teller.poke("Job changed")
        reasons = lambda: {e["reason"] for e in events_of(fake, "team-a", "told")}  # noqa: E731
        wait_until(lambda: reasons() >= {"Queued", "Admitted"}, timeout=10, interval=0.02)
        wait_until(lambda: teller.tellings >= 2, timeout=10, interval=0.01)  # it told them
    finally:
        stop.set()
        teller.join()
        watcher.api.close()
        cluster.api.close()
