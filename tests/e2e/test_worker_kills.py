"""A worker killed inside each write path of the runtime leaves nothing half-applied.

For each crash point of ``queueing.faults`` (the cycle's apply before and after its
commit and amid its cluster calls, the placement lock, the sync before and after a
chunk's commit, the woken cycle on the cycle queue, the stop of workloads past their
running time limit), a real Celery worker in kubernetes mode against the fake API server
(in its own process) SIGKILLs itself at that point. Then, with nothing running:

- the database agrees with itself: the cycle records count exactly the admissions in the
  workloads' timelines, each workload's attempts match its admissions, every holding
  workload has its admission time and nodes, the usage ledgers were written by the last
  recorded cycle (all of one cycle's writes, or none of them);
- the cluster is behind the database, never ahead: no Job was unsuspended without an
  admission in the database, none twice;
- the kill happened where it says (what was and was not written at that point).

A worker without the fault (and beat) is then started: every job finishes, each Job was
unsuspended exactly once and only for its one admission, no admission is lost or made
twice, no quota was exceeded at any instant.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db.models import Sum

from portal.celery import app
from queueing import actions, compat, quotawriteback
from queueing.choices import HOLDING_PHASES, Phase
from queueing.cluster import set_cluster
from queueing.models import CycleRun, Quota, UsageLedger, Workload, WorkloadEvent
from queueing.quantities import format_resources
from tests.builders import SYSTEM
from tests.e2e.test_chaos import QUOTA_MAX_CPU, seed_cluster, seed_quotas
from tests.fakekube import (
    RUNTIME_ANNOTATION,
    FakeKubeProcess,
    RemoteFakeKube,
    admitted_timeline,
    by_label,
    overruns,
    unsuspend_counts,
    write_kubeconfig,
)
from tests.kube.conftest import ApiErrors, make_adapter
from tests.services import (
    PYTHON,
    ROOT,
    celery_beat_argv,
    celery_worker_argv,
    child_env,
    redis_url,
    wait_until,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

JOBS = 24
LIMITED = 3  # of them, stopped past a 1-second running time limit (the max-exec case)
NAMESPACES = ("team-a", "team-b", "team-c")
LOG_TYPES = ["suspend", "pod_start", "pod_stop", "job_finished", "deleted"]


@dataclass(frozen=True)
class Case:
    fault: str  # KQ_FAULT
    woken: bool = False  # the faulty process is the cycler, driven by react tasks
    limited: bool = False  # some workloads run past their maximum execution time
    elastic: bool = False  # a quota mirrors an ElasticQuota (runtime quota written back)
    extra_env: tuple[tuple[str, str], ...] = ()


CASES = {
    "placement-lock": Case("placement.locked"),
    "apply-before-commit": Case("apply.before_commit"),
    "apply-after-commit": Case("apply.committed"),
    # One write at a time, so that the kill falls between the second and the third.
    "apply-amid-cluster-calls": Case(
        "calls.made:2", extra_env=(("KQ_KUBE_WRITE_CONCURRENCY", "1"),)
    ),
    "sync-before-commit": Case("sync.before_commit"),
    "sync-after-commit": Case("sync.committed"),
    "woken-cycle-taken": Case("react.taken", woken=True),
    "woken-cycle-after-commit": Case("apply.committed", woken=True),
    "max-exec-between-stops": Case("maxexec.between", limited=True),
    "quota-writeback-after-patch": Case("quotawriteback.patched", elastic=True),
}
ELASTIC_PATH = "/apis/scheduling.sigs.k8s.io/v1alpha1/namespaces/team-a/elasticquotas"


class Proc:
    """A product process logging to a file, killed or stopped by its own id."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], logs: Path) -> None:
        self.log = logs / f"{name}.log"
        self.process = subprocess.Popen(
            [PYTHON, *argv],
            cwd=ROOT,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_all([self])


def stop_all(procs: list[Proc]) -> None:
    """SIGTERM to each at once, then wait for each (SIGKILL after 20 s). A Celery process
    takes a second or more to tear its interpreter down (several under load): stopped one
    after the other, a case's three stops added up to a tenth of its time."""
    running = [proc.process for proc in procs if proc.process.poll() is None]
    for process in running:
        process.terminate()
    for process in running:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def processes() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    try:
        yield started
    finally:
        stop_all(started)


def submit_jobs(quotas: dict[str, Quota], *, limited: bool) -> None:
    rng = random.Random(13)
    for i in range(JOBS):
        runtime = rng.choice((1, 2, 3))  # tenths of a second at the fake's time scale
        annotations = {RUNTIME_ANNOTATION: str(runtime)}
        if limited and i < LIMITED:
            # They would run 10 minutes (longer than the test waits: only their stop ends
            # them); their limit stops them after 1 s.
            annotations = {
                RUNTIME_ANNOTATION: "6000",
                "koord-queue/maximum-execution-time-seconds": "1",
            }
        actions.submit_workload(
            SYSTEM,
            tenant=None,
            quota=quotas[sorted(quotas)[i % len(quotas)]],
            name=f"kill-{i:02d}",
            pod_sets=[
                {"count": 2, "requests": {"cpu": rng.choice(("2", "3", "4")), "memory": "1Gi"}}
            ],
            expected_runtime_s=runtime,
            annotations=annotations,
        )


def send_react(url: str, target: str) -> None:
    with app.connection_for_write(url) as conn:
        app.send_task("queueing.react", args=[target], queue="cycle", connection=conn)


def cycler_argv(name: str) -> list[str]:
    argv = celery_worker_argv(name, loglevel="INFO")
    argv[argv.index("celery,cycle")] = "cycle"
    return argv


@dataclass
class Ledger:
    """What the database and the cluster say, checked against each other."""

    admissions: Counter[str]  # object uid -> admissions in the workloads' timelines
    recorded: int  # admissions the cycle records count
    unsuspends: Counter[str]  # object uid -> times its Job went from suspended to running


def consistent(fake: RemoteFakeKube) -> Ledger:
    """Nothing half-applied: see the module docstring. Call it with nothing running."""
    admissions = Counter(
        WorkloadEvent.objects.filter(to_phase=Phase.ADMITTED).values_list(
            "workload__object_uid", flat=True
        )
    )
    recorded = CycleRun.objects.aggregate(n=Sum("admitted"))["n"] or 0
    # The cycle's record and its phase changes are one transaction.
    assert recorded == sum(admissions.values())
    for workload in Workload.objects.all():
        assert workload.attempts == admissions[workload.object_uid], workload
        if workload.phase in HOLDING_PHASES:
            assert workload.admitted_at is not None, workload
            assert workload.assignment, workload
    # Each leaf's usage ledger was charged by the last recorded cycle, in its transaction.
    last = CycleRun.objects.order_by("-started_at").values_list("started_at", flat=True).first()
    if last is not None:
        assert set(UsageLedger.objects.values_list("updated_at", flat=True)) == {last}
    else:
        assert not UsageLedger.objects.exists()
    unsuspends = unsuspend_counts(fake.log_entries(types=["suspend"]))
    # The cluster follows the database: nothing runs without an admission, nothing twice.
    assert set(unsuspends) <= set(admissions)
    assert all(n == 1 for n in unsuspends.values()), unsuspends
    return Ledger(admissions, recorded, unsuspends)


def limited_workloads() -> list[Workload]:
    return list(Workload.objects.filter(name__in=[f"kill-{i:02d}" for i in range(LIMITED)]))


# What must be true just after the kill at each point, beyond `consistent`.
def at_placement_lock(ledger: Ledger) -> None:
    assert ledger.recorded == 0
    assert not ledger.unsuspends


def at_apply_before_commit(ledger: Ledger) -> None:
    assert ledger.recorded == 0
    assert not ledger.unsuspends
    assert not Workload.objects.exclude(phase=Phase.PENDING).exists()


def at_apply_after_commit(ledger: Ledger) -> None:
    assert ledger.recorded > 0
    assert not ledger.unsuspends


def at_amid_calls(ledger: Ledger) -> None:
    assert sum(ledger.unsuspends.values()) == 2 < ledger.recorded


def at_sync_before_commit(ledger: Ledger) -> None:
    # Jobs run, yet the first sync that saw them start was undone with its chunk.
    assert ledger.recorded > 0
    assert ledger.unsuspends
    assert not Workload.objects.filter(phase__in=[Phase.RUNNING, Phase.SUCCEEDED]).exists()


def at_sync_after_commit(ledger: Ledger) -> None:
    assert Workload.objects.filter(phase__in=[Phase.RUNNING, Phase.SUCCEEDED]).exists()


def at_react_taken(ledger: Ledger) -> None:
    assert not CycleRun.objects.exists()
    assert ledger.recorded == 0


def at_max_exec(ledger: Ledger) -> None:
    phases = Counter(w.phase for w in limited_workloads())
    assert phases[Phase.CANCELLED] == 1, phases  # the first stopped, the others not yet


AT_KILL: dict[str, Callable[[Ledger], None]] = {
    "placement-lock": at_placement_lock,
    "apply-before-commit": at_apply_before_commit,
    "apply-after-commit": at_apply_after_commit,
    "apply-amid-cluster-calls": at_amid_calls,
    "sync-before-commit": at_sync_before_commit,
    "sync-after-commit": at_sync_after_commit,
    "woken-cycle-taken": at_react_taken,
    "woken-cycle-after-commit": at_apply_after_commit,
    "max-exec-between-stops": at_max_exec,
    "quota-writeback-after-patch": lambda ledger: None,  # checked in the test (the object)
}


def mirror_an_elastic_quota(adapter: Any) -> None:
    """team-a-q stands for an ElasticQuota, whose annotations get its runtime quota."""
    adapter.rest.call(
        "create", "POST", ELASTIC_PATH,
        body={"metadata": {"name": "team-a-q", "namespace": "team-a"},
              "spec": {"min": {"cpu": "16"}, "max": {"cpu": "32"}}},
    )  # fmt: skip
    Quota.objects.filter(name="team-a-q").update(kube_ref="ElasticQuota team-a/team-a-q")


def written_back(adapter: Any) -> Any:
    """The runtime quota annotation of the ElasticQuota (decoded), or None."""
    obj = adapter.rest.call("get", "GET", f"{ELASTIC_PATH}/team-a-q")
    raw = (obj["metadata"].get("annotations") or {}).get(quotawriteback.RUNTIME_ANNOTATION)
    return None if raw is None else json.loads(raw)


def finished() -> bool:
    return not Workload.objects.filter(
        phase__in=[*HOLDING_PHASES, Phase.PENDING, Phase.BACKOFF, Phase.PREEMPTED]
    ).exists()


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_worker_killed_inside_a_write_leaves_nothing_half_applied(
    tmp_path: Path, name: str
) -> None:
    case = CASES[name]
    with (
        redis_url() as url,
        FakeKubeProcess("--time-scale", "0.1", "--seed", "5") as kube,
        processes() as procs,
    ):
        fake = kube.control
        adapter = make_adapter(kube.url, ApiErrors(), namespaces=list(NAMESPACES), kinds=["Job"])
        set_cluster(adapter)
        try:
            seed_cluster(adapter)
            quotas = seed_quotas()
            submit_jobs(quotas, limited=case.limited)
            if case.elastic:
                mirror_an_elastic_quota(adapter)
        finally:
            set_cluster(None)
        env = child_env(
            REDIS_URL=url,
            CELERY_BROKER_URL=url,
            KQ_CLUSTER="kubernetes",
            KUBECONFIG=str(write_kubeconfig(tmp_path / "kubeconfig", kube.url)),
            KQ_NAMESPACES=",".join(NAMESPACES),
            KQ_KINDS="Job",
            KQ_CYCLE_INTERVAL_S="0.25",
            KQ_CYCLE_LEASE_S="5",  # the dead worker's leases run out this fast
            KQ_KUBE_RETRY_S="1.5",
            KQ_KUBE_TIMEOUT_S="2",
            KQ_KUBE_WATCH_CACHE="0",
            KQ_DEMO_TRICKLE="0",
            KQ_QUOTA_WRITEBACK_S="0",
            LOG_LEVEL="WARNING",
        )
        faulty = {**env, "KQ_FAULT": case.fault, **dict(case.extra_env)}

        # 1. The faulty process runs until the fault kills it.
        if case.woken:  # the cycler alone, woken by react tasks (no beat: nothing else)
            victim = Proc("cycler-faulty", cycler_argv("faulty"), faulty, tmp_path)
            procs.append(victim)
            wait_until(lambda: " ready." in victim.text(), timeout=60, what="the cycler")
            send_react(url, "cluster")
        else:  # a worker driven by beat's ticks
            victim = Proc("worker-faulty", celery_worker_argv("faulty"), faulty, tmp_path)
            procs.append(victim)
            procs.append(Proc("beat", celery_beat_argv(tmp_path / "beat-schedule"), env, tmp_path))
        wait_until(
            lambda: victim.process.poll() is not None,
            timeout=120,
            what=f"the worker to die at {case.fault}",
        )
        assert victim.process.returncode == -signal.SIGKILL, victim.text()[-3000:]
        assert f"kq fault: killed at {case.fault.split(':')[0]}" in victim.text()
        if not case.woken:
            procs[-1].stop()  # beat: nothing runs while the wreck is examined

        # 2. What it left: consistent, and cut exactly where the point says.
        AT_KILL[name](consistent(fake))
        if case.elastic:  # patched, and killed before it was remembered as written
            assert written_back(adapter) is not None

        # 3. A worker without the fault, and beat, put everything right.
        procs.append(
            Proc("beat-after", celery_beat_argv(tmp_path / "beat-schedule-2"), env, tmp_path)
        )
        procs.append(Proc("worker-after", celery_worker_argv("after"), env, tmp_path))
        wait_until(finished, timeout=150, interval=0.3, what="every job to finish")
        if case.elastic:  # the restarted worker writes the runtime quota again, as it is now
            wait_until(
                lambda: written_back(adapter)
                == format_resources(Quota.objects.get(name="team-a-q").runtime),
                timeout=60, interval=0.3, what="the runtime quota written back",
            )  # fmt: skip
        stop_all(procs)
        ledger = consistent(fake)
        entries = fake.log_entries(types=LOG_TYPES)

    # Every admission in the database reached its Job exactly once; none was lost.
    assert ledger.unsuspends == ledger.admissions
    assert all(n == 1 for n in ledger.admissions.values())
    limited = {w.pk for w in limited_workloads()} if case.limited else set()
    for workload in Workload.objects.all():
        if workload.pk in limited:
            assert workload.phase == Phase.CANCELLED
            assert workload.events.filter(to_phase=Phase.CANCELLED).count() == 1
            assert "maximum execution time" in workload.events.last().message
        else:
            assert workload.phase == Phase.SUCCEEDED, workload
    assert len(ledger.admissions) == JOBS
    # No quota above its max at any instant.
    limits = {q: {"cpu": float(cpu)} for q, cpu in QUOTA_MAX_CPU.items()}
    assert overruns(admitted_timeline(entries, by_label(compat.QUOTA_LABEL)), limits) == []


def test_every_crash_point_is_exercised() -> None:
    from queueing import faults

    assert {c.fault.split(":")[0] for c in CASES.values()} == set(faults.POINTS)
