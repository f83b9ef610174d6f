"""`import_kube_queue`: kube-queue Queues and Koordinator ElasticQuotas become tenants,
quotas and queues; a dry run writes nothing; a second run changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from queueing import compat
from queueing.kubequeue import import_kube_queue, read_objects
from queueing.models import AuditEvent, Queue, Quota, Tenant
from tests.fakekube import FakeKube
from tests.kube.conftest import make_adapter

pytestmark = pytest.mark.django_db

PARENT = compat.QUOTA_PARENT_LABEL


def elastic_quota(
    name: str,
    *,
    parent: str | None = None,
    min: dict[str, str],
    max: dict[str, str],
    namespace: str = "koordinator-system",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    all_labels = dict(labels or {})
    if parent:
        all_labels[PARENT] = parent
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": all_labels,
            "annotations": dict(annotations or {}),
        },
        "spec": {"min": min, "max": max},
    }


def seed(fake: FakeKube) -> None:
    for namespace in ("koordinator-system", "team-a", "team-b", "ml"):
        fake.add_namespace(namespace)
    fake.add_node("n1", {"cpu": "8", "memory": "32Gi"})
    fake.add_node("n2", {"cpu": "8", "memory": "32Gi"})
    quotas = [
        elastic_quota("koordinator-root-quota", min={}, max={}),
        elastic_quota(
            "research",
            parent="koordinator-root-quota",
            min={"cpu": "16", "memory": "32Gi"},
            max={"cpu": "32", "memory": "64Gi"},
            labels={compat.QUOTA_IS_PARENT_LABEL: "true"},
        ),
        elastic_quota(
            "team-a",
            parent="research",
            min={"cpu": "8", "memory": "16Gi"},
            max={"cpu": "16", "memory": "64Gi"},
            annotations={compat.QUOTA_SHARED_WEIGHT_ANNOTATION: json.dumps({"cpu": "2"})},
        ),
        elastic_quota(
            "ml-train",
            parent="research",
            min={"cpu": "4"},
            max={"cpu": "16"},
            labels={compat.QUOTA_ALLOW_LENT_LABEL: "false"},
            annotations={compat.QUOTA_NAMESPACES_ANNOTATION: json.dumps(["ml"])},
        ),
        elastic_quota("team-b", min={"cpu": "8"}, max={"cpu": "16"}),
    ]
    for quota in quotas:
        fake.create("elasticquotas", quota, quota["metadata"]["namespace"])
    fake.create(
        "queues",
        {"metadata": {"name": "team-a-fifo"}, "spec": {"queuePolicy": "FIFO", "priority": 10}},
        "team-a",
    )
    fake.create("queues", {"metadata": {"name": "ml-q"}, "spec": {"queuePolicy": "Priority"}}, "ml")
    for name, queue in (("j1-job", "team-a-fifo"), ("j2-job", "ghost")):
        fake.create(
            "queueunits",
            {
                "metadata": {"name": name},
                "spec": {
                    "consumerRef": {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": name[:2],
                        "namespace": "team-a",
                    },
                    "queue": queue,
                },
            },
            "team-a",
        )


@pytest.fixture
def seeded(fake: FakeKube, use_cluster: Callable[[Any], None]) -> FakeKube:
    seed(fake)
    use_cluster(make_adapter(fake.url))
    return fake


def run(*args: str) -> str:
    out = StringIO()
    call_command("import_kube_queue", *args, stdout=out)
    return out.getvalue()


def test_a_dry_run_prints_the_plan_and_writes_nothing(seeded: FakeKube):
    output = run("--dry-run")
    assert "Dry run" in output
    assert (
        "+ create quota root (root): the cluster's capacity, cpu 32, memory 64Gi, pods 220"
        in output
    )
    assert (
        "+ create quota team-a: tenant research, parent research, min cpu 8, memory 16Gi" in output
    )
    assert "namespaces team-a" in output
    assert "+ create queue team-a-fifo: tenant research, policy Block, priority 10" in output
    assert "- skip quota koordinator-root-quota: Koordinator's own quota" in output
    assert "- skip 1 QueueUnit(s): their queue 'ghost' does not exist" in output
    assert (Quota.objects.count(), Tenant.objects.count(), Queue.objects.count()) == (0, 0, 0)
    assert not AuditEvent.objects.exists()


def test_the_import_creates_tenants_quotas_and_queues_once(seeded: FakeKube):
    first = run()
    assert "! error" not in first
    assert set(Tenant.objects.values_list("name", flat=True)) == {"research", "team-b"}
    team_a = Quota.objects.get(name="team-a")
    assert (team_a.parent.name, team_a.tenant.name) == ("research", "research")
    assert team_a.min == {"cpu": 8000, "memory": 16 * 2**30}
    assert team_a.shared_weight == {"cpu": 2000}
    assert team_a.namespaces == ["team-a"]
    assert team_a.default_queue.name == "team-a-fifo"
    ml = Quota.objects.get(name="ml-train")
    assert (ml.allow_lent, ml.namespaces, ml.default_queue.name) == (False, ["ml"], "ml-q")
    assert Quota.objects.get(name="team-b").parent.name == "root"
    fifo = Queue.objects.get(name="team-a-fifo")
    assert (fifo.policy, fifo.priority, fifo.tenant.name) == ("Block", 10, "research")
    assert AuditEvent.objects.filter(action="quota.create").count() == 5

    audits = AuditEvent.objects.count()
    second = run()
    assert "0 create, 0 update" in second
    assert AuditEvent.objects.count() == audits  # nothing changed, nothing written


def test_a_changed_quota_is_updated(seeded: FakeKube):
    run()
    quota = seeded.store.get("elasticquotas", "koordinator-system", "team-a")
    seeded.store.update(
        "elasticquotas",
        "koordinator-system",
        "team-a",
        {**quota, "spec": {**quota["spec"], "max": {"cpu": "24", "memory": "64Gi"}}},
    )
    output = run()
    assert "~ update quota team-a: max cpu 16, memory 64Gi -> cpu 24, memory 64Gi" in output
    assert "1 update" in output
    assert Quota.objects.get(name="team-a").max["cpu"] == 24000


def test_refused_items_are_reported_and_the_rest_is_imported(seeded: FakeKube):
    seeded.create(
        "elasticquotas",
        elastic_quota("greedy", parent="research", min={"cpu": "64"}, max={"cpu": "64"}),
        "koordinator-system",
    )
    seeded.create(
        "elasticquotas",
        elastic_quota("bad-amount", min={"cpu": "lots"}, max={}),
        "koordinator-system",
    )
    seeded.create("queues", {"metadata": {"name": "nobodys"}, "spec": {}}, "default")
    with pytest.raises(CommandError, match="could not be imported"):
        run()
    report = import_kube_queue(read_objects(make_adapter(seeded.url)), dry_run=True)
    errors = {i.what: i.detail for i in report.items if i.verb == "error"}
    assert "more than the parent 'research' allows" in errors["quota greedy"]
    assert "'lots' is not a Kubernetes quantity" in errors["quota bad-amount"]
    assert "no tenant quota claims its namespace 'default'" in errors["queue nobodys"]
    assert Quota.objects.filter(name="team-a").exists()
