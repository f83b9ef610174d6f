"""Cycles woken by events (queueing.wake): what wakes which tree, and what a wake runs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache

from queueing import actions, lease, wake
from queueing.admission import react
from queueing.choices import Phase
from queueing.models import Quota, Workload
from tests.builders import SYSTEM, submit

pytestmark = pytest.mark.django_db


class Sent(list[tuple[str, float]]):
    def __call__(self, target: str, countdown_s: float) -> None:
        self.append((target, countdown_s))

    def targets(self) -> list[str]:
        return [target for target, _ in self]


@pytest.fixture
def sent(settings) -> Iterator[Sent]:
    settings.KQ_WAKE = True
    settings.KQ_WAKE_DEBOUNCE_MS = 20
    cache.clear()
    recorder = Sent()
    wake.set_sender(recorder)
    yield recorder
    wake.set_sender(None)
    cache.clear()


def second_tree() -> Quota:
    root = actions.create_quota(
        SYSTEM, name="other", tenant=None, parent=None, min={"cpu": "8"}, max={"cpu": "8"}
    )
    tenant = actions.create_tenant(SYSTEM, name="team-b")
    return actions.create_quota(
        SYSTEM,
        name="team-b-q",
        tenant=tenant,
        parent=root,
        min={"cpu": "8"},
        max={"cpu": "8"},
        namespaces=["team-b"],
    )


def test_submissions_wake_their_tree_once_per_debounce_window(
    world, sent, django_capture_on_commit_callbacks
):
    other = second_tree()
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        submit(world, "a", cpu="1")
    with django_capture_on_commit_callbacks(execute=True):
        submit(world, "b", cpu="1")  # rides along with the react already on its way
    with django_capture_on_commit_callbacks(execute=True):
        submit(world, "c", cpu="1", quota=other)
    assert sent == [("cluster", 0.02), ("other", 0.02)]
    # Once the react starts, the next change needs (and gets) a react of its own.
    wake.taken("cluster")
    with django_capture_on_commit_callbacks(execute=True):
        submit(world, "d", cpu="1")
    assert sent.targets() == ["cluster", "other", "cluster"]


def test_the_cycles_own_writes_wake_nothing_but_a_cancellation_does(
    world, sent, django_capture_on_commit_callbacks
):
    workload = submit(world, "w", cpu="1")
    with django_capture_on_commit_callbacks(execute=True):
        summary = react("cluster", cluster=world.cluster, now=world.clock())
    assert summary.admitted == 1
    # The cycle admitted and annotated: no wake for that, only the timer for the job's end.
    assert sent.targets() == [wake.SYNC]
    with django_capture_on_commit_callbacks(execute=True):
        actions.cancel_workload(SYSTEM, Workload.objects.get(pk=workload.pk))
    assert sent.targets() == [wake.SYNC, "cluster"]  # positive control: the tree, woken


def test_quota_and_queue_edits_wake(world, sent, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        actions.update_quota(SYSTEM, world.quota, max={"cpu": "12"})
    assert sent.targets() == ["cluster"]
    wake.taken("cluster")
    with django_capture_on_commit_callbacks(execute=True):
        actions.update_queue(SYSTEM, world.queue, priority=5)
    assert sent.targets() == ["cluster", wake.ALL]


def test_wakes_are_off_without_a_broker(world, settings, django_capture_on_commit_callbacks):
    recorder = Sent()
    wake.set_sender(recorder)
    try:
        settings.KQ_WAKE = False
        with django_capture_on_commit_callbacks(execute=True):
            submit(world, "quiet", cpu="1")
        assert recorder == []
        settings.KQ_WAKE = True  # positive control
        cache.clear()
        with django_capture_on_commit_callbacks(execute=True):
            submit(world, "heard", cpu="1")
        assert recorder.targets() == ["cluster"]
    finally:
        wake.set_sender(None)
        cache.clear()


def test_a_finishing_job_sets_a_timer_and_its_sync_hands_the_quota_over(world, sent):
    # The leaf may use the whole root (16 cpu): one job holds it, the next one waits.
    first = submit(world, "first", cpu="8", count=2, runtime=30)
    second = submit(world, "second", cpu="8", count=2, runtime=30)
    summary = react("cluster", cluster=world.cluster, now=world.clock())
    assert summary.admitted == 1
    assert Workload.objects.get(pk=first.pk).phase == Phase.ADMITTED
    # The simulated job started now and finishes in 30 s: a sync is woken then.
    assert sent == [(wake.SYNC, pytest.approx(30 + wake.TIMER_SLACK_S, abs=1e-3))]
    world.clock.advance(30)
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    assert summary.sync["transitions"] >= 1
    assert Workload.objects.get(pk=first.pk).phase == Phase.SUCCEEDED
    assert Workload.objects.get(pk=second.pk).phase == Phase.ADMITTED
    assert summary.admitted == 1
    # The sync's own transitions woke nothing (the react cycled every tree itself); the
    # only new send is the timer for the second job.
    assert sent.targets() == [wake.SYNC, wake.SYNC]


def test_a_tree_whose_lease_is_busy_is_woken_again(world, sent):
    submit(world, "w", cpu="1")
    held = lease.acquire("cycle:cluster", holder="someone-else")
    assert held is not None
    summary = react("cluster", cluster=world.cluster, now=world.clock())
    assert summary.skipped == ["cluster"]
    assert sent == [("cluster", 0.1)]
    lease.release(held)
    wake.taken("cluster")
    summary = react("cluster", cluster=world.cluster, now=world.clock())
    assert summary.admitted == 1


def test_roots_of_quotas_walks_up_the_tree(world):
    assert wake.roots_of_quotas([world.quota.pk]) == {"cluster"}
    assert wake.roots_of_quotas([world.root.pk]) == {"cluster"}
    assert wake.roots_of_quotas([]) == set()


def test_deleting_a_quota_wakes_its_own_tree_only(world, sent, django_capture_on_commit_callbacks):
    other = second_tree()
    spare = actions.create_quota(
        SYSTEM, name="spare", tenant=other.tenant, parent=other.parent, max={"cpu": "1"}
    )
    sent.clear()
    cache.clear()
    with django_capture_on_commit_callbacks(execute=True):
        actions.delete_quota(SYSTEM, spare)
    # Found through its parent (the deleted quota is gone from the tree): not every tree.
    assert sent.targets() == ["other"]


def test_a_heads_only_cycle_that_admits_every_head_it_listed_wakes_its_tree_again(
    world, sent, settings, monkeypatch
):
    from queueing import state
    from queueing.admission import cycle_root

    settings.KQ_FORECAST_EVERY_S = 1000.0  # after the first, cycles only admit, from heads
    monkeypatch.setattr(state, "HEAD_ROWS", 2)
    cycle_root("cluster", cluster=world.cluster, now=world.clock())  # the forecasting one
    for i in range(5):
        submit(world, f"s{i}", cpu="1", runtime=600)
    sent.clear()
    report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    assert len(report.admitted) == 2  # the two heads listed; three more fit
    assert sent.targets() == ["cluster"]
    # Control: listing every one left, the cycle admits them all and wakes nothing.
    wake.taken("cluster")
    sent.clear()
    monkeypatch.setattr(state, "HEAD_ROWS", 10)
    report = cycle_root("cluster", cluster=world.cluster, now=world.clock())
    assert report is not None
    assert len(report.admitted) == 3
    assert sent.targets() == []
