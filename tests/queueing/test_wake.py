"""Cycles woken by events (queueing.wake): what wakes which tree, and what a wake runs."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.core.cache import cache

from queueing import actions, lease, wake
from queueing.admission import react
from queueing.choices import Phase
from queueing.models import Quota, SimJob, Workload
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


@pytest.fixture
def syncs(monkeypatch) -> list[int]:
    """One entry per sync the cycle's code runs (beat's tick or a react)."""
    from queueing import admission

    ran: list[int] = []
    real_sync = admission.sync_cluster

    def counted(*args, **kwargs):
        ran.append(1)
        return real_sync(*args, **kwargs)

    monkeypatch.setattr(admission, "sync_cluster", counted)
    return ran


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


# The sync's transitions wake their trees once they commit: a transactional test, so
# that they commit inside the woken sync (on_commit callbacks run at once).
@pytest.mark.django_db(transaction=True)
def test_a_finishing_job_sets_a_timer_and_its_sync_wakes_its_tree_alone(world, sent):
    other = second_tree()
    # The leaf may use the whole root (16 cpu): one job holds it, the next one waits.
    first = submit(world, "first", cpu="8", count=2, runtime=30)
    second = submit(world, "second", cpu="8", count=2, runtime=30)
    submit(world, "elsewhere", cpu="1", quota=other)  # the other tree has work waiting too
    cache.clear()
    sent.clear()
    summary = react("cluster", cluster=world.cluster, now=world.clock())
    assert summary.admitted == 1
    assert summary.roots == ["cluster"]  # a tree's react cycles that tree, nothing else
    assert Workload.objects.get(pk=first.pk).phase == Phase.ADMITTED
    # The simulated job started now and finishes in 30 s: a sync is woken then.
    assert sent == [(wake.SYNC, pytest.approx(30 + wake.TIMER_SLACK_S, abs=1e-3))]
    world.clock.advance(30)
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    assert summary.sync["transitions"] >= 1
    assert Workload.objects.get(pk=first.pk).phase == Phase.SUCCEEDED
    # The sync cycles the tree of the finish itself, in the same task -- not the other
    # tree, which nothing touched -- and sends no react for it.
    assert summary.roots == ["cluster"]
    assert summary.admitted == 1
    assert summary.woken == ["cluster"]
    assert Workload.objects.get(pk=second.pk).phase == Phase.ADMITTED
    # Only the timer for the second job's end is new.
    assert sent.targets()[1:] == [wake.SYNC]


@pytest.mark.django_db(transaction=True)
def test_a_sync_leaves_a_touched_tree_to_the_react_on_its_way(world, sent, settings):
    first = submit(world, "first", cpu="8", count=2, runtime=30)
    second = submit(world, "second", cpu="8", count=2, runtime=30)
    react("cluster", cluster=world.cluster, now=world.clock())
    assert Workload.objects.get(pk=first.pk).phase == Phase.ADMITTED
    world.clock.advance(30)
    wake.wake(["cluster"], reason="test")  # a react of the tree is queued already
    sent.clear()
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    assert Workload.objects.get(pk=first.pk).phase == Phase.SUCCEEDED
    # That react will see the finish: the sync neither cycles the tree nor queues another.
    assert summary.roots == []
    assert summary.woken == ["cluster"]
    assert sent == []
    assert Workload.objects.get(pk=second.pk).phase == Phase.PENDING
    # With KQ_SYNC_CYCLES off, a sync wakes each tree it touched as a task of its own.
    wake.taken("cluster")
    react("cluster", cluster=world.cluster, now=world.clock())
    settings.KQ_SYNC_CYCLES = False
    world.clock.advance(30)
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    assert summary.roots == []
    assert summary.woken == ["cluster"]
    assert ("cluster", 0.0) in sent


class Stamped(list[tuple[str, float | None]]):
    """A sender that passes each react its stamp, as the Celery task does."""

    def __call__(self, target: str, countdown_s: float, stamp: float | None = None) -> None:
        self.append((target, stamp))

    def stamp_of(self, target: str) -> float | None:
        return [stamp for t, stamp in self if t == target][-1]


@pytest.fixture
def stamped(settings) -> Iterator[Stamped]:
    settings.KQ_WAKE = True
    settings.KQ_SYNC_PASS_TAKES = True
    cache.clear()
    recorder = Stamped()
    wake.set_sender(recorder)
    assert wake.stamps_taken()
    yield recorder
    wake.set_sender(None)
    cache.clear()


@pytest.mark.django_db(transaction=True)
def test_a_react_whose_wake_another_task_took_does_nothing(world, stamped):
    submit(world, "w", cpu="1", runtime=30)
    wake.wake(["cluster"], reason="test")
    first = stamped.stamp_of("cluster")
    assert isinstance(first, float)
    wake.take({"cluster": first})  # a sync's pass cycles the tree in its place
    assert wake.on_its_way(["cluster"]) == set()  # a wake from now sends its own react
    summary = react("cluster", cluster=world.cluster, now=world.clock(), stamp=first)
    assert summary.skipped == ["cluster"]
    assert summary.roots == []
    assert Workload.objects.get(name="w").phase == Phase.PENDING
    # Positive controls: a later wake's react runs; so does one whose key merely expired
    # (its wake was never taken: the work is still to do).
    wake.wake(["cluster"], reason="test")
    second = stamped.stamp_of("cluster")
    assert second != first
    cache.delete(wake.key("cluster"))
    summary = react("cluster", cluster=world.cluster, now=world.clock(), stamp=second)
    assert summary.roots == ["cluster"]
    assert summary.admitted == 1


@pytest.mark.django_db(transaction=True)
def test_a_woken_sync_cycles_a_touched_tree_whose_react_is_queued_and_takes_that_wake(
    world, stamped
):
    first = submit(world, "first", cpu="8", count=2, runtime=30)
    second = submit(world, "second", cpu="8", count=2, runtime=30)
    react("cluster", cluster=world.cluster, now=world.clock())
    assert Workload.objects.get(pk=first.pk).phase == Phase.ADMITTED
    world.clock.advance(30)
    cache.clear()
    wake.wake(["cluster"], reason="test")  # a react of the tree is queued already
    queued = stamped.stamp_of("cluster")
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    assert Workload.objects.get(pk=first.pk).phase == Phase.SUCCEEDED
    # The sync cycles the tree now (without stamps it left it to that react, which on a
    # worker serving the queue alone runs after every task queued before it) ...
    assert summary.roots == ["cluster"]
    assert Workload.objects.get(pk=second.pk).phase == Phase.ADMITTED
    # ... and the queued react then finds its work done.
    again = react("cluster", cluster=world.cluster, now=world.clock(), stamp=queued)
    assert again.skipped == ["cluster"]
    assert again.roots == []


@pytest.mark.django_db(transaction=True)
def test_a_woken_sync_runs_again_for_a_wake_of_the_sync_that_came_meanwhile(
    world, stamped, syncs, monkeypatch
):
    from queueing import admission

    a = submit(world, "a", cpu="8", count=2, runtime=30)
    b = submit(world, "b", cpu="8", count=2, runtime=600)
    c = submit(world, "c", cpu="8", count=2, runtime=600)
    react("cluster", cluster=world.cluster, now=world.clock())
    world.clock.advance(30)  # "a" finished
    cache.clear()
    real = admission._cycle_woken
    woke: list[float | None] = []

    def then_a_finish_is_heard(*args, **kwargs):
        left = real(*args, **kwargs)
        if not woke:  # while the pass cycles, "b" finishes and the informers wake a sync
            SimJob.objects.filter(name="b").update(runtime_s=0.0)
            wake.wake(None, sync=True, reason="test")
            woke.append(stamped.stamp_of(wake.SYNC))
        return left

    monkeypatch.setattr(admission, "_cycle_woken", then_a_finish_is_heard)
    syncs.clear()
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    # Two syncs and two cycles in the one task: "a"'s finish admitted "b", "b"'s "c".
    assert len(syncs) == 2
    assert summary.roots == ["cluster", "cluster"]
    assert Workload.objects.get(pk=a.pk).phase == Phase.SUCCEEDED
    assert Workload.objects.get(pk=b.pk).phase == Phase.SUCCEEDED
    assert Workload.objects.get(pk=c.pk).phase == Phase.ADMITTED
    # The sync's react that the wake sent finds its work done.
    assert react(wake.SYNC, cluster=world.cluster, now=world.clock(), stamp=woke[0]).skipped == [
        wake.SYNC
    ]
    assert len(syncs) == 2


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("pass_ms", [1, 0])
def test_a_woken_sync_syncs_again_before_the_trees_left_when_its_time_is_up(
    world, sent, syncs, settings, monkeypatch, pass_ms
):
    """KQ_SYNC_PASS_MS: the trees a sync woke are cycled in turn until the pass's time is
    up; the sync runs again before the rest, which then see what finished meanwhile."""
    from queueing import admission

    settings.KQ_SYNC_PASS_MS = pass_ms
    other = second_tree()
    submit(world, "a", cpu="8", runtime=30)
    submit(world, "h1", cpu="4", runtime=30, quota=other)
    submit(world, "h2", cpu="4", runtime=600, quota=other)
    react("cluster", cluster=world.cluster, now=world.clock())
    react("other", cluster=world.cluster, now=world.clock())
    waiting = submit(world, "w", cpu="8", quota=other)
    world.clock.advance(30)  # "a" and "h1" finished: the sync touches both trees
    cache.clear()
    real = admission.cycle_root

    def slow_and_meanwhile_h2_ends(root, **kwargs):
        report = real(root, **kwargs)
        if root == "cluster":
            SimJob.objects.filter(name="h2").update(runtime_s=0.0)
            time.sleep(0.005)  # past the pass's time
        return report

    monkeypatch.setattr(admission, "cycle_root", slow_and_meanwhile_h2_ends)
    syncs.clear()
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    assert summary.roots == ["cluster", "other"]
    assert summary.carried == []
    if pass_ms:
        # The second sync saw "h2" end before "other" cycled: "w" took its room.
        assert len(syncs) == 2
        assert Workload.objects.get(pk=waiting.pk).phase == Phase.ADMITTED
    else:
        # Control: both trees in turn after one sync; "w" waits for the next.
        assert len(syncs) == 1
        assert Workload.objects.get(pk=waiting.pk).phase == Phase.PENDING


@pytest.mark.django_db(transaction=True)
def test_a_sync_that_moved_nothing_wakes_no_tree(world, sent):
    submit(world, "w", cpu="1", runtime=30)
    react("cluster", cluster=world.cluster, now=world.clock())
    sent.clear()
    wake.taken(wake.SYNC)
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())  # nothing finished
    assert summary.woken == []
    assert summary.roots == []
    assert sent.targets() == [wake.SYNC]  # the timer for the job's end, nothing else
    # Control: once the job has finished, the same sync wakes its tree.
    world.clock.advance(30)
    sent.clear()
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    assert summary.woken == ["cluster"]
    assert summary.roots == ["cluster"]  # cycled in the same task (KQ_SYNC_CYCLES)


@pytest.mark.django_db(transaction=True)
def test_a_sync_that_frees_room_also_wakes_a_tree_waiting_for_node_room(world, sent):
    other = second_tree()
    # The first tree fills both 8-cpu nodes; the second tree's quota would admit its job
    # but no node has room: it waits for nodes, not for quota.
    holder = submit(world, "holder", cpu="8", count=2, runtime=30)
    react("cluster", cluster=world.cluster, now=world.clock())
    assert Workload.objects.get(pk=holder.pk).phase == Phase.ADMITTED
    stuck = submit(world, "stuck", cpu="4", quota=other)
    react("other", cluster=world.cluster, now=world.clock())
    assert Workload.objects.get(pk=stuck.pk).phase == Phase.PENDING
    assert wake.node_bound(["cluster", "other"]) == {"other"}
    world.clock.advance(30)
    cache.clear()  # no wake on its way
    wake.note_node_bound("other", True)
    summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
    # The finish was in the first tree; the second waits for the room it frees.
    assert summary.woken == ["cluster", "other"]
    assert summary.roots == ["cluster", "other"]  # both cycled in the sync's task
    assert Workload.objects.get(pk=stuck.pk).phase == Phase.ADMITTED
    # Once admitted, the second tree waits for nothing: the next finish leaves it alone.
    assert wake.node_bound(["other"]) == set()


def test_a_fan_out_wakes_each_tree_as_its_own_task(world, sent):
    second_tree()
    summary = react(wake.ALL, cluster=world.cluster, now=world.clock())
    assert summary.roots == []
    assert sorted(sent) == [("cluster", 0.0), ("other", 0.0)]


def test_beats_tick_does_not_repeat_what_a_wake_just_ran(world, sent, settings, syncs):
    import time

    from queueing import admission
    from queueing import world as worlds

    other = second_tree()
    settings.KQ_CYCLE_INTERVAL_S = 3.0
    react(wake.SYNC, cluster=world.cluster, now=world.clock())
    react("cluster", cluster=world.cluster, now=world.clock())
    assert len(syncs) == 1
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    # The woken sync and the woken tree ran just now: the tick cycles the tree nobody did.
    assert len(syncs) == 1
    assert summary.sync == {"recent": True}
    assert summary.roots == ["other"]
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert summary.roots == []  # nothing changed in either tree since its cycle
    # A change in "other" whose wake was lost (its task gone, its key expired): the
    # tick finds it in the tree's journal.
    waiting = submit(world, "lost", cpu="1", quota=other)
    worlds.record({"other": [waiting.pk]})
    cache.delete(wake.key("other"))
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert summary.roots == ["other"]
    assert summary.admitted == 1
    # Two intervals after their last cycles the tick cycles unchanged trees too (time
    # alone moves some decisions), and syncs an interval after the woken sync.
    settings.KQ_CYCLE_INTERVAL_S = 0.05
    time.sleep(0.12)
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert len(syncs) == 2
    assert sorted(summary.roots) == ["cluster", "other"]
    # With wakes off the tick does everything, every time.
    settings.KQ_CYCLE_INTERVAL_S = 3.0
    react(wake.SYNC, cluster=world.cluster, now=world.clock())
    settings.KQ_WAKE = False
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert len(syncs) == 4
    assert sorted(summary.roots) == ["cluster", "other"]


def test_beats_tick_takes_a_job_that_merely_started_for_no_change(world, sent, settings):
    from queueing import admission
    from queueing import world as worlds
    from queueing.sync import sync_cluster

    settings.KQ_CYCLE_INTERVAL_S = 3.0
    job = submit(world, "w", cpu="1", runtime=600)
    react("cluster", cluster=world.cluster, now=world.clock())
    assert Workload.objects.get(pk=job.pk).phase == Phase.ADMITTED
    sync_cluster(world.cluster, now=world.clock.advance(1))
    assert Workload.objects.get(pk=job.pk).phase == Phase.RUNNING
    # The job's start is journaled (the tree's worlds read it) but wakes no cycle, and
    # the tick does not take it for a change whose wake was lost.
    assert wake.on_its_way(["cluster"]) == set()
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert summary.roots == []
    # Control: a change that wakes (its wake lost) is still caught.
    worlds.record({"cluster": [job.pk]})
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert summary.roots == ["cluster"]


def test_beats_tick_leaves_a_tree_to_the_react_on_its_way(world, sent, settings):
    from queueing import admission
    from queueing import world as worlds

    second_tree()
    settings.KQ_CYCLE_INTERVAL_S = 3.0
    wake.wake(["other"], reason="test")  # a react of "other" is queued, not yet started
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert summary.roots == ["cluster"]
    assert summary.sync != {"recent": True}  # no sync was woken: the tick's own runs
    # Control: once that react has started, the tick no longer leaves the tree to it.
    wake.taken("other")
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert summary.roots == ["other"]
    # A fan-out on its way covers every tree, changed or not.
    worlds.record({"cluster": [1], "other": [2]})
    wake.wake(None, reason="test")
    summary = admission.tick(cluster=world.cluster, now=world.clock())
    assert summary.roots == []


def test_a_tree_whose_lease_is_busy_is_woken_again(world, sent):
    submit(world, "w", cpu="1")
    held = lease.acquire("cycle:cluster", holder="someone-else")
    assert held is not None
    summary = react("cluster", cluster=world.cluster, now=world.clock())
    assert summary.skipped == ["cluster"]
    assert sent == [("cluster", 0.1)]
    # Still busy (a killed holder's lease lasts its TTL): the retries space out.
    for _ in range(6):
        wake.taken("cluster")
        react("cluster", cluster=world.cluster, now=world.clock())
    assert [delay for _, delay in sent] == [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    lease.release(held)
    wake.taken("cluster")
    summary = react("cluster", cluster=world.cluster, now=world.clock())
    assert summary.admitted == 1
    # Once it got its lease, the next busy retry starts short again.
    held = lease.acquire("cycle:cluster", holder="someone-else")
    sent.clear()
    wake.taken("cluster")
    react("cluster", cluster=world.cluster, now=world.clock())
    assert [item for item in sent if item[0] == "cluster"] == [("cluster", 0.1)]
    lease.release(held)


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


def test_the_watch_wakes_a_sync_and_every_tree_only_for_a_node(world, sent):
    from queueing import watch

    watch.wake_sync({"Job succeeded": 3, "capacity": 2})
    assert sent.targets() == [wake.SYNC]  # the sync wakes the trees it touches
    cache.clear()
    sent.clear()
    watch.wake_sync({"node added": 1, "Job created": 1})
    assert sent.targets() == [wake.SYNC, wake.ALL]  # any tree may place on a new node


def test_a_cycle_worker_that_starts_wakes_a_sync_and_every_tree_past_lost_keys(world, sent):
    from types import SimpleNamespace

    from portal.celery import _wake_on_start

    # A killed worker's reacts left their keys: wakes would ride along with dead tasks.
    wake.wake(None, sync=True, reason="before the crash")
    wake.wake(None, reason="before the crash")
    sent.clear()
    assert wake.wake(None, sync=True) == 0  # the lost task's key swallows a wake
    consumer = SimpleNamespace(
        task_consumer=SimpleNamespace(queues=[SimpleNamespace(name="celery")])
    )
    _wake_on_start(sender=consumer)
    assert sent == []  # a worker that does not consume the cycle queue wakes nothing
    consumer.task_consumer.queues.append(SimpleNamespace(name="cycle"))
    _wake_on_start(sender=consumer)
    assert sent == [(wake.SYNC, 0.02), (wake.ALL, 0.02)]


def test_a_react_is_acknowledged_as_it_starts():
    from portal.celery import app
    from queueing.tasks import react as react_task
    from queueing.tasks import tick as tick_task

    assert react_task.acks_late is False
    assert tick_task.acks_late is True  # beat's tick: redelivered if a pool child dies
    assert app.conf.worker_prefetch_multiplier == 1


@pytest.mark.django_db(transaction=True)
def test_a_sync_that_fails_after_committing_still_wakes_the_trees_it_touched(
    world, sent, monkeypatch
):
    from queueing import admission

    submit(world, "w", cpu="1", runtime=30)
    react("cluster", cluster=world.cluster, now=world.clock())
    world.clock.advance(30)
    real_sync = admission.sync_cluster

    def fails_after(*args, **kwargs):
        real_sync(*args, **kwargs)  # commits the finish
        raise RuntimeError("the API server went away")

    monkeypatch.setattr(admission, "sync_cluster", fails_after)
    sent.clear()
    cache.clear()
    with pytest.raises(RuntimeError):
        react(wake.SYNC, cluster=world.cluster, now=world.clock())
    assert sent == [("cluster", 0.0)]


def test_beats_tick_dispatches_reacts_instead_of_cycling(world, sent, settings, syncs):
    from queueing import admission

    second_tree()
    submit(world, "w", cpu="1")
    settings.KQ_CYCLE_INTERVAL_S = 3.0
    sent.clear()
    summary = admission.tick(cluster=world.cluster, now=world.clock(), dispatch=True)
    # Nothing ran in the tick: a sync and each tree are woken, due now.
    assert syncs == []
    assert summary.roots == []
    assert summary.admitted == 0
    assert sorted(sent) == [("cluster", 0.0), ("other", 0.0), (wake.SYNC, 0.0)]
    assert summary.woken == ["cluster", "other"]
    assert Workload.objects.get(name="w").phase == Phase.PENDING
    # The next tick finds those reacts on their way: nothing is queued twice.
    admission.tick(cluster=world.cluster, now=world.clock(), dispatch=True)
    assert len(sent) == 3
    # The reacts run (what a cycle worker does): the work is done there.
    for target in (wake.SYNC, "cluster", "other"):
        react(target, cluster=world.cluster, now=world.clock())
    assert Workload.objects.get(name="w").phase == Phase.ADMITTED
    assert syncs == [1]


def test_beats_tick_does_the_work_itself_when_no_react_serves_its_wakes(
    world, sent, settings, monkeypatch
):
    import time

    from queueing import admission

    submit(world, "w", cpu="1")
    settings.KQ_CYCLE_INTERVAL_S = 0.05
    summary = admission.tick(cluster=world.cluster, now=world.clock(), dispatch=True)
    assert summary.roots == []
    assert summary.woken == ["cluster"]
    # No cycle worker takes the wakes (none runs, or it is stuck): two intervals on, the
    # tick cycles by itself -- the safety net does not depend on the cycle queue.
    time.sleep(0.12)
    cache.delete_many([wake.key("cluster"), wake.key(wake.SYNC)])  # their keys expired
    summary = admission.tick(cluster=world.cluster, now=world.clock(), dispatch=True)
    assert summary.roots == ["cluster"]
    assert summary.admitted == 1
    # Control: a react that starts (a cycle worker back) restores the dispatch.
    submit(world, "w2", cpu="1")
    react(wake.SYNC, cluster=world.cluster, now=world.clock())
    time.sleep(0.12)
    cache.delete_many([wake.key("cluster"), wake.key(wake.SYNC)])
    summary = admission.tick(cluster=world.cluster, now=world.clock(), dispatch=True)
    assert summary.roots == []
    assert summary.woken == ["cluster"]
    assert Workload.objects.get(name="w2").phase == Phase.PENDING


def test_ticks_that_keep_asking_do_not_keep_the_cycle_queue_served(
    world, sent, settings, monkeypatch
):
    import types

    from queueing import admission

    # Beat's ticks on time, no cycle worker (a worker that consumes only beat's queue):
    # each tick rides on the wakes the first one sent. Asking again is not being served:
    # two intervals after the first unserved dispatch the tick cycles by itself.
    clock = [1000.0]
    monkeypatch.setattr(wake, "time", types.SimpleNamespace(time=lambda: clock[0]))
    submit(world, "w", cpu="1")
    settings.KQ_CYCLE_INTERVAL_S = 0.3
    summary = admission.tick(cluster=world.cluster, now=world.clock(), dispatch=True)
    assert summary.woken == ["cluster"]
    clock[0] += 0.4  # past an interval: the reacts are not trusted, the tick asks again
    summary = admission.tick(cluster=world.cluster, now=world.clock(), dispatch=True)
    assert summary.roots == []
    assert summary.woken == ["cluster"]
    clock[0] += 0.4  # 0.8 s after the first dispatch, 0.4 s after the second
    summary = admission.tick(cluster=world.cluster, now=world.clock(), dispatch=True)
    assert summary.roots == ["cluster"]
    assert summary.admitted == 1


class CountingCache:
    """The wake's cache, counting its calls (each one round trip on Redis: get_many,
    set_many and delete_many are one command or pipeline each)."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def counted(*args: object, **kwargs: object) -> object:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return counted


@pytest.mark.django_db(transaction=True)
def test_a_woken_syncs_bookkeeping_costs_the_same_cache_round_trips_whatever_it_cycles(
    world, sent, monkeypatch, settings
):
    """What a woken sync notes for beat's tick and the next wakes (its key, the trees on
    their way or waiting for node room, each cycle's journal cursor, busy streaks) is
    batched: a tree cycled more costs no cache round trip more (its cycle's note and its
    node-room note go with the pass's others: wake.cycled_many; its busy streak's reset
    with the pass's), where it cost three, then one."""
    # No time limit on the pass: on a loaded host the first tree's cycle outlasted
    # KQ_SYNC_PASS_MS (100 ms), the second was left for a sync after it, and the count
    # measured that second sync's bookkeeping too (9 round trips against 6 in CI).
    settings.KQ_SYNC_PASS_MS = 0
    other = second_tree()
    submit(world, "a", cpu="1", runtime=30)
    submit(world, "b", cpu="1", quota=other, runtime=30)
    react("cluster", cluster=world.cluster, now=world.clock())
    react("other", cluster=world.cluster, now=world.clock())
    counting = CountingCache(wake.cache)
    monkeypatch.setattr(wake, "cache", counting)

    def woken_sync() -> list[str]:
        world.clock.advance(30)
        cache.clear()  # no wake on its way, no timer armed
        counting.calls.clear()
        summary = react(wake.SYNC, cluster=world.cluster, now=world.clock())
        return summary.roots

    assert woken_sync() == ["cluster", "other"]  # both finished: both trees cycled
    two = len(counting.calls)
    submit(world, "c", cpu="1", runtime=30)
    react("cluster", cluster=world.cluster, now=world.clock())
    assert woken_sync() == ["cluster"]
    one = len(counting.calls)
    assert two == one, counting.calls
    assert one <= 7, counting.calls  # started, lookout, done, cycled, not busy; the timer


def test_a_tick_queued_right_behind_another_does_nothing(settings, monkeypatch):
    from queueing import tasks

    settings.KQ_WAKE = True
    settings.KQ_CYCLE_INTERVAL_S = 1.0
    cache.clear()
    ran: list[bool] = []
    monkeypatch.setattr(
        "queueing.admission.tick",
        lambda **kwargs: ran.append(kwargs["dispatch"]) or admission_summary(),
    )
    tasks.tick()
    assert ran == [True]
    assert tasks.tick() == {"skipped": True}  # beat's next one, queued behind a long task
    assert ran == [True]
    # Half an interval after the last one started, a tick runs again.
    cache.set(wake.TICK_KEY, time.time() - 0.6, timeout=1)
    tasks.tick()
    assert ran == [True, True]
    cache.clear()


def admission_summary():
    from queueing.admission import CycleSummary

    return CycleSummary()
