"""A cycle's cluster calls in the background (state.calls), and what the sync and the
trace make of them."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from queueing import sync, trace
from queueing.choices import Phase
from queueing.cluster.base import JobInfo, JobRef
from queueing.lease import Fence
from queueing.models import Workload
from queueing.state import calls

REF = JobRef("Job", "batch/v1", "team-a", "job-1", "uid-1")


class SlowCluster:
    """An API server whose admit calls wait until the test lets them through."""

    write_concurrency = 8

    def __init__(self) -> None:
        self.go = threading.Event()
        self.admitted: list[JobRef] = []

    def admit(self, ref: JobRef, *, node_selector: Any = None) -> None:
        assert self.go.wait(10), "the test never let the call through"
        self.admitted.append(ref)

    def suspend(self, ref: JobRef) -> None:  # pragma: no cover - not called here
        raise AssertionError("no suspension expected")


def test_calls_in_the_background_are_in_flight_until_done_then_release() -> None:
    cluster = SlowCluster()
    released: list[int] = []
    errors: list[str] = []
    assert calls.can_run_in_background(cluster)
    future = calls.run_calls_in_background(
        cluster, [calls.Call("admit", REF)], Fence(None), errors, lambda: released.append(1)
    )
    assert calls.in_flight(REF)  # the sync leaves it alone meanwhile
    assert released == []  # the lease is held while the call is on its way
    cluster.go.set()
    future.result(timeout=10)
    assert cluster.admitted == [REF]
    assert not calls.in_flight(REF)
    assert released == [1]  # exactly once, after the call
    assert errors == []


def test_the_simulated_cluster_keeps_its_calls_in_the_callers_thread() -> None:
    class Simulated:
        write_concurrency = 1

    assert not calls.can_run_in_background(Simulated())


def test_the_switch_keeps_calls_in_the_callers_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KQ_KUBE_BACKGROUND", "0")
    assert not calls.can_run_in_background(SlowCluster())


def _admitted_but_suspended() -> tuple[Workload, JobInfo]:
    workload = Workload(
        id=7,
        phase=Phase.ADMITTED,
        kind=REF.kind,
        api_version=REF.api_version,
        namespace=REF.namespace,
        name=REF.name,
        object_uid=REF.uid,
        created_at=timezone.now() - timedelta(minutes=1),
    )
    job = JobInfo(ref=REF, state="Pending", suspended=True, pod_sets=[])
    return workload, job


def test_the_sync_does_not_repeat_an_admission_on_its_way() -> None:
    workload, job = _admitted_but_suspended()
    checks = sync.Checks(stopped=lambda _: False, gone=lambda _: False)
    repairs: list[calls.Call] = []
    sync._reconcile(workload, job, timezone.now(), repairs, [], checks)
    assert [c.verb for c in repairs] == ["admit"]  # the positive control: it repairs

    cluster = SlowCluster()
    future = calls.run_calls_in_background(
        cluster, [calls.Call("admit", REF)], Fence(None), [], lambda: None
    )
    try:
        repairs = []
        sync._reconcile(workload, job, timezone.now(), repairs, [], checks)
        assert repairs == []  # this process's own call is on its way
    finally:
        cluster.go.set()
        future.result(timeout=10)


def test_a_trace_line_reads_back(caplog: pytest.LogCaptureFixture, monkeypatch) -> None:
    monkeypatch.setattr(trace, "_on", True)
    with caplog.at_level("WARNING", logger="queueing.trace"):
        trace.mark("cycle", root="cohort-0", admitted=3)
    parsed = trace.parse("2026-12-03 07:00:00,000 WARNING queueing.trace " + caplog.messages[-1])
    assert parsed is not None
    _, _, step, fields = parsed
    assert (step, fields) == ("cycle", {"root": "cohort-0", "admitted": 3})
    assert trace.parse("2026-12-03 07:00:00,000 WARNING other message") is None
