"""koord-queue's preemptible label on submissions through the API."""

from __future__ import annotations

import pytest

from queueing.models import Workload
from tests.portal.api.conftest import ApiWorld

pytestmark = pytest.mark.django_db
URL = "/api/v1/workloads/"
LABEL = "quota.scheduling.koordinator.sh/preemptible"


def submit(api: ApiWorld, name: str, labels: dict[str, str]):  # type: ignore[no-untyped-def]
    data = {
        "name": name,
        "queue": "team-a-train",
        "labels": labels,
        "pod_sets": [{"requests": {"cpu": "1"}}],
    }
    return api.call("member", "post", URL, data)


def test_the_label_makes_a_submission_non_preemptible(api: ApiWorld) -> None:
    default = submit(api, "plain", {"team": "vision"})
    assert default.status_code == 201, default.json()
    assert default.json()["preemptible"] is True
    held = submit(api, "held", {LABEL: "false"})
    assert held.status_code == 201, held.json()
    assert held.json()["preemptible"] is False
    assert Workload.objects.get(name="held").preemptible is False
    assert submit(api, "yes", {LABEL: "true"}).json()["preemptible"] is True


def test_a_value_other_than_true_or_false_is_a_400(api: ApiWorld) -> None:
    before = Workload.objects.count()
    response = submit(api, "odd", {LABEL: "no"})
    assert response.status_code == 400, response.json()
    assert "must be" in str(response.json())
    assert Workload.objects.count() == before
