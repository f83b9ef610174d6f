"""What one Job watch event costs the worker: `python -m tests.bench watch_events`.

The end-to-end benchmark's worker reads every Job's lifecycle (created suspended,
unsuspended, started, finished: four to five events a Job) from the watch streams of its
informers, one thread each. This bench records those events as the fake API server
commits them (the e2e's Job manifests, its single large node, the job runner in manual
time), serves them to the adapter's ``Rest.stream`` over a real loopback HTTP connection
in chunked transfer encoding, as the fake server does (``KQ_BENCH_WATCH_BATCH`` events a
chunk, default 1; the fake server sends what committed since its last write), and feeds
them through ``Informer.watch_once`` with the ``ClusterWatcher``'s Job handler, as the
worker does.

Figures (CPU of the reading thread, ``time.thread_time``; median of ``KQ_BENCH_WATCH_REPEAT``
passes, default 5): ``stream_us_per_event`` -- reading and decoding only (``Rest.stream``);
``informer_us_per_event`` -- the whole informer (decode, cache, handler); ``events``, the
number of events and ``bytes_per_event``; ``fake_store_us_per_job`` -- what recording
cost the fake API server's store, per Job (its writes, the job runner, the pods, the
JSON of each Job event), one pass. ``KQ_BENCH_WATCH_JOBS`` sets the Jobs (default 3000).
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from typing import Any

from tests.bench.bench_e2e import CLASSES, cluster_queues, job_manifest
from tests.fakekube import FakeKube, ManualClock, api_client

JOB_PATH = "/apis/batch/v1/jobs"


def record_job_lines(jobs: int) -> list[bytes]:
    """The watch lines of ``jobs`` Jobs' whole lives, in commit order, as the fake API
    server sends them to a watch over every Job."""
    clock = ManualClock()
    fake = FakeKube(clock=clock, runner=False, default_runtime=0.2)
    namespaces = cluster_queues()
    for ns in namespaces:
        fake.add_namespace(ns)
    fake.add_node("node-0", {"cpu": "600", "memory": "4Ti", "pods": "100000"})
    store = fake.store
    _initial, feed = store.watch(store.registry.resolve("jobs"), None, str(store.rv))
    created = []
    for i in range(jobs):
        ns = namespaces[i % len(namespaces)]
        kind = CLASSES[i % len(CLASSES)]
        created.append(fake.create("jobs", job_manifest(ns, kind, i), ns))
    for job in created:
        meta = job["metadata"]
        with store.acting("api"):
            store.patch("jobs", meta["namespace"], meta["name"], {"spec": {"suspend": False}})
        if len(created) and (created.index(job) % 200) == 199:
            _drain(fake, clock)
    _drain(fake, clock)
    events, _cursor = feed.take(0)
    store.unwatch(feed)
    return [e.line() for e in events]


def _drain(fake: FakeKube, clock: ManualClock) -> None:
    for _ in range(8):
        fake.runner.step()
        clock.advance(1.5)
        fake.runner.step()


class ChunkServer(threading.Thread):
    """Answers one GET per connection with ``lines`` in chunked encoding, ``batch`` a chunk."""

    def __init__(self, lines: list[bytes], batch: int, pace_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.lines, self.batch, self.pace_s = lines, batch, pace_s
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        head += b"Transfer-Encoding: chunked\r\n\r\n"
        chunks = [b"".join(lines[i : i + batch]) for i in range(0, len(lines), batch)]
        self.head = head
        self.chunks = [b"%x\r\n%s\r\n" % (len(c), c) for c in chunks] + [b"0\r\n\r\n"]

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        break
                    buf += data
                if not self.pace_s:
                    conn.sendall(self.head + b"".join(self.chunks))
                    continue
                conn.sendall(self.head)
                for chunk in self.chunks:  # one write a chunk, the reader waiting for each
                    conn.sendall(chunk)
                    time.sleep(self.pace_s)


def _rest(url: str) -> Any:
    from queueing.cluster.kubernetes.client import Rest

    return Rest(api_client(url), on_error=lambda verb, label: None)


class _Source:
    def __init__(self, rest: Any) -> None:
        from queueing.cluster.kubernetes.kinds import BatchJob

        self._rest = rest
        self.kinds = [BatchJob()]

    @property
    def rest(self) -> Any:
        return self._rest

    def scopes(self) -> list[str | None]:
        return [None]


def watch_events() -> dict[str, Any]:
    jobs = int(os.environ.get("KQ_BENCH_WATCH_JOBS", "3000"))
    batch = int(os.environ.get("KQ_BENCH_WATCH_BATCH", "1"))
    repeat = int(os.environ.get("KQ_BENCH_WATCH_REPEAT", "5"))
    pace_s = float(os.environ.get("KQ_BENCH_WATCH_PACE_US", "0")) / 1e6
    started = time.thread_time()
    lines = record_job_lines(jobs)
    store_s = time.thread_time() - started
    server = ChunkServer(lines, batch, pace_s)
    server.start()
    url = f"http://127.0.0.1:{server.port}"
    from queueing.cluster.kubernetes.informers import ClusterWatcher, Informer

    stream_s, informer_s = [], []
    for _ in range(repeat):
        rest = _rest(url)
        started = time.thread_time()
        count = sum(1 for _ in rest.stream(JOB_PATH, {"watch": "true"}, read_timeout_s=30))
        stream_s.append(time.thread_time() - started)
        assert count == len(lines), (count, len(lines))

        watcher = ClusterWatcher(_Source(_rest(url)), on_change=lambda reason: None)
        informer = watcher.informers[0]
        assert isinstance(informer, Informer)
        informer.resource_version = "1"  # no list: the stream is the whole history
        started = time.thread_time()
        applied = informer.watch_once()
        informer_s.append(time.thread_time() - started)
        assert applied == len(lines), (applied, len(lines))
        watcher.api.close()
    server.sock.close()
    n = len(lines)
    return {
        "name": "watch_events",
        "jobs": jobs,
        "events": n,
        "batch": batch,
        "pace_us": round(pace_s * 1e6),
        "bytes_per_event": round(sum(map(len, lines)) / n),
        "fake_store_us_per_job": round(store_s / jobs * 1e6),
        "stream_us_per_event": round(statistics.median(stream_s) / n * 1e6, 2),
        "informer_us_per_event": round(statistics.median(informer_s) / n * 1e6, 2),
    }


BENCHMARKS = {"watch_events": watch_events}
