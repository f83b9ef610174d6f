"""The running time limit (issue 12, item 7): a workload past its
maximumExecutionTimeSeconds is stopped, with the reason; one within it is not."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from queueing import maxexec
from queueing.choices import Phase
from queueing.models import Workload
from tests.fakekube import FakeKube
from tests.kube.conftest import ApiErrors, job_manifest, make_adapter
from tests.kube.test_kube_cycle import build_world

pytestmark = pytest.mark.django_db


def test_a_workload_past_its_limit_is_stopped_with_the_reason(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> None:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    fake.runner.paused = True  # they stay admitted as long as the test wants
    limited = {"koord-queue/maximum-execution-time-seconds": "60"}
    fake.create("jobs", job_manifest("limited", annotations=limited), "team-a")
    kueue = job_manifest("kueue", labels={"kueue.x-k8s.io/max-exec-time-seconds": "600"})
    fake.create("jobs", kueue, "team-a")
    fake.create("jobs", job_manifest("free"), "team-a")
    world.tick_until(lambda: Workload.objects.filter(phase=Phase.ADMITTED).count() == 3)
    now = timezone.now()
    assert maxexec.overrunning(now) == []  # just admitted: within every limit
    # An hour later, by the clock of the check: 60 s and 600 s are both past.
    later = now + timedelta(hours=1)
    over = {w.name: limit for w, limit in maxexec.overrunning(later)}
    assert over == {"limited": 60, "kueue": 600}
    assert maxexec.enforce(later) == 2
    stopped = Workload.objects.get(name="limited")
    assert stopped.phase == Phase.CANCELLED
    assert "maximum execution time of 60 s" in stopped.events.last().message
    assert Workload.objects.get(name="free").phase == Phase.ADMITTED  # no limit, untouched
    with pytest.raises(Exception):  # noqa: B017, PT011 - the fake's own ApiError
        fake.store.get("jobs", "team-a", "limited")  # its job is gone, as any cancel
    cluster.api.close()
