"""kq against a live server: what it sends, what it prints, the exit codes it promises."""

from __future__ import annotations

import pytest

from queueing.models import Workload

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.live, pytest.mark.slow]


def test_submit_pod_sets_then_list_them(kq, site):
    run = kq(
        "submit", "train-1", "--queue", site.queue.name, "--priority", "7",
        "--pod-set", "count=2,cpu=3,memory=6Gi", "--runtime", "120", "-o", "json",
    )  # fmt: skip
    assert run.code == 0, run.err
    created = run.json()
    workload = Workload.objects.get(pk=created["id"])
    assert (workload.name, workload.queue_id, workload.priority) == ("train-1", site.queue.pk, 7)
    assert workload.total_request == {"cpu": 6000, "memory": 12 * 2**30}
    assert workload.expected_runtime_s == 120

    listed = kq("ls", "--queue", site.queue.name)
    assert listed.code == 0, listed.err
    header, row = listed.out.splitlines()
    assert header.split()[:4] == ["ID", "NAME", "NAMESPACE", "QUEUE"]
    assert row.split()[:5] == [str(workload.pk), "train-1", "team-a", site.queue.name, "Pending"]
    assert "cpu 6, memory 12Gi" in row
