"""koord-queue's preemptible label read from jobs in the fake cluster, end to end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import override_settings

from queueing.admission import tick
from queueing.choices import Phase
from queueing.models import Workload
from tests.fakekube import FakeKube
from tests.kube.conftest import ApiErrors, job_manifest, make_adapter
from tests.kube.test_kube_cycle import KubeWorld, build_world

pytestmark = pytest.mark.django_db

KOORD = "quota.scheduling.koordinator.sh/preemptible"
ALIBABA = "quota.scheduling.alibabacloud.com/preemptible"


@pytest.fixture
def world(
    fake: FakeKube, api_errors: ApiErrors, use_cluster: Callable[[Any], None]
) -> Iterator[KubeWorld]:
    cluster = make_adapter(fake.url, api_errors, namespaces=["team-a", "team-b"])
    use_cluster(cluster)
    yield build_world(fake, cluster)
    cluster.api.close()


def test_a_non_preemptible_job_is_admitted_only_within_its_quota_s_min(world: KubeWorld):
    # team-a-q: min 8 cpu, max 16, on two nodes of 8. A 12-cpu job labelled "false"
    # (alibabacloud's name) fits max, not min: it waits. A 4-cpu one (koordinator's
    # name) fits min: admitted. The same 12 cpu labelled "true", and one unlabelled
    # in team-b, are preemptible (the default) and borrow as before.
    def job(name: str, parallelism: int, labels: dict[str, str], ns: str = "team-a") -> None:
        body = job_manifest(name, parallelism=parallelism, cpu="4", runtime=600, labels=labels)
        world.fake.create("jobs", body, ns)

    job("np-big", 3, {ALIBABA: "false"})
    job("np-small", 1, {KOORD: "false"})
    job("yes-big", 3, {KOORD: "true"})
    tick(cluster=world.cluster)
    flags = dict(Workload.objects.values_list("name", "preemptible"))
    assert flags == {"np-big": False, "np-small": False, "yes-big": True}
    phases = world.phases()
    assert phases["np-big"] == Phase.PENDING
    assert phases["np-small"] in (Phase.ADMITTED, Phase.RUNNING)
    assert phases["yes-big"] in (Phase.ADMITTED, Phase.RUNNING)  # the positive control
    reason = Workload.objects.get(name="np-big").reason
    assert "non-preemptible: needs 12 cpu within min 8 cpu" in reason, reason
    assert "team-a-q's non-preemptible work holds 4 cpu" in reason, reason


def test_a_queue_unit_s_label_counts_when_its_job_has_none(
    fake: FakeKube, use_cluster: Callable[[Any], None]
) -> None:
    cluster = make_adapter(fake.url, namespaces=["team-a", "team-b"], mirror_queue_units=True)
    use_cluster(cluster)
    world = build_world(fake, cluster)

    def unit(job: str, value: str) -> dict[str, Any]:
        ref = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "namespace": "team-a"}
        return {
            "metadata": {"name": f"{job}-unit", "labels": {KOORD: value}},
            "spec": {"consumerRef": ref},
        }

    fake.create("jobs", job_manifest("by-unit", runtime=600), "team-a")
    fake.create("queueunits", unit("by-unit", "false"), "team-a")
    # The job's own label wins over its unit's.
    fake.create("jobs", job_manifest("own", runtime=600, labels={KOORD: "true"}), "team-a")
    fake.create("queueunits", unit("own", "false"), "team-a")
    fake.create("jobs", job_manifest("no-unit", runtime=600), "team-a")  # the control
    with override_settings(KQ_MIRROR_QUEUEUNITS=True):
        tick(cluster=cluster)
    flags = dict(Workload.objects.values_list("name", "preemptible"))
    assert flags == {"by-unit": False, "own": True, "no-unit": True}
    assert world.phases()["no-unit"] in (Phase.ADMITTED, Phase.RUNNING)
    cluster.api.close()
