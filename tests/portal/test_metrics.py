from __future__ import annotations

import pytest
from django.test import override_settings

from queueing import metrics
from queueing.models import Quota
from tests import builders
from tests.builders import submit

pytestmark = pytest.mark.django_db


def test_metrics_need_a_token_or_a_cluster_admin(client, world):
    assert client.get("/metrics").status_code == 401
    member = builders.user("mia", tenant=world.tenant, role="admin")
    client.force_login(member)
    assert client.get("/metrics").status_code == 401
    with override_settings(KQ_METRICS_TOKEN="s3cret"):
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200


def test_metrics_report_queues_quotas_and_counters(client, world):
    submit(world, "a")
    submit(world, "b")
    Quota.objects.filter(pk=world.quota.pk).update(runtime={"cpu": 8000}, used={"cpu": 2000})
    metrics.increment("api_error", "409")
    metrics.increment("api_error", "409")
    client.force_login(builders.user("root", superuser=True))
    body = client.get("/metrics").content.decode()
    assert (
        f'koordqueue_workloads{{phase="Pending",queue="{world.queue.name}",tenant="team-a"}} 2.0'
        in body
    )
    assert 'koordqueue_quota_runtime{quota="team-a-q",resource="cpu"} 8000.0' in body
    assert 'koordqueue_quota_used{quota="team-a-q",resource="cpu"} 2000.0' in body
    assert 'koordqueue_errors_total{detail="409",kind="api_error"} 2.0' in body
    assert "koordqueue_cycle_duration_seconds_bucket" in body
    assert "koordqueue_admission_wait_seconds_count 0.0" in body
