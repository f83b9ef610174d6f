"""The fake API server under the end-to-end benchmark's load, alone: `make bench
BENCH=fakekube_creations`.

``kueue_baseline_e2e`` creates 15,000 Jobs on Kueue's generator schedule (the last one
60 s after the start, most within 35 s). When the fake server falls behind, creations
arrive late and the benchmark measures the server instead of the product. This bench
replays the same creations through the same client (six keep-alive connections) against
the fake server in its own process, with what the product adds to the server's load: two
watch streams over every Job (the watcher and a worker's informer), and an admitter that
unsuspends Jobs in arrival order while they fit the node (the cycle's patch; the
baseline's quota equals the node), so the job runner starts and finishes each (pod and
status writes, more watch events).

Figures: ``late_*_ms`` -- how long after its scheduled time each creation was answered;
``span_s`` -- from the start to the last answer (the schedule's own span is
``schedule_s``); ``finished`` -- Jobs the runner finished by the end; ``server_cpu_s`` -- CPU time
the server process used from the first creation until the Jobs ran (what it takes
from the product on a shared machine). Knobs:
KQ_BENCH_FAKE_SCALE (fraction of each class, default 1), KQ_BENCH_FAKE_ADMIT (0 to
leave Jobs suspended), KQ_BENCH_FAKE_WATCHES (``product``: also the 64 watches the product
opens in the end-to-end run -- per process, one over the Jobs of each of the 30
namespaces, one over nodes, one over bound pods; two processes -- so that each commit is
offered to the watches of its kind and namespace only, as there).
"""

from __future__ import annotations

import http.client
import json
import os
import threading
import time
from collections import deque
from typing import Any
from urllib.parse import urlsplit

from tests.bench.bench_e2e import (
    COHORTS,
    NOMINAL,
    QUEUES_PER_COHORT,
    Api,
    cluster_queues,
    schedule,
    seed_cluster,
)
from tests.fakekube.client import FakeKubeProcess

THREADS = 6  # as create_on_schedule


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


class Watcher(threading.Thread):
    """A watch over every Job; tells ``admitter`` (if any) of new and finished Jobs."""

    def __init__(
        self,
        url: str,
        admitter: Admitter | None = None,
        path: str = "/apis/batch/v1/jobs?watch=true&timeoutSeconds=600",
    ) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.path = path
        self.admitter = admitter
        self.events = 0
        self.stop = threading.Event()

    def run(self) -> None:
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
        conn.request("GET", self.path)
        response = conn.getresponse()
        buffer = b""
        while not self.stop.is_set():
            chunk = response.read1(65536)
            if not chunk:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                self.events += 1
                if self.admitter is not None:
                    event = json.loads(line)
                    job = event["object"]
                    key = (job["metadata"]["namespace"], job["metadata"]["name"])
                    if event["type"] == "ADDED":
                        container = job["spec"]["template"]["spec"]["containers"][0]
                        self.admitter.add(key, int(container["resources"]["requests"]["cpu"]))
                    elif (job.get("status") or {}).get("completionTime"):
                        self.admitter.finished(key)


class Admitter(threading.Thread):
    """Unsuspends Jobs in arrival order while they fit the node, as the product's cycle
    does within quota (the baseline's quota equals the node): one patch per Job."""

    def __init__(self, url: str, capacity: int) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.free = capacity
        self.waiting: deque[tuple[tuple[str, str], int]] = deque()
        self.running: dict[tuple[str, str], int] = {}
        self.cond = threading.Condition()
        self.done = 0
        self.stop = threading.Event()

    def add(self, key: tuple[str, str], cpu: int) -> None:
        with self.cond:
            self.waiting.append((key, cpu))
            self.cond.notify()

    def finished(self, key: tuple[str, str]) -> None:
        with self.cond:
            self.free += self.running.pop(key, 0)
            self.cond.notify()

    def run(self) -> None:
        parts = urlsplit(self.url)
        conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)
        body = json.dumps({"spec": {"suspend": False}})
        headers = {"Content-Type": "application/merge-patch+json"}
        while not self.stop.is_set():
            batch: list[tuple[str, str]] = []
            with self.cond:
                while self.waiting and self.waiting[0][1] <= self.free:
                    key, cpu = self.waiting.popleft()
                    self.free -= cpu
                    self.running[key] = cpu
                    batch.append(key)
                if not batch:
                    self.cond.wait(0.5)
                    continue
            for namespace, name in batch:
                conn.request(
                    "PATCH", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}", body, headers
                )
                response = conn.getresponse()
                response.read()
                self.done += 1


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def product_watches() -> list[str]:
    """The watch paths one process of the product opens in the end-to-end run
    (queueing.cluster.kubernetes.informers.ClusterWatcher)."""
    query = "watch=true&allowWatchBookmarks=true&timeoutSeconds=600"
    paths = [f"/apis/batch/v1/namespaces/{ns}/jobs?{query}" for ns in cluster_queues()]
    bound = "spec.nodeName!%3D,status.phase!%3DSucceeded,status.phase!%3DFailed"
    return [*paths, f"/api/v1/nodes?{query}", f"/api/v1/pods?{query}&fieldSelector={bound}"]


def fakekube_creations() -> dict[str, Any]:
    scale = float(os.environ.get("KQ_BENCH_FAKE_SCALE", "1"))
    admit = os.environ.get("KQ_BENCH_FAKE_ADMIT", "1") != "0"
    product = os.environ.get("KQ_BENCH_FAKE_WATCHES", "") == "product"
    plan = schedule(scale)
    with FakeKubeProcess("--time-scale", "1", "--history-limit", "1000000") as fake:
        seed_cluster(fake.url)
        assert fake.process is not None
        pid = fake.process.pid
        admitter = Admitter(fake.url, capacity=COHORTS * QUEUES_PER_COHORT * NOMINAL)
        watchers = [Watcher(fake.url, admitter if admit else None), Watcher(fake.url)]
        if product:
            watchers += [Watcher(fake.url, path=p) for p in product_watches() * 2]
        for thread in (*watchers, admitter):
            thread.start()
        time.sleep(0.5)  # let both watches open before the first creation
        late: list[float] = []
        lock = threading.Lock()
        position = 0
        start = time.monotonic()
        cpu0 = cpu_seconds(pid)

        def work() -> None:
            nonlocal position
            api = Api(fake.url)
            while True:
                with lock:
                    if position >= len(plan):
                        return
                    at, namespace, body = plan[position]
                    position += 1
                delay = start + at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                api.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
                answered = time.monotonic() - start - at
                with lock:
                    late.append(answered)

        workers = [threading.Thread(target=work, daemon=True) for _ in range(THREADS)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        span = time.monotonic() - start
        # Let the Jobs run: the work needs about 66 s at full capacity.
        finished_by = time.monotonic() + 60
        state: dict[str, Any] = {}
        while time.monotonic() < finished_by:
            state = fake.control.state()
            if not admit or (len(admitter.running) == 0 and admitter.done >= len(plan)):
                break
            time.sleep(0.5)
        time_all_done = time.monotonic() - start
        cpu = cpu_seconds(pid) - cpu0
        finished = len(fake.control.log_entries(types=["job_finished"]))
        for thread in (*watchers, admitter):
            thread.stop.set()
    return {
        "creations": len(late),
        "schedule_s": round(max(at for at, _, _ in plan), 2),
        "span_s": round(span, 2),
        "late_p50_ms": round(_pct(late, 50) * 1000, 1),
        "late_p95_ms": round(_pct(late, 95) * 1000, 1),
        "late_max_ms": round(max(late) * 1000, 1),
        "admitted": admitter.done,
        "finished": finished,
        "all_finished_s": round(time_all_done, 2),
        "watch_events": [w.events for w in watchers[:2]],
        "watches": len(watchers),
        "requests": state.get("requests"),
        "server_cpu_s": round(cpu, 1),
        "server_cpu_ms_per_request": round(1000 * cpu / max(1, state.get("requests") or 1), 2),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


BENCHMARKS = {"fakekube_creations": fakekube_creations}
