"""The running time limit (issue 12, item 7): a workload past its
maximumExecutionTimeSeconds is stopped, with the reason; one within it is not."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.utils import timezone

from queueing import actions, kubeevents, maxexec
from queueing.actions import Actor
from queueing.choices import Phase
from queueing.models import Workload, WorkloadEvent
from tests.fakekube import FakeKube
from tests.kube.conftest import ApiErrors, job_manifest, make_adapter
from tests.kube.test_events import Sink
from tests.kube.test_kube_cycle import build_world

SYSTEM = Actor.system()

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


def test_a_queue_limit_stops_its_workloads_and_a_shorter_own_limit_wins(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> None:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    world = build_world(fake, cluster)
    fake.runner.paused = True
    queue = world.quota_a.default_queue
    assert queue is not None
    actions.update_queue(SYSTEM, queue, max_execution_s=120)
    own = "koord-queue/maximum-execution-time-seconds"
    fake.create("jobs", job_manifest("plain"), "team-a")  # the queue's 120 s
    fake.create("jobs", job_manifest("longer", annotations={own: "600"}), "team-a")  # 120 s
    fake.create("jobs", job_manifest("shorter", annotations={own: "30"}), "team-a")  # 30 s
    fake.create("jobs", job_manifest("elsewhere"), "team-b")  # its queue has no limit
    world.tick_until(lambda: Workload.objects.filter(phase=Phase.ADMITTED).count() == 4)
    now = timezone.now()
    over = {w.name: limit for w, limit in maxexec.overrunning(now + timedelta(seconds=90))}
    assert over == {"shorter": 30}
    later = now + timedelta(seconds=200)
    over = {w.name: limit for w, limit in maxexec.overrunning(later)}
    assert over == {"plain": 120, "longer": 120, "shorter": 30}
    cache.set(kubeevents.CURSOR_KEY, _last_step_id(), None)  # tell only what follows
    assert maxexec.enforce(later) == 3
    plain = Workload.objects.get(name="plain")
    assert plain.phase == Phase.CANCELLED
    step = plain.events.last()
    assert step.reason == maxexec.REASON
    assert step.message.startswith(
        f"Stopped: it ran past queue {queue.name}'s maximum execution time of 120 s"
    )
    assert "its maximum execution time of 30 s" in Workload.objects.get(name="shorter").reason
    assert Workload.objects.get(name="elsewhere").phase == Phase.ADMITTED
    # The job's Event carries koord-queue's reason, as `kubectl describe` shows it.
    kubeevents._since.clear()
    sink = Sink()
    kubeevents.publish(sink, timezone.now())
    stopped = {e.ref.name: e for e in sink.told if e.reason == maxexec.REASON}
    assert set(stopped) == {"plain", "longer", "shorter"}
    assert stopped["plain"].message == step.message
    assert stopped["plain"].type == "Warning"
    cluster.api.close()


def _last_step_id() -> int:
    return WorkloadEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
