"""The sync makes the database follow the cluster, and repairs lost cluster calls."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from queueing import actions
from queueing.choices import Phase
from queueing.cluster.base import JobNotFound, JobRequest
from queueing.models import AuditEvent, SimJob, Workload, WorkloadEvent
from queueing.sync import sync_cluster
from tests.builders import submit

pytestmark = pytest.mark.django_db


def admit_in_db(workload: Workload) -> None:
    """What apply() does, without the cluster call (as if the worker died right after)."""
    Workload.objects.filter(pk=workload.pk).update(
        phase=Phase.ADMITTED, admitted_at=workload.created_at
    )


def test_a_lost_admit_call_is_repeated_and_the_job_runs_and_finishes(world):
    workload = submit(world, "job", runtime=30)
    admit_in_db(workload)
    report = sync_cluster(world.cluster, now=world.clock())
    assert report.readmitted == 1
    assert not SimJob.objects.get(name="job").suspended

    sync_cluster(world.cluster, now=world.clock.advance(1))
    workload.refresh_from_db()
    assert workload.phase == Phase.RUNNING
    assert workload.started_at is not None

    sync_cluster(world.cluster, now=world.clock.advance(30))
    workload.refresh_from_db()
    assert workload.phase == Phase.SUCCEEDED
    assert [e.to_phase for e in workload.events.all()] == ["Pending", "Running", "Succeeded"]


def test_a_failed_job_fails_its_workload(world):
    world.cluster.failure_rate = 1.0
    workload = submit(world, "bad", runtime=5)
    admit_in_db(workload)
    sync_cluster(world.cluster, now=world.clock())
    sync_cluster(world.cluster, now=world.clock.advance(10))
    workload.refresh_from_db()
    assert workload.phase == Phase.FAILED


def test_a_job_unsuspended_behind_the_queue_is_suspended_again(world):
    workload = submit(world, "sneaky")
    SimJob.objects.filter(name="sneaky").update(
        suspended=False, state="Running", started_at=world.clock()
    )
    report = sync_cluster(world.cluster, now=world.clock())
    assert report.resuspended == 1
    assert SimJob.objects.get(name="sneaky").suspended
    workload.refresh_from_db()
    assert workload.phase == Phase.PENDING


def test_preempted_returns_to_pending_once_the_cluster_confirms(world):
    workload = submit(world, "victim")
    admit_in_db(workload)
    sync_cluster(world.cluster, now=world.clock())  # re-admits: the job runs
    original_order = Workload.objects.get(pk=workload.pk).queue_order_at
    Workload.objects.filter(pk=workload.pk).update(phase=Phase.PREEMPTED)
    sync_cluster(world.cluster, now=world.clock.advance(1))  # suspend call repeated
    assert SimJob.objects.get(name="victim").suspended
    sync_cluster(world.cluster, now=world.clock.advance(1))
    workload.refresh_from_db()
    assert workload.phase == Phase.PENDING
    assert workload.queue_order_at == original_order
    assert workload.assignment == {}


def test_a_timed_out_workload_backs_off(world):
    workload = submit(world, "slow", runtime=3600)
    admit_in_db(workload)
    sync_cluster(world.cluster, now=world.clock())
    later = world.clock.advance(600)
    Workload.objects.filter(pk=workload.pk).update(
        phase=Phase.PREEMPTED, requeue_at=later + timedelta(hours=1)
    )
    sync_cluster(world.cluster, now=world.clock.advance(1))
    sync_cluster(world.cluster, now=world.clock.advance(1))
    workload.refresh_from_db()
    assert workload.phase == Phase.BACKOFF


def test_a_deleted_job_cancels_its_workload_after_a_grace_period(world):
    workload = submit(world, "gone")
    SimJob.objects.filter(name="gone").delete()
    Workload.objects.filter(pk=workload.pk).update(created_at=world.clock())
    sync_cluster(world.cluster, now=world.clock.advance(5))
    assert Workload.objects.get(pk=workload.pk).phase == Phase.PENDING  # within the grace
    sync_cluster(world.cluster, now=world.clock.advance(60))
    assert Workload.objects.get(pk=workload.pk).phase == Phase.CANCELLED


def test_a_job_created_outside_the_product_is_registered(world):
    world.cluster.create_job(
        JobRequest(
            namespace="team-a",
            name="kubectl-applied",
            pod_sets=[{"name": "main", "count": 2, "requests": {"cpu": 500}}],
            annotations={"kube-queue/priority": "42"},
        )
    )
    report = sync_cluster(world.cluster, now=world.clock())
    assert report.registered == 1
    workload = Workload.objects.get(name="kubectl-applied")
    assert (workload.quota, workload.queue, workload.priority) == (world.quota, world.queue, 42)
    assert workload.total_request == {"cpu": 1000}
    assert sync_cluster(world.cluster, now=world.clock()).registered == 0


def test_a_job_in_an_unknown_namespace_is_reported_not_registered(world):
    world.cluster.create_job(
        JobRequest(
            namespace="nowhere",
            name="lost",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 500}}],
        )
    )
    report = sync_cluster(world.cluster, now=world.clock())
    assert report.registered == 0
    assert report.unplaced
    assert "nowhere/lost" in report.unplaced[0]


def test_cancelling_the_workload_removes_the_job(world):
    workload = submit(world, "c")
    actions.cancel_workload(actions.Actor.system(), workload)
    sync_cluster(world.cluster, now=world.clock())
    assert not Workload.objects.filter(phase__in=[Phase.PENDING]).exists()


def test_new_jobs_are_registered_in_one_insert_with_their_timeline_and_audit(
    world, django_assert_max_num_queries
):
    for i in range(30):
        world.cluster.create_job(
            JobRequest(
                namespace="team-a",
                name=f"batch-{i}",
                pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 500}}],
            )
        )
    with django_assert_max_num_queries(40):  # not one round of queries per job
        report = sync_cluster(world.cluster, now=world.clock())
    assert report.registered == 30
    workloads = Workload.objects.filter(name__startswith="batch-")
    assert workloads.count() == 30
    assert (
        WorkloadEvent.objects.filter(workload__in=workloads, to_phase=Phase.PENDING).count() == 30
    )
    assert AuditEvent.objects.filter(action="workload.submit", source="cluster").count() >= 30


def test_a_placement_is_looked_up_once_a_sync_whatever_its_chunks(world, monkeypatch):
    from queueing import sync

    for i in range(6):
        world.cluster.create_job(
            JobRequest(
                namespace="team-a",
                name=f"batch-{i}",
                pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 500}}],
            )
        )
    monkeypatch.setattr(sync, "CHUNK", 2)  # three chunks of new jobs
    looked_up: list[str | None] = []
    resolve = actions.resolve_placement

    def counted(*args, **kwargs):
        looked_up.append(kwargs.get("namespace"))
        return resolve(*args, **kwargs)

    monkeypatch.setattr(actions, "resolve_placement", counted)
    assert sync_cluster(world.cluster, now=world.clock()).registered == 6
    assert looked_up == ["team-a"]


def _new_job(world, name: str, namespace: str = "team-a") -> None:
    world.cluster.create_job(
        JobRequest(
            namespace=namespace,
            name=name,
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 500}}],
        )
    )


def test_placements_are_kept_between_syncs_until_a_quota_or_queue_changes(world, monkeypatch):
    from tests.builders import SYSTEM

    looked_up: list[str | None] = []
    resolve = actions.resolve_placement

    def counted(*args, **kwargs):
        looked_up.append(kwargs.get("namespace"))
        return resolve(*args, **kwargs)

    monkeypatch.setattr(actions, "resolve_placement", counted)
    _new_job(world, "first")
    assert sync_cluster(world.cluster, now=world.clock()).registered == 1
    _new_job(world, "second")
    assert sync_cluster(world.cluster, now=world.clock()).registered == 1
    assert looked_up == ["team-a"]  # the second sync placed its job from the memo

    # The namespace moves to another quota: the next sync places by the new settings.
    other_tenant = actions.create_tenant(SYSTEM, name="team-b")
    actions.update_quota(SYSTEM, world.quota, namespaces=[])
    other = actions.create_quota(
        SYSTEM,
        name="team-b-q",
        tenant=other_tenant,
        parent=world.root,
        min={"cpu": "1"},
        max={"cpu": "16"},
        namespaces=["team-a"],
    )
    _new_job(world, "third")
    assert sync_cluster(world.cluster, now=world.clock()).registered == 1
    assert looked_up == ["team-a", "team-a"]
    assert Workload.objects.get(name="third").quota_id == other.pk
    assert Workload.objects.get(name="second").quota_id == world.quota.pk

    # An edit of a queue alone starts the memo afresh too.
    assert other.default_queue is not None
    actions.update_queue(SYSTEM, other.default_queue, policy="Block")
    _new_job(world, "fourth")
    assert sync_cluster(world.cluster, now=world.clock()).registered == 1
    assert looked_up == ["team-a", "team-a", "team-a"]


def test_a_job_colliding_with_a_live_workload_does_not_stop_the_others(world):
    """A live workload still holds the name of a job that was replaced: the new job cannot
    be registered until the old workload ends, and the jobs beside it are not held up."""
    old = submit(world, "dup")
    Workload.objects.filter(pk=old.pk).update(object_uid="the-deleted-one")
    world.cluster.create_job(
        JobRequest(
            namespace="team-a",
            name="fresh",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 500}}],
        )
    )
    report = sync_cluster(world.cluster, now=world.clock())
    assert report.registered == 1
    assert Workload.objects.filter(name="fresh").exists()
    assert any("team-a/dup" in line and "already exists" in line for line in report.unplaced)
    assert Workload.objects.filter(name="dup").count() == 1


class LaggingView:
    """The simulated cluster, seen through a view that may lag (as a watch cache may):
    ``fresh`` says what a fresh read of the API server would."""

    views_may_lag = True

    def __init__(self, inner, fresh):
        self.inner, self.fresh = inner, fresh

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def fresh_job(self, ref):
        return self.fresh(ref)


def test_a_lagging_view_gives_quota_back_only_after_a_fresh_read_confirms(world):
    workload = submit(world, "victim")
    admit_in_db(workload)
    sync_cluster(world.cluster, now=world.clock())  # re-admits: the job runs
    Workload.objects.filter(pk=workload.pk).update(phase=Phase.PREEMPTED)
    sync_cluster(world.cluster, now=world.clock.advance(1))  # the suspend call
    assert SimJob.objects.get(name="victim").suspended

    def still_running(ref):
        return replace(job_of(ref), suspended=False, state="Running", active=1)

    def job_of(ref):
        return next(j for j in world.cluster.jobs() if j.ref.uid == ref.uid)

    sync_cluster(LaggingView(world.cluster, still_running), now=world.clock.advance(1))
    assert Workload.objects.get(pk=workload.pk).phase == Phase.PREEMPTED  # not confirmed

    sync_cluster(LaggingView(world.cluster, job_of), now=world.clock.advance(1))
    assert Workload.objects.get(pk=workload.pk).phase == Phase.PENDING


def test_a_lagging_view_cancels_only_what_a_fresh_read_cannot_find(world):
    workload = submit(world, "unseen")
    job = SimJob.objects.get(name="unseen")
    Workload.objects.filter(pk=workload.pk).update(created_at=world.clock())

    class Blind(LaggingView):
        def jobs(self):  # the cache has not seen the job yet
            return [j for j in self.inner.jobs() if j.ref.name != "unseen"]

    def fresh(ref):
        return next(j for j in world.cluster.jobs() if j.ref.uid == ref.uid)

    sync_cluster(Blind(world.cluster, fresh), now=world.clock.advance(60))
    assert Workload.objects.get(pk=workload.pk).phase == Phase.PENDING  # it does exist

    job.delete()

    def missing(ref):
        raise JobNotFound("gone")

    sync_cluster(Blind(world.cluster, missing), now=world.clock.advance(1))
    assert Workload.objects.get(pk=workload.pk).phase == Phase.CANCELLED


def test_a_lagging_view_of_a_finished_job_does_not_register_it_again(world):
    """Seen in CI's chaos run (watch cache, three workers): one worker's cache still showed
    a Job running after another worker had marked its workload Succeeded. The Job was
    among the listed jobs and no active workload stood for it, so it was registered a
    second time and ran its quota's accounting twice (501 workloads for 500 Jobs)."""
    workload = submit(world, "done", runtime=5)
    admit_in_db(workload)
    sync_cluster(world.cluster, now=world.clock())  # re-admits: the job runs
    sync_cluster(world.cluster, now=world.clock.advance(1))
    sync_cluster(world.cluster, now=world.clock.advance(10))
    assert Workload.objects.get(pk=workload.pk).phase == Phase.SUCCEEDED

    def job_of(ref):
        return next(j for j in world.cluster.jobs() if j.ref.uid == ref.uid)

    class StillRunning(LaggingView):
        def jobs(self):  # the cache has not seen the job finish yet
            return [
                replace(j, suspended=False, state="Running", active=1)
                if j.ref.name == "done"
                else j
                for j in self.inner.jobs()
            ]

    report = sync_cluster(StillRunning(world.cluster, job_of), now=world.clock.advance(1))
    assert report.registered == 0
    assert Workload.objects.filter(name="done").count() == 1

    # A new Job of the same name (another uid) is registered as before.
    SimJob.objects.filter(name="done").delete()
    world.cluster.create_job(
        JobRequest(
            namespace=workload.namespace,
            name="done",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 500}}],
        )
    )
    report = sync_cluster(world.cluster, now=world.clock.advance(1))
    assert report.registered == 1
    assert Workload.objects.filter(name="done").count() == 2


def test_a_submission_whose_job_a_sync_registered_first_takes_that_workload(world, monkeypatch):
    """Seen in the chaos run (watch cache): the action creates the Job, a worker's sync
    sees it at once and registers it as a job created outside the product, and the
    action's own insert then collided -- the submitter got "A live workload ... already
    exists" for the job it had just queued. The submission now takes that workload."""
    from queueing.models import AuditEvent

    create = world.cluster.create_job

    def create_then_sync(request):
        ref = create(request)
        sync_cluster(world.cluster, now=world.clock())  # registers it, as another worker would
        return ref

    monkeypatch.setattr(world.cluster, "create_job", create_then_sync)
    workload = submit(world, "raced")
    assert Workload.objects.filter(name="raced").count() == 1
    assert workload.pk == Workload.objects.get(name="raced").pk
    assert workload.phase == Phase.PENDING
    assert workload.object_uid == SimJob.objects.get(name="raced").uid
    assert AuditEvent.objects.filter(action="workload.submit", object_id=str(workload.pk)).exists()

    # A live workload of that name for another Job is still refused.
    monkeypatch.setattr(world.cluster, "create_job", create)
    with pytest.raises(Exception, match="already exists"):
        submit(world, "raced")


class Journaled(LaggingView):
    """A lagging view with a change journal (as the watch cache has): after a first full
    sync, a sync looks only at the jobs ``changed`` names, as ``shown`` shows them."""

    def __init__(self, inner, fresh, shown):
        super().__init__(inner, fresh)
        self.shown = shown
        self.changed: set[tuple[str, str, str]] = set()

    def jobs(self):
        return [self.shown(j) for j in self.inner.jobs()]

    def changed_jobs(self, cursor):
        return (cursor or 0) + 1, (None if cursor is None else set(self.changed))

    def job_infos(self, keys):
        found = {(j.ref.kind, j.ref.namespace, j.ref.name): j for j in self.jobs()}
        return {key: found.get(key) for key in keys}


def test_a_sync_of_the_changed_jobs_reads_their_workloads_once(
    world, django_assert_max_num_queries
):
    """A sync between full ones reads the active workloads of the changed jobs and the
    workloads that stand for any of them (finished ones too) in one statement: a job a
    lagging view still shows running, whose workload is done, is not registered again;
    a new job beside it is; a finished one is finished."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    done, finishing = submit(world, "done", runtime=5), submit(world, "finishing", runtime=5)
    for workload in (done, finishing):
        admit_in_db(workload)
    sync_cluster(world.cluster, now=world.clock())  # re-admits: the jobs run
    sync_cluster(world.cluster, now=world.clock.advance(1))
    Workload.objects.filter(pk=done.pk).update(phase=Phase.SUCCEEDED)  # another worker's

    def lagging(job):  # the view has not seen "done" finish
        if job.ref.name == "done":
            return replace(job, suspended=False, state="Running", active=1)
        return job

    def job_of(ref):
        return next(j for j in world.cluster.jobs() if j.ref.uid == ref.uid)

    view = Journaled(world.cluster, job_of, lagging)
    sync_cluster(view, now=world.clock())  # the first: a full one
    world.cluster.create_job(
        JobRequest(
            namespace="team-a",
            name="new",
            pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 500}}],
        )
    )
    world.clock.advance(10)
    world.cluster.tick(world.clock())
    view.changed = {("Job", "team-a", n) for n in ("done", "finishing", "new")}
    with CaptureQueriesContext(connection) as queries:
        report = sync_cluster(view, now=world.clock())
    assert report.incremental
    assert report.registered == 1
    assert report.transitions == 1
    assert Workload.objects.filter(name="done").count() == 1
    assert Workload.objects.get(pk=finishing.pk).phase == Phase.SUCCEEDED
    assert Workload.objects.filter(name="new", phase=Phase.PENDING).count() == 1
    # The workloads' reads by their jobs' names or uids (SQLite: the ORM's IN lists;
    # PostgreSQL: the keys and uids as arrays).
    reads = [
        q["sql"]
        for q in queries.captured_queries
        if q["sql"].startswith("SELECT") and '"object_uid"' in q["sql"].split("FROM", 1)[1]
    ]
    assert len(reads) == 1, reads
    view.changed = set()
    assert sync_cluster(view, now=world.clock()).incremental  # and so on, between full ones


def test_a_sync_of_the_changed_jobs_reads_no_namesakes_of_other_namespaces(world, monkeypatch):
    """Jobs named alike in many namespaces (one per queue, as in Kueue's baseline): a sync
    of the changed jobs reads the active workloads of exactly those (kind, namespace,
    name), not each changed name in each changed namespace."""
    from queueing import sync

    for name in ("x", "y", "bx", "by"):
        submit(world, name)
    for name in ("x", "y"):  # the namesakes in another namespace
        Workload.objects.filter(name=f"b{name}").update(namespace="team-b", name=name)

    def job_of(ref):
        return next(j for j in world.cluster.jobs() if j.ref.uid == ref.uid)

    view = Journaled(world.cluster, job_of, lambda job: job)
    sync_cluster(view, now=world.clock())  # the first: a full one
    read: list[tuple[str, str]] = []
    rows_and_mark = sync._rows_and_mark

    def recorded(query):
        rows, mark = rows_and_mark(query)
        read.extend((row.namespace, row.name) for row in rows)
        return rows, mark

    monkeypatch.setattr(sync, "_rows_and_mark", recorded)
    view.changed = {("Job", "team-a", "x"), ("Job", "team-b", "y")}
    assert sync_cluster(view, now=world.clock()).incremental
    assert sorted(read) == [("team-a", "x"), ("team-b", "y")]
    assert Workload.objects.filter(phase=Phase.PENDING).count() == 4  # nothing else moved


def test_the_settings_mark_read_with_the_workloads_is_the_one_read_alone(world):
    """The incremental sync reads the quotas' and queues' mark (whether the placements
    kept between syncs still hold) with its workloads: the same mark as read alone, or
    every sync would start the placements afresh."""
    from django.db import connection

    from queueing import sync

    submit(world, "one")
    submit(world, "two")
    cases = [
        (Workload.objects.filter(name="nothing"), True),  # no workload: the mark alone
        (Workload.objects.filter(name__in=[]), False),  # nothing can match: no statement
        (Workload.objects.all(), True),
    ]
    for query, read in cases:
        rows, mark = sync._rows_and_mark(query)
        assert rows == sync._rows(query)
        if connection.vendor == "postgresql" and read:
            assert mark == sync._settings_mark()
        else:
            assert mark is None
    assert len(sync._rows_and_mark(Workload.objects.all())[0]) == 2


def test_the_time_limits_are_read_only_when_one_can_be_due(world):
    """kubesync reads the limited workloads at the earliest end the last read found, and
    at least a second after it; a workload past its limit is stopped at that read."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from queueing import kubesync
    from queueing.admission import cycle_root

    limited = submit(world, "limited", cpu="1", runtime=1000)
    cycle_root("cluster", cluster=world.cluster, now=world.clock())
    limited.refresh_from_db()
    assert limited.phase == Phase.ADMITTED
    admitted = limited.admitted_at
    assert admitted is not None

    def reads(seconds: float) -> int:
        with CaptureQueriesContext(connection) as queries:
            kubesync._enforce_limits(world.cluster, admitted + timedelta(seconds=seconds))
        return len(queries)

    # No limit anywhere: one read a second.
    assert [reads(0.1), reads(0.6), reads(1.1), reads(1.5)] == [1, 0, 1, 0]
    limited.queue.max_execution_s = 3
    limited.queue.save(update_fields=["max_execution_s"])
    assert [reads(2.2), reads(2.9)] == [1, 0]  # the edit seen within the second
    assert Workload.objects.get(pk=limited.pk).phase == Phase.ADMITTED
    assert reads(3.05) > 1  # due at 3 s: read, and stopped
    assert Workload.objects.get(pk=limited.pk).phase == Phase.CANCELLED


def test_the_read_of_the_changed_jobs_probes_indexes_whatever_the_statistics(world):
    """PostgreSQL: the sync's read of the changed jobs' workloads probes the partial
    unique index for each key and the uid index for each uid, on a table that was never
    analyzed (a burst of submissions, before any statistics). Planned as a join, that
    read hashed every active row and scanned the whole table for the uids: 40 ms a sync
    in Kueue's baseline at 10,000 waiting."""
    from django.db import connection

    from queueing import sync

    if connection.vendor != "postgresql":
        pytest.skip("the plan is PostgreSQL's")
    pending = [submit(world, f"job-{i}") for i in range(40)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT COALESCE(last_analyze, last_autoanalyze) FROM pg_stat_user_tables "
            "WHERE relname = %s",
            [Workload._meta.db_table],
        )
        (analyzed,) = cursor.fetchone() or (None,)
        assert analyzed is None  # the statistics the plan must not rest on are absent
        keys = [("Job", w.namespace, w.name) for w in pending[:10]]
        sql, params = sync._changed_statement(keys, [w.object_uid or "none" for w in pending])
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "workload_unique_active_object" in plan, plan
    assert "workload_object_uid" in plan, plan
    assert "Seq Scan on queueing_workload" not in plan, plan
    assert "Hash Join" not in plan, plan
    rows, _mark = sync._changed_rows_and_mark(keys, [])
    assert sorted(row.name for row in rows) == sorted(name for _, _, name in keys)
