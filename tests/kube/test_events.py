"""Kubernetes Events and QueueUnit conditions (issue 12, item 5): `kubectl describe`
tells the dashboard's story, deduplicated and rate-limited."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from queueing import kubeevents
from queueing.choices import Phase
from queueing.cluster.base import JobRef
from queueing.cluster.events import KubeEvent
from queueing.cluster.kubernetes.events import EventRecorder
from queueing.cluster.kubernetes.queueunits import admitted_conditions
from queueing.models import Workload
from tests.fakekube import FakeKube
from tests.kube.conftest import ApiErrors, job_manifest, make_adapter
from tests.kube.test_kube_cycle import build_world


def events_of(fake: FakeKube, namespace: str, name: str) -> list[dict[str, Any]]:
    items, *_ = fake.store.list("events", namespace)
    return [e for e in items if e["involvedObject"]["name"] == name]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_one_story_is_one_event_whose_count_grows(fake: FakeKube) -> None:
    fake.add_namespace("team-a")
    cluster = make_adapter(fake.url)
    ref = JobRef("Job", "batch/v1", "team-a", "j", "uid-1")
    story = KubeEvent(ref, "Queued", "Queued in queue q of quota a.")
    recorder = EventRecorder(cluster.rest)
    assert recorder.record([story, story]) == 2
    # A recorder of another process (or after a restart) finds it by name and bumps it.
    assert EventRecorder(cluster.rest).record([story]) == 1
    [event] = events_of(fake, "team-a", "j")
    assert (event["reason"], event["count"], event["type"]) == ("Queued", 3, "Normal")
    assert event["involvedObject"]["uid"] == "uid-1"
    assert event["source"]["component"] == "koord-queue"
    other = KubeEvent(ref, "Admitted", "Admitted by quota a.")
    recorder.record([other])
    assert sorted(e["reason"] for e in events_of(fake, "team-a", "j")) == ["Admitted", "Queued"]
    cluster.api.close()


def test_each_object_is_rate_limited_and_refills(fake: FakeKube) -> None:
    fake.add_namespace("team-a")
    cluster = make_adapter(fake.url)
    clock = Clock()
    recorder = EventRecorder(cluster.rest, burst=3, refill_s=10.0, clock=clock)
    noisy = JobRef("Job", "batch/v1", "team-a", "noisy", "uid-n")
    calm = JobRef("Job", "batch/v1", "team-a", "calm", "uid-c")
    stories = [KubeEvent(noisy, "PendingQuota", f"wait {i}") for i in range(5)]
    assert recorder.record(stories) == 3
    assert recorder.dropped == 2
    # Another object has its own allowance (the positive control of the limit).
    assert recorder.record([KubeEvent(calm, "Queued", "q")]) == 1
    assert recorder.record([KubeEvent(noisy, "PendingQuota", "wait 5")]) == 0
    clock.now += 10.0  # one token back
    assert recorder.record([KubeEvent(noisy, "PendingQuota", "wait 6")]) == 1
    assert len(events_of(fake, "team-a", "noisy")) == 4
    cluster.api.close()


def test_the_admitted_condition_moves_only_with_its_status() -> None:
    unit: dict[str, Any] = {"status": {"conditions": [{"type": "Other", "status": "True"}]}}
    first = admitted_conditions(unit, "Enqueued", "3 workloads ahead")
    admitted = next(c for c in first if c["type"] == "Admitted")
    assert (admitted["status"], admitted["reason"]) == ("False", "Enqueued")
    assert {"type": "Other", "status": "True"} in first  # others kept
    unit["status"]["conditions"] = [{**admitted, "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    same = admitted_conditions(unit, "Enqueued", "2 workloads ahead")
    assert same[0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert same[0]["message"] == "2 workloads ahead"
    moved = admitted_conditions(unit, "SchedReady", "")
    assert moved[0]["status"] == "True"
    assert moved[0]["lastTransitionTime"] != "2026-01-01T00:00:00Z"


@pytest.mark.django_db
def test_the_cycle_tells_its_story_on_the_job(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> None:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    cache.set(kubeevents.CURSOR_KEY, 0, None)  # tell everything from the start
    kubeevents._since.clear()
    kubeevents._explained.clear()
    fake.runner.paused = True  # it stays admitted: the story is the queue's
    fake.create("jobs", job_manifest("told", cpu="4"), "team-a")
    fake.create("jobs", job_manifest("waits", cpu="12"), "team-a")  # more than the quota max
    world.tick_until(lambda: Workload.objects.filter(name="told", phase=Phase.ADMITTED).exists())
    world.tick_until(lambda: Workload.objects.get(name="waits").explanation is not None)
    world.tick_until(lambda: events_of(fake, "team-a", "waits")[1:])
    told = {e["reason"]: e for e in events_of(fake, "team-a", "told")}
    assert set(told) >= {"Queued", "Admitted"}
    assert told["Queued"]["message"] == "Queued in queue team-a-q of quota team-a-q."
    assert told["Admitted"]["message"].startswith("Admitted by quota team-a-q")
    uid = fake.store.get("jobs", "team-a", "told")["metadata"]["uid"]
    assert told["Admitted"]["involvedObject"]["uid"] == uid
    waits = {e["reason"]: e for e in events_of(fake, "team-a", "waits")}
    pending = [r for r in waits if r.startswith("Pending")]
    assert pending, waits
    assert waits[pending[0]]["message"] == Workload.objects.get(name="waits").reason
    # Nothing new to tell: another sync writes nothing (told once, not every cycle).
    before = {e["metadata"]["name"]: e["count"] for e in events_of(fake, "team-a", "waits")}
    world.tick_until(lambda: True)
    after = {e["metadata"]["name"]: e["count"] for e in events_of(fake, "team-a", "waits")}
    assert after == before
    cluster.api.close()


class Sink:
    """An EventSink that keeps what it is told."""

    def __init__(self) -> None:
        self.told: list[KubeEvent] = []

    def record_events(self, events: Any) -> int:
        self.told.extend(events)
        return len(events)


@pytest.mark.django_db
@pytest.mark.parametrize("chunk", [1, 2])
def test_a_sync_spends_at_most_its_time_budget_and_the_rest_follows(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None], chunk: int
) -> None:
    """The time budget is looked at before each chunk of steps (what the recorder
    writes at once)."""
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    for name in ("one", "two", "three"):
        fake.create("jobs", job_manifest(name, cpu="20"), "team-a")  # never fits: stays queued
    world.tick_until(lambda: Workload.objects.count() == 3)
    cache.set(kubeevents.CURSOR_KEY, 0, None)
    kubeevents._since.clear()
    kubeevents._explained.clear()
    ticks = iter(x * 0.15 for x in range(1000))  # each look at the clock: 150 ms later
    sink = Sink()
    now = Workload.objects.latest("id").created_at
    first = kubeevents.publish(sink, now, clock=lambda: next(ticks), chunk=chunk)
    assert first == chunk  # the second chunk would start past the 200 ms budget
    while kubeevents.publish(sink, now, clock=lambda: next(ticks), chunk=chunk):
        pass
    queued = sorted(e.ref.name for e in sink.told if e.reason == "Queued")
    assert queued == ["one", "three", "two"]  # each told once, none lost
    cluster.api.close()


@pytest.mark.django_db
def test_a_telling_writes_its_cursor_once(
    fake: FakeKube,
    api_errors: ApiErrors,
    use_cluster: Callable[[Any], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One cache write per telling, after the steps told (was one per step: a Redis
    round trip each, a third of the telling thread's time in the end-to-end benchmark)."""
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    for name in ("one", "two", "three"):
        fake.create("jobs", job_manifest(name, cpu="20"), "team-a")
    world.tick_until(lambda: Workload.objects.count() == 3)
    cache.set(kubeevents.CURSOR_KEY, 0, None)
    kubeevents._since.clear()
    kubeevents._explained.clear()
    writes: list[Any] = []
    real_set = cache.set

    def counted(key: str, value: Any, *args: Any, **kwargs: Any) -> Any:
        if key == kubeevents.CURSOR_KEY:
            writes.append(value)
        return real_set(key, value, *args, **kwargs)

    monkeypatch.setattr(cache, "set", counted)
    sink = Sink()
    now = Workload.objects.latest("id").created_at
    told = kubeevents.publish(sink, now, clock=lambda: 0.0)  # within its budget, however slow
    assert sorted(e.ref.name for e in sink.told if e.reason == "Queued") == [
        "one",
        "three",
        "two",
    ]
    assert told >= 3
    assert len(writes) == 1
    assert cache.get(kubeevents.CURSOR_KEY) == writes[0] > 0
    cluster.api.close()


@pytest.mark.django_db
def test_waiting_jobs_are_looked_at_for_a_new_explanation_at_most_every_two_seconds(world):
    """A teller that is behind tells several times a second; each look for explanations
    that changed kind reads every waiting row a forecast rewrote. It looks at most every
    PENDING_EVERY: a change is told at the first telling after that, not lost."""
    from datetime import timedelta

    from tests.builders import submit

    cache.set(kubeevents.CURSOR_KEY, 10**9, None)  # only the Pending<Kind> Events here
    kubeevents._since.clear()
    kubeevents._explained.clear()
    waiting = submit(world, "waits")
    sink = Sink()
    now = timezone.now()

    def explained(kind: str, at: datetime) -> None:
        Workload.objects.filter(pk=waiting.pk).update(
            explanation={"kind": kind}, reason=f"waits for {kind}", updated_at=at
        )

    explained("quota", now)
    kubeevents.publish(sink, now)
    assert [e.reason for e in sink.told] == ["PendingQuota"]
    explained("nodes", now + timedelta(seconds=1))
    kubeevents.publish(sink, now + timedelta(seconds=1))  # within the two seconds
    assert [e.reason for e in sink.told] == ["PendingQuota"]
    kubeevents.publish(sink, now + kubeevents.PENDING_EVERY)
    assert [e.reason for e in sink.told] == ["PendingQuota", "PendingNodes"]
