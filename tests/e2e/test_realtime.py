"""Cycles woken by events, for real: a cycle worker (solo pool on the cycle queue) and no
beat at all, so nothing but wakes and the worker's own timers can admit anything."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from portal.celery import app
from queueing import wake
from queueing.choices import Phase
from queueing.models import Workload
from tests import builders
from tests.services import PYTHON, ROOT, child_env, redis_url, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def cycler_argv(name: str) -> list[str]:
    return [
        "-m",
        "celery",
        "-A",
        "portal",
        "worker",
        "--pool",
        "solo",
        "-Q",
        "cycle",
        "--loglevel",
        "WARNING",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-n",
        f"{name}@%h",
    ]


@pytest.fixture
def cycler(tmp_path, settings) -> Iterator[str]:
    """A cycle worker on a Redis broker; the test process's wakes are sent to it."""
    with redis_url() as url:
        env = child_env(REDIS_URL=url, CELERY_BROKER_URL=url, KQ_SIM_FAILURE_RATE="0")
        log = (tmp_path / "cycler.log").open("wb")
        worker = subprocess.Popen(
            [PYTHON, *cycler_argv("cycler")],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def send(target: str, countdown_s: float) -> None:
            with app.connection_for_write(url) as conn:
                app.send_task(
                    "queueing.react",
                    args=[target],
                    countdown=countdown_s,
                    queue="cycle",
                    connection=conn,
                )

        settings.KQ_WAKE = True
        wake.set_sender(send)
        try:
            yield url
        finally:
            wake.set_sender(None)
            worker.terminate()
            worker.wait(timeout=30)
            print((tmp_path / "cycler.log").read_text())


def phase(pk: int) -> str:
    return Workload.objects.values_list("phase", flat=True).get(pk=pk)


def test_a_submission_and_a_finish_each_wake_the_cycle_without_beat(world, cycler):
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
