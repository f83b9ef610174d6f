"""A cycle's cluster writes go out several at a time, each round behind the fence; and
live notifications from sync code reuse one event loop per process."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from queueing import events, state
from queueing.cluster.base import ClusterError, JobRef
from queueing.cluster.kubernetes import WRITE_ROUNDS_AT_ONCE
from queueing.lease import Fence, LeaseLost
from queueing.state.calls import Call, run_calls

ROW = {
    "kind": "Job",
    "api_version": "batch/v1",
    "namespace": "team-a",
    "name": "job",
    "object_uid": "u",
}


class Wide:
    """A cluster that takes ``write_concurrency`` writes at once; each admit of job-<i>
    runs ``recorder.call(i)``."""

    def __init__(self, width: int | None, recorder: Recorder) -> None:
        if width is not None:
            self.write_concurrency = width
        self.recorder = recorder

    def admit(self, ref: JobRef, *, node_selector: Any) -> None:
        self.recorder.call(int(ref.name.rsplit("-", 1)[1]))(ref)


def calls(count: int) -> list[Call]:
    return [Call("admit", JobRef("Job", "batch/v1", "team-a", f"job-{i}")) for i in range(count)]


class Recorder:
    def __init__(self, fail: frozenset[int] = frozenset()) -> None:
        self.lock = threading.Lock()
        self.threads: list[str] = []
        self.calls: list[int] = []
        self.fail = fail
        self.inside = 0
        self.most_inside = 0

    def call(self, i: int) -> Any:
        def do(ref: Any) -> None:
            with self.lock:
                self.calls.append(i)
                self.threads.append(threading.current_thread().name)
                self.inside += 1
                self.most_inside = max(self.most_inside, self.inside)
            try:
                threading.Event().wait(0.02)  # a round trip
                if i in self.fail:
                    raise ClusterError("the API server said no")
            finally:
                with self.lock:
                    self.inside -= 1

        return do


def test_writes_go_out_concurrently_and_each_failure_is_reported():
    recorder = Recorder(fail=frozenset({3, 7}))
    report = state.ApplyReport()
    run_calls(Wide(4, recorder), calls(10), Fence(None), report.errors)  # type: ignore[arg-type]
    assert sorted(recorder.calls) == list(range(10))
    # Each round of four: one call in the caller's thread, three in the process's pool.
    mine = threading.current_thread().name
    assert recorder.threads.count(mine) == 3  # rounds of 4, 4, 2
    assert all(name.startswith("kq-write") for name in recorder.threads if name != mine)
    assert 1 < recorder.most_inside <= 4
    assert len(report.errors) == 2
    assert {e.split(":")[0] for e in report.errors} == {"team-a/job-3", "team-a/job-7"}


def test_one_write_at_a_time_for_a_cluster_that_says_nothing():
    recorder = Recorder()
    report = state.ApplyReport()
    run_calls(Wide(None, recorder), calls(3), Fence(None), report.errors)  # type: ignore[arg-type]
    assert recorder.calls == [0, 1, 2]
    assert set(recorder.threads) == {threading.current_thread().name}


class LosingFence(Fence):
    """The lease is lost after ``rounds`` checks."""

    def __init__(self, rounds: int) -> None:
        super().__init__(None)
        self.rounds = rounds

    def check(self) -> None:
        if self.rounds == 0:
            raise LeaseLost("the lease expired")
        self.rounds -= 1


def test_a_lost_lease_stops_the_writes_between_rounds():
    recorder = Recorder()
    report = state.ApplyReport()
    run_calls(Wide(3, recorder), calls(10), LosingFence(2), report.errors)  # type: ignore[arg-type]
    assert sorted(recorder.calls) == [0, 1, 2, 3, 4, 5]  # two rounds of three
    assert report.errors == ["the lease expired"]


class CrossProcessLayer:
    """Stands for the Redis layer: records the loop each send ran on."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, asyncio.AbstractEventLoop]] = []

    async def group_send(self, group: str, message: Any) -> None:
        self.sent.append((group, message, asyncio.get_running_loop()))


def test_sends_from_sync_code_share_one_long_lived_loop(monkeypatch: pytest.MonkeyPatch):
    layer = CrossProcessLayer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(events, "_sender", events._SenderLoop())
    events.send(7, {"type": "changed"})
    events.send(8, {"type": "changed"})
    assert events.flush(5)
    groups = [group for group, _, _ in layer.sent]
    assert groups == ["tenant.7", "tenant.all", "tenant.8", "tenant.all"]
    loops = {id(loop) for _, _, loop in layer.sent}
    assert len(loops) == 1  # one loop, so the layer keeps one connection


class SlowLayer:
    """A Redis layer that answers only once ``gate`` is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.sent: list[tuple[str, Any]] = []

    async def group_send(self, group: str, message: Any) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.gate.wait, 5)
        self.sent.append((group, message["payload"]["n"]))


def test_a_send_does_not_wait_for_the_layer_and_delivers_in_order(
    monkeypatch: pytest.MonkeyPatch,
):
    """A cycle's commit goes on while its notifications are sent: the caller returns
    before the layer has answered, and the messages still arrive, in the order sent."""
    layer = SlowLayer()
    monkeypatch.setattr(events, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(events, "_sender", events._SenderLoop())
    monkeypatch.setattr(events, "SEND_TIMEOUT_S", 3.0)
    for n in range(3):
        events.send(7, {"type": "changed", "n": n})
    events.send(None, {"type": "nodes", "n": 3})
    assert layer.sent == []  # every send returned with the layer still silent
    layer.gate.set()
    assert events.flush(10)
    assert layer.sent == [
        ("tenant.7", 0),
        ("tenant.all", 0),
        ("tenant.7", 1),
        ("tenant.all", 1),
        ("tenant.7", 2),
        ("tenant.all", 2),
        ("tenant.all", 3),
    ]


def test_a_forked_process_starts_a_loop_of_its_own(monkeypatch: pytest.MonkeyPatch):
    sender = events._SenderLoop()
    seen: list[asyncio.AbstractEventLoop] = []

    async def where() -> None:
        seen.append(asyncio.get_running_loop())

    sender.run(where, 5)
    monkeypatch.setattr(events.os, "getpid", lambda: -1)
    sender.run(where, 5)
    assert seen[0] is not seen[1]


def test_only_a_cross_process_layer_goes_through_the_loop():
    from channels.layers import InMemoryChannelLayer

    layer = InMemoryChannelLayer()
    assert not events._cross_process(layer)
    assert events._cross_process(CrossProcessLayer())


def test_the_write_pool_is_kept_between_calls_and_made_anew_after_a_fork():
    from queueing.state import calls as calls_module

    recorder = Recorder()
    run_calls(Wide(4, recorder), calls(4), Fence(None), [])  # type: ignore[arg-type]
    pool = calls_module._writer_pool
    assert pool is not None
    run_calls(Wide(4, recorder), calls(4), Fence(None), [])  # type: ignore[arg-type]
    assert calls_module._writer_pool is pool  # the same threads, not a pool per batch
    run_calls(Wide(8, recorder), calls(8), Fence(None), [])  # type: ignore[arg-type]
    wider = calls_module._writer_pool
    assert wider is not pool  # a wider cluster gets a wider pool
    assert wider is not None
    assert wider._max_workers >= 8 * (calls_module.BACKGROUND_WIDTH + 1)
    # ... and the adapter keeps as many connections to the API server open.
    assert WRITE_ROUNDS_AT_ONCE == calls_module.BACKGROUND_WIDTH + 1
    calls_module._after_fork_in_child()  # what a forked child (a Celery worker) runs
    assert calls_module._writer_key == (0, 0)  # no pool: the next call makes one
    run_calls(Wide(4, recorder), calls(4), Fence(None), [])  # type: ignore[arg-type]
    fresh = calls_module._writer_pool
    assert fresh is not None
    assert fresh is not wider
    wider.shutdown(wait=True)
