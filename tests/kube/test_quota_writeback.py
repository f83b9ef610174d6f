"""Runtime quota written back to the ElasticQuotas (issue 12, item 3): Koordinator's
annotations, in its JSON resource-list format, when they change, rate-limited."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from queueing import quotawriteback
from queueing.admission import tick
from queueing.choices import Phase
from queueing.kubequeue import import_kube_queue, read_objects
from queueing.models import Quota, Workload
from queueing.quantities import format_resources
from tests.fakekube import FakeKube
from tests.kube.conftest import job_manifest, make_adapter
from tests.kube.test_import_kube_queue import elastic_quota
from tests.services import wait_until

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def annotations(fake: FakeKube, name: str) -> dict[str, Any]:
    obj = fake.store.get("elasticquotas", name, name)
    return dict(obj["metadata"].get("annotations") or {})


def test_the_runtime_and_request_reach_the_elastic_quota(
    fake: FakeKube, use_cluster: Callable[[Any], None], settings: Any
) -> None:
    settings.KQ_QUOTA_WRITEBACK_S = 0.0  # every change at the next sync (rate: below)
    for namespace in ("team-a", "team-b"):
        fake.add_namespace(namespace)
        fake.create(
            "elasticquotas",
            elastic_quota(namespace, min={"cpu": "4"}, max={"cpu": "6"}, namespace=namespace),
            namespace,
        )
    fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})
    cluster = make_adapter(fake.url, namespaces=["team-a", "team-b"], kinds=["Job"])
    use_cluster(cluster)
    report = import_kube_queue(read_objects(cluster))
    assert "error" not in {i.verb for i in report.items}, report.lines()
    quotawriteback.forget()  # what an earlier test in this process wrote, to another server
    fake.runner.paused = True
    fake.create("jobs", job_manifest("big", cpu="5"), "team-a")
    fake.create("jobs", job_manifest("more", cpu="3"), "team-a")

    def admitted() -> bool:
        tick(cluster=cluster)
        return Workload.objects.filter(name="big", phase=Phase.ADMITTED).exists()

    wait_until(admitted, timeout=20, interval=0.05)

    def written_back() -> dict[str, Any] | None:
        # The sync writes what the previous cycle computed: one tick behind.
        tick(cluster=cluster)
        written = annotations(fake, "team-a")
        runtime = format_resources(Quota.objects.get(name="team-a").runtime)
        wrote = json.loads(written.get(quotawriteback.RUNTIME_ANNOTATION, "null"))
        return written if runtime and wrote == runtime else None

    written = wait_until(written_back, timeout=20, interval=0.05)
    # 5 + 3 cpu asked, capped at its max of 6 (memory has no max: as asked, 2 x 64Mi).
    assert json.loads(written[quotawriteback.REQUEST_ANNOTATION]) == {"cpu": "6", "memory": "128Mi"}
    assert json.loads(annotations(fake, "team-b")[quotawriteback.REQUEST_ANNOTATION]) == {}
    cluster.api.close()


def test_writes_happen_on_change_and_at_most_once_per_interval(
    fake: FakeKube, settings: Any
) -> None:
    settings.KQ_QUOTA_WRITEBACK_S = 10.0
    fake.add_namespace("team-a")
    fake.create(
        "elasticquotas",
        elastic_quota("team-a", min={"cpu": "4"}, max={"cpu": "6"}, namespace="team-a"),
        "team-a",
    )
    fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})
    cluster = make_adapter(fake.url, namespaces=["team-a"], kinds=["Job"])
    import_kube_queue(read_objects(cluster))
    quota = Quota.objects.get(name="team-a")
    quotawriteback.forget()
    clock = Clock()
    assert quotawriteback.publish(cluster, clock) == 1
    assert quotawriteback.publish(cluster, clock) == 0  # nothing changed
    Quota.objects.filter(pk=quota.pk).update(runtime={"cpu": 5000})
    clock.now += 1.0
    assert quotawriteback.publish(cluster, clock) == 0  # changed, but too soon
    clock.now += 10.0
    assert quotawriteback.publish(cluster, clock) == 1  # and now it goes
    assert json.loads(annotations(fake, "team-a")[quotawriteback.RUNTIME_ANNOTATION]) == {
        "cpu": "5"
    }
    cluster.api.close()
