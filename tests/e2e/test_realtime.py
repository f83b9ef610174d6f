"""Cycles woken by events, for real: a cycle worker (solo pool on the cycle queue) and no
beat at all, so nothing but wakes and the worker's own timers can admit anything."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from portal.celery import app
from queueing import wake
from queueing.choices import HOLDING_PHASES, Phase
from queueing.models import CycleRun, Quota, Workload
from tests import builders
from tests.builders import SYSTEM
from tests.services import PYTHON, ROOT, child_env, redis_url, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def cycler_argv(name: str, queue: str = "cycle") -> list[str]:
    return [
        "-m",
        "celery",
        "-A",
        "portal",
        "worker",
        "--pool",
        "solo",
        "-Q",
        queue,
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"{name}@%h",
    ]


class Cyclers:
    """Cycle workers on a Redis broker; the test process's wakes are sent to them."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.env = child_env(REDIS_URL=url, CELERY_BROKER_URL=url, KQ_SIM_FAILURE_RATE="0")
        self.workers: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 1, *, own_queues: bool = False) -> None:
        """``own_queues``: each worker consumes its own queue (its name) and nothing else,
        so a test decides which worker runs what."""
        for _ in range(count):
            name = f"cycler{len(self.workers)}"
            self.workers.append(
                subprocess.Popen(
                    [PYTHON, *cycler_argv(name, name if own_queues else "cycle")],
                    cwd=ROOT,
                    env=self.env,
                    stdout=(self.logs / f"{name}.log").open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )

    def ready(self) -> bool:
        """Every worker says it is ready (so tasks sent now are shared out among them)."""
        logs = [(self.logs / f"cycler{i}.log") for i in range(len(self.workers))]
        return all(log.exists() and " ready." in log.read_text() for log in logs)

    def send(self, target: str, countdown_s: float = 0.0, queue: str = "cycle") -> None:
        with app.connection_for_write(self.url) as conn:
            app.send_task(
                "queueing.react",
                args=[target],
                countdown=countdown_s,
                queue=queue,
                connection=conn,
            )

    def stop(self) -> None:
        for worker in self.workers:
            worker.terminate()
        for worker in self.workers:
            worker.wait(timeout=30)
        for log in sorted(self.logs.glob("cycler*.log")):
            print(log.name, log.read_text())


@pytest.fixture
def cyclers(tmp_path, settings) -> Iterator[Cyclers]:
    with redis_url() as url:
        pool = Cyclers(url, tmp_path)
        settings.KQ_WAKE = True
        wake.set_sender(pool.send)
        try:
            yield pool
        finally:
            wake.set_sender(None)
            pool.stop()


def phase(pk: int) -> str:
    return Workload.objects.values_list("phase", flat=True).get(pk=pk)


def test_a_submission_and_a_finish_each_wake_the_cycle_without_beat(world, cyclers):
    cyclers.start()
    # Each job takes both 8-cpu nodes (the whole 16-cpu root): they run one after the other.
    first = builders.submit(world, "first", cpu="8", count=2, runtime=1)
    second = builders.submit(world, "second", cpu="8", count=2, runtime=1)
    wait_until(
        lambda: phase(first.pk) == Phase.ADMITTED,
        timeout=60,
        what="the submission's wake to admit the first job",
    )
    assert phase(second.pk) == Phase.PENDING
    # The first job ends a second after it started; the worker's timer wakes a sync,
    # which hands its quota over to the second.
    wait_until(
        lambda: phase(second.pk) in (Phase.ADMITTED, Phase.RUNNING),
        timeout=60,
        what="the first job's finish to admit the second",
    )
    assert phase(first.pk) == Phase.SUCCEEDED


def other_tree() -> Quota:
    from queueing import actions

    root = actions.create_quota(
        SYSTEM, name="other", tenant=None, parent=None, min={"cpu": "16"}, max={"cpu": "16"}
    )
    tenant = actions.create_tenant(SYSTEM, name="team-b")
    return actions.create_quota(
        SYSTEM,
        name="team-b-q",
        tenant=tenant,
        parent=root,
        min={"cpu": "16"},
        max={"cpu": "16"},
        namespaces=["team-b"],
    )


def test_two_workers_cycling_two_trees_never_overfill_the_shared_nodes(world, cyclers, settings):
    # Two trees of 16 cpu over the same two 8-cpu nodes, 32 cpu of work waiting in each
    # (half-cpu jobs, so each cycle has much to place and takes a while).
    settings.KQ_WAKE = False  # the trees are woken together below, not one by one
    other = other_tree()
    for i in range(64):
        builders.submit(world, f"a{i}", cpu="500m", runtime=600)
        builders.submit(world, f"b{i}", cpu="500m", runtime=600, quota=other)
    # Each worker consumes only its own queue and is sent one tree, so the two cycle at
    # once by construction (on the shared queue one worker could take every task, or skip
    # its tree on the other's lease, and the race under test would not happen).
    cyclers.start(2, own_queues=True)
    wait_until(cyclers.ready, timeout=60, what="both workers to answer")
    for _ in range(3):  # a few rounds: each worker takes its tree at the same moment
        cyclers.send("cluster", queue="cycler0")
        cyclers.send("other", queue="cycler1")

    def rounds_done() -> bool:
        return CycleRun.objects.filter(root="cluster").count() >= 3 and (
            CycleRun.objects.filter(root="other").count() >= 3
        )

    wait_until(rounds_done, timeout=90, what="three cycles of each tree")
    held: dict[str, int] = {}
    for assignment in Workload.objects.filter(phase__in=HOLDING_PHASES).values_list(
        "assignment", flat=True
    ):
        for node, resources in (assignment or {}).items():
            held[node] = held.get(node, 0) + int(resources["cpu"])
    # Full, and not one millicore beyond what each node holds.
    assert held == {"node-1": 8000, "node-2": 8000}
    # Both workers cycled (the lease and the placement lock, not a single process, kept
    # the nodes whole).
    assert CycleRun.objects.values("worker").distinct().count() == 2
