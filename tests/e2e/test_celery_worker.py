"""A real Celery worker (with its beat) on a Redis broker runs sync + cycle on its own."""

from __future__ import annotations

import subprocess

import pytest

from queueing.choices import Phase
from queueing.models import CycleRun, Workload
from tests import builders
from tests.services import PYTHON, ROOT, child_env, redis_url, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_worker_subprocess_admits_and_finishes_work(world, tmp_path):
    small = [builders.submit(world, f"job-{i}", cpu="2", runtime=1) for i in range(3)]
    too_big = builders.submit(world, "too-big", cpu="8", count=3, runtime=1)  # 24 cpu > 16
    with redis_url() as url:
        env = child_env(
            REDIS_URL=url, CELERY_BROKER_URL=url, KQ_CYCLE_INTERVAL_S="0.3", KQ_SIM_FAILURE_RATE="0"
        )
        worker = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "-B",
                "--pool",
                "solo",
                "--loglevel",
                "WARNING",
                "--schedule",
                str(tmp_path / "beat-schedule"),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:

            def finished() -> bool:
                phases = set(
                    Workload.objects.filter(pk__in=[w.pk for w in small]).values_list(
                        "phase", flat=True
                    )
                )
                return phases == {Phase.SUCCEEDED}

            wait_until(finished, timeout=60, interval=0.3, what="the worker to run the jobs")
        finally:
            worker.terminate()
            output = worker.communicate(timeout=30)[0]
    assert CycleRun.objects.exists(), output
    big = Workload.objects.get(pk=too_big.pk)
    assert big.phase == Phase.PENDING
    assert big.reason  # the cycle explained why it waits
