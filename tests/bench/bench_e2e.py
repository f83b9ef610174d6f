"""Kueue's baseline through the whole stack: `python -m tests.bench kueue_baseline_e2e`.

The scenario of ``simulate --scenario kueue-baseline`` (DESIGN §7), but for real and in
real time: 5 cohorts x 6 ClusterQueues (a root quota per cohort, a leaf quota, namespace
and queue per ClusterQueue, nominal 20 cpu, borrowing limit 100), and per queue 350
small (1 cpu, 200 ms, priority 50, one every 100 ms), 100 medium (5 cpu, 500 ms, priority
100, every 500 ms) and 50 large (20 cpu, 1 s, priority 200, every 1.2 s) batch/v1 Jobs,
15,000 in all.

Everything is a separate process, as in production: the fake Kubernetes API server with
its job runner (``tests.fakekube``, real time), Redis (``REDIS_URL`` or an embedded one),
PostgreSQL (a scratch database next to ``DATABASE_URL``, or on 127.0.0.1:5432 when it
answers; else a SQLite file), Celery beat and worker(s) running ``queueing.tick`` in
kubernetes mode, and ``manage.py watch_cluster`` turning cluster events into ticks. The
bench itself only creates the Jobs suspended, on the generator's schedule, through the
API server, as a user with ``kubectl create`` would, and then waits for all of them to
finish.

Every figure comes from the fake server's own log: creation, unsuspension and finish of
each Job. ``wall_s`` runs from the first creation to the last finish; usage is integrated
from unsuspension to finish per ClusterQueue over that span against its nominal quota;
``tta_mean_s`` is the mean time from creation to the (last) unsuspension per class. The
worker's cycle runs (``CycleRun``) give where the time goes.

Knobs: KQ_BENCH_E2E_SCALE (fraction of each class's count per queue, default 1),
KQ_BENCH_E2E_WORKERS (Celery worker processes, default 1), KQ_BENCH_E2E_INTERVAL_S
(beat's timer, default 1), KQ_BENCH_E2E_DEADLINE_S (give up after, default 600),
KQ_BENCH_E2E_FORECASTER=0 (no forecaster process: the cycles forecast themselves),
KQ_BENCH_E2E_PYSPY (a file: py-spy samples the first worker, raw format, for the run),
KQ_BENCH_E2E_PYSPY_IDLE=1 (py-spy also samples idle threads, stacks per thread: where
the main thread waits off-CPU),
KQ_BENCH_E2E_KEEP=1 (the logs are kept, the fake server's as fake.jsonl),
KQ_TRACE=1 (every process logs the steps of queueing.trace; the result gets ``trace``,
the hand-off of each finish step by step, from tests/bench/trace_handoff.py).

``worker_cpu_s`` is the CPU time (user + system) the worker processes spent from the
first creation to the last finish: on a shared machine, a steadier figure than the wall.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.bench.bench_api import drop_database, scratch_database
from tests.fakekube.audit import Entry, admitted_timeline, by_namespace
from tests.fakekube.client import FakeKubeProcess, RemoteFakeKube, write_kubeconfig
from tests.fakekube.runner import RUNTIME_ANNOTATION
from tests.services import celery_beat_argv, celery_worker_argv, embedded_redis, port_open

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
COHORTS = 5
QUEUES_PER_COHORT = 6
NOMINAL = 20
BORROWING_LIMIT = 100
QUEUE_LABEL = "koord-queue/queue-name"  # queueing.compat.QUEUE_LABEL


@dataclass(frozen=True)
class JobClass:
    name: str
    count: int
    interval_s: float
    runtime_s: float
    priority: int
    cpu: int


CLASSES = (  # queueing.engine.scenarios.kueue_baseline_classes(), per ClusterQueue
    JobClass("small", 350, 0.1, 0.2, 50, 1),
    JobClass("medium", 100, 0.5, 0.5, 100, 5),
    JobClass("large", 50, 1.2, 1.0, 200, 20),
)


def cluster_queues() -> list[str]:
    return [f"cq-{c}-{q}" for c in range(COHORTS) for q in range(QUEUES_PER_COHORT)]


# --- seeding (a child process with the bench's settings) -----------------------------------


def seed_database() -> None:
    """Tenants, quotas and queues in Kueue's shape; runs with DJANGO_SETTINGS_MODULE set."""
    import django

    django.setup()
    from django.core.management import call_command

    from queueing import actions
    from queueing.actions import Actor

    SYSTEM = Actor.system()

    call_command("migrate", verbosity=0)
    for c in range(COHORTS):
        total = NOMINAL * QUEUES_PER_COHORT
        cohort = actions.create_quota(
            SYSTEM,
            name=f"cohort-{c}",
            tenant=None,
            parent=None,
            min={"cpu": str(total)},
            max={"cpu": str(total)},
        )
        for q in range(QUEUES_PER_COHORT):
            name = f"cq-{c}-{q}"
            tenant = actions.create_tenant(SYSTEM, name=name)
            quota = actions.create_quota(
                SYSTEM,
                name=name,
                tenant=tenant,
                parent=cohort,
                min={"cpu": str(NOMINAL)},
                max={"cpu": str(NOMINAL + BORROWING_LIMIT)},
                namespaces=[name],
            )
            assert quota.default_queue is not None  # named after the quota
            actions.update_queue(
                SYSTEM,
                quota.default_queue,
                policy="Priority",
                preempt_within_quota="LowerPriority",
                reclaim="Any",
            )


def cycle_report(since: float) -> dict[str, Any]:
    """What the workers' cycles cost, from CycleRun rows; a child process prints it."""
    import django

    django.setup()
    from datetime import UTC, datetime

    from queueing.models import CycleRun

    rows = CycleRun.objects.filter(started_at__gte=datetime.fromtimestamp(since, tz=UTC))
    runs = list(rows.values_list("duration_ms", "engine_ms", "admitted", "preempted"))
    starts: dict[str, list[float]] = defaultdict(list)
    for root, at in rows.values_list("root", "started_at"):
        starts[root].append(at.timestamp())
    gaps = [b - a for times in starts.values() for a, b in pairwise(sorted(times))]
    durations = [r[0] for r in runs if r[0] is not None]
    engine = [r[1] for r in runs if r[1] is not None]
    return {
        "cycles": len(runs),
        "cycle_ms_median": round(statistics.median(durations), 1) if durations else None,
        "cycle_ms_p95": round(_pct(durations, 95), 1) if durations else None,
        "cycle_s_total": round(sum(durations) / 1000, 1),
        "engine_s_total": round(sum(engine) / 1000, 1),
        "gap_s_median": round(statistics.median(gaps), 2) if gaps else None,
        "gap_s_p95": round(_pct(gaps, 95), 2) if gaps else None,
        "admitted": sum(r[2] or 0 for r in runs),
        "preempted": sum(r[3] or 0 for r in runs),
    }


# --- the stack -----------------------------------------------------------------------------


@contextmanager
def database(tmp: Path):
    base = os.environ.get("DATABASE_URL", "")
    if not base and port_open(5432):
        base = "postgres://postgres@127.0.0.1:5432/postgres"
    if base.startswith(("postgres://", "postgresql://")):
        url = scratch_database(base, f"kq_bench_e2e_{os.getpid()}")
        try:
            yield url
        finally:
            drop_database(url)
    else:
        yield f"sqlite:///{tmp / 'e2e.sqlite3'}"


@contextmanager
def redis() -> Iterator[str]:
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    with embedded_redis() as url:
        yield url


class Processes:
    """Children started with one environment; all stopped on exit."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [PYTHON, *argv], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        self.children.append(proc)
        return proc

    def run(self, *argv: str) -> str:
        done = subprocess.run(
            [PYTHON, *argv], cwd=ROOT, env=self.env, capture_output=True, text=True, check=False
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def stop(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.children:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- the cluster side ----------------------------------------------------------------------


class Api:
    """A keep-alive HTTP connection to the fake API server (one per thread)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port)

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"POST {path}: {response.status} {data[:200]!r}")
        return json.loads(data)


def seed_cluster(url: str) -> None:
    api = Api(url)
    for name in cluster_queues():
        api.post("/api/v1/namespaces", {"metadata": {"name": name}})
    # Kueue's test has quota and no nodes: one node holds the whole capacity, so placement
    # never binds (as in ``simulate``).
    capacity = COHORTS * QUEUES_PER_COHORT * NOMINAL
    api.post(
        "/api/v1/nodes",
        {
            "metadata": {"name": "node-0", "labels": {"kubernetes.io/hostname": "node-0"}},
            "status": {
                "allocatable": {"cpu": str(capacity), "memory": "4Ti", "pods": "100000"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
    )


def job_manifest(namespace: str, kind: JobClass, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{kind.name}-{index}",
            "namespace": namespace,
            "labels": {QUEUE_LABEL: namespace, "bench/class": kind.name},
            "annotations": {
                "koord-queue/priority": str(kind.priority),
                "koord-queue/expected-runtime-seconds": str(kind.runtime_s),
                RUNTIME_ANNOTATION: str(kind.runtime_s),
            },
        },
        "spec": {
            "suspend": True,
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "resources": {"requests": {"cpu": str(kind.cpu)}},
                        }
                    ],
                }
            },
        },
    }


def schedule(scale: float) -> list[tuple[float, str, dict[str, Any]]]:
    """(seconds after start, namespace, manifest), in time order: the generator's plan."""
    plan = []
    for namespace in cluster_queues():
        for kind in CLASSES:
            for i in range(max(1, round(kind.count * scale))):
                at = (i + 1) * kind.interval_s  # the generator waits before each creation
                plan.append((at, namespace, job_manifest(namespace, kind, i)))
    plan.sort(key=lambda item: item[0])
    return plan


def create_on_schedule(url: str, plan: list[tuple[float, str, dict]], threads: int = 6) -> float:
    """Create every Job at its time (late ones at once); returns the start (time.time())."""
    lock = threading.Lock()
    position = 0
    errors: list[str] = []
    start = time.time()

    def work() -> None:
        nonlocal position
        api = Api(url)
        while True:
            with lock:
                if position >= len(plan):
                    return
                at, namespace, body = plan[position]
                position += 1
            delay = start + at - time.time()
            if delay > 0:
                time.sleep(delay)
            try:
                api.post(f"/apis/batch/v1/namespaces/{namespace}/jobs", body)
            except Exception as exc:  # a lost creation would make the run wait forever
                errors.append(str(exc))
                api = Api(url)

    workers = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    if errors:
        raise RuntimeError(f"{len(errors)} creations failed, first: {errors[0]}")
    return start


# --- figures -------------------------------------------------------------------------------


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def figures(entries: list[Entry], total: int) -> dict[str, Any]:
    created: dict[str, float] = {}
    klass: dict[str, str] = {}
    admitted: dict[str, float] = {}
    admissions = 0
    finished: dict[str, float] = {}
    for e in entries:
        uid = e.get("uid")
        if e["type"] == "suspend":
            if e["previous"] is None:
                created[uid] = e["t"]
                klass[uid] = (e.get("job_labels") or {}).get("bench/class", "?")
            elif e["suspend"] is False and e["previous"] is True:
                admitted[uid] = e["t"]
                admissions += 1
        elif e["type"] == "job_finished":
            finished[uid] = e["t"]
    if not created:
        raise RuntimeError("no Job was created")
    start = min(created.values())
    end = max(finished.values()) if finished else time.time()
    span = max(end - start, 1e-9)
    # Usage of each ClusterQueue, integrated from unsuspension to finish.
    integral: dict[str, float] = defaultdict(float)
    level: dict[str, float] = defaultdict(float)
    last: dict[str, float] = {}
    for entry, group, usage in admitted_timeline(entries, by_namespace):
        t = entry["t"]
        if group in last:
            integral[group] += level[group] * (t - last[group])
        last[group] = t
        level[group] = usage.get("cpu", 0.0)
    queue_pct = {q: 100.0 * integral.get(q, 0.0) / (NOMINAL * span) for q in cluster_queues()}
    tta: dict[str, list[float]] = defaultdict(list)
    for uid, at in admitted.items():
        if uid in created:
            tta[klass[uid]].append(at - created[uid])
    return {
        "jobs": total,
        "finished": len(finished),
        "wall_s": round(end - start, 1),
        "creation_s": round(max(created.values()) - start, 1),
        "avg_usage_pct": round(sum(queue_pct.values()) / len(queue_pct), 1),
        "min_queue_usage_pct": round(min(queue_pct.values()), 1),
        "tta_mean_s": {k: round(statistics.fmean(v), 2) for k, v in sorted(tta.items())},
        "tta_p95_s": {k: round(_pct(v, 95), 2) for k, v in sorted(tta.items())},
        "admissions": admissions,
    }


def kueue_baseline_e2e() -> dict[str, Any]:
    scale = float(os.environ.get("KQ_BENCH_E2E_SCALE", "1"))
    workers = int(os.environ.get("KQ_BENCH_E2E_WORKERS", "1"))
    interval = os.environ.get("KQ_BENCH_E2E_INTERVAL_S", "1")
    deadline_s = float(os.environ.get("KQ_BENCH_E2E_DEADLINE_S", "600"))
    plan = schedule(scale)
    # SIGTERM (a timeout, a Ctrl-C'd make) unwinds like an exception: every child is
    # stopped and the scratch database dropped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = Path(tempfile.mkdtemp(prefix="kq-bench-e2e-"))
    logs = tmp / "logs"
    logs.mkdir()
    failed = True
    with ExitStack() as stack:
        db_url = stack.enter_context(database(tmp))
        redis_url = stack.enter_context(redis())
        fake = stack.enter_context(
            FakeKubeProcess("--time-scale", "1", "--history-limit", "1000000")
        )
        kubeconfig = write_kubeconfig(tmp / "kubeconfig", fake.url)
        cache = os.environ.get("KQ_KUBE_WATCH_CACHE", "1")
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": db_url,
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "KQ_VAR_DIR": str(tmp / "var"),
            "DEBUG": "0",  # as deployed: no query log, no debug pages
            "SECRET_KEY": secrets.token_urlsafe(40),
            "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "KQ_CLUSTER": "kubernetes",
            "KUBECONFIG": str(kubeconfig),
            "KQ_NAMESPACES": ",".join(cluster_queues()),
            "KQ_KINDS": "Job",
            "KQ_CYCLE_INTERVAL_S": interval,
            "KQ_DEMO_TRICKLE": "0",
            "KQ_FAIR_SHARE_MODE": "instant",
            "KQ_KUBE_WATCH_CACHE": cache,
            # As deploy/watch.yaml: the worker's own informers wake it (not a second copy).
            "KQ_WATCH_WAKES": os.environ.get("KQ_WATCH_WAKES", "0" if cache == "1" else "1"),
            "LOG_LEVEL": os.environ.get("KQ_BENCH_E2E_LOG_LEVEL", "WARNING"),
        }
        procs = Processes(env, logs)
        stack.callback(procs.stop)
        procs.run("-c", "from tests.bench.bench_e2e import seed_database; seed_database()")
        seed_cluster(fake.url)
        control = RemoteFakeKube(fake.url)
        procs.start("beat", *celery_beat_argv(tmp / "beat-schedule"))
        worker_procs = [
            procs.start(f"worker-{i}", *celery_worker_argv(f"e2e{i}", loglevel=env["LOG_LEVEL"]))
            for i in range(workers)
        ]
        watch_proc = procs.start("watch", "manage.py", "watch_cluster", "--debounce", "0.05")
        # As run_all and deploy/: the forecast of the waiting in a process of its own
        # (queueing.forecaster); KQ_BENCH_E2E_FORECASTER=0 leaves it in the cycles.
        forecaster_proc = None
        if os.environ.get("KQ_BENCH_E2E_FORECASTER", "1") != "0":
            argv = celery_worker_argv("forecaster", loglevel=env["LOG_LEVEL"], queues="forecast")
            forecaster_proc = procs.start("forecaster", *argv)
        _wait_for_readiness(control, deadline=60)
        since = time.time()
        spy = _start_pyspy(worker_procs[0].pid)
        cpu_before = sum(_cpu_s(p.pid) for p in worker_procs)
        others_before = {"watch": _cpu_s(watch_proc.pid), "fake": _cpu_s(_pid(fake))}
        if forecaster_proc is not None:
            others_before["forecaster"] = _cpu_s(forecaster_proc.pid)
        threads_before = _thread_cpu_s(worker_procs[0].pid)
        create_on_schedule(fake.url, plan)
        give_up = time.monotonic() + deadline_s
        while True:
            done = len(control.log_entries(types=["job_finished"]))
            if done >= len(plan) or time.monotonic() > give_up:
                break
            time.sleep(1.0)
        worker_cpu_s = sum(_cpu_s(p.pid) for p in worker_procs) - cpu_before
        watch_cpu_s = _cpu_s(watch_proc.pid) - others_before["watch"]
        fake_cpu_s = _cpu_s(_pid(fake)) - others_before["fake"]
        forecaster_cpu_s = (
            _cpu_s(forecaster_proc.pid) - others_before["forecaster"]
            if forecaster_proc is not None
            else None
        )
        threads_after = _thread_cpu_s(worker_procs[0].pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        entries = control.log_entries(types=["suspend", "job_finished", "deleted"])
        result = figures(entries, len(plan))
        state = control.state()
        result["api_requests"] = state.get("requests")
        result["api_requests_by"] = _requests_by(control)
        report = procs.run(
            "-c",
            "import json; from tests.bench.bench_e2e import cycle_report; "
            f"print(json.dumps(cycle_report({since})))",
        )
        result["cycles"] = json.loads(report.strip().splitlines()[-1])
        result["worker_cpu_s"] = round(worker_cpu_s, 1)
        result["watch_cpu_s"] = round(watch_cpu_s, 1)  # the watcher (and its teller)
        result["fake_cpu_s"] = round(fake_cpu_s, 1)  # the fake API server
        result["forecaster_cpu_s"] = (
            round(forecaster_cpu_s, 1) if forecaster_cpu_s is not None else None
        )
        if result["cycles"]["cycles"]:
            result["worker_cpu_ms_per_cycle"] = round(
                1000 * worker_cpu_s / result["cycles"]["cycles"], 1
            )
        if os.environ.get("KQ_TRACE") or os.environ.get("KQ_BENCH_E2E_KEEP"):
            # The fake server's log, kept beside the processes' (timelines after the run).
            with (logs / "fake.jsonl").open("w") as out:
                out.writelines(json.dumps(e) + "\n" for e in entries)
        if os.environ.get("KQ_TRACE"):
            # The hand-off of each finish, step by step (queueing.trace, trace_handoff).
            from tests.bench.trace_handoff import analyse, read_traces, thread_cpu

            traces = read_traces(logs)
            result["trace"] = analyse(traces, entries)
            result["trace"]["worker_thread_cpu_s"] = thread_cpu(
                traces, worker_procs[0].pid, threads_before, threads_after
            )
        result["load_avg"] = [round(x, 1) for x in os.getloadavg()]
        result["workers"] = workers
        result["cycle_interval_s"] = float(interval)
        result["database"] = urlsplit(db_url).scheme
        result["complete"] = result["finished"] >= len(plan)
        failed = False
    if failed or os.environ.get("KQ_BENCH_E2E_KEEP"):
        print(f"kueue_baseline_e2e: logs kept in {logs}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _requests_by(control: RemoteFakeKube) -> dict[str, int]:
    """The run's requests by verb and resource ("create events": the Events told), the
    largest first: which caller costs the API server what."""
    counts = Counter(
        f"{entry.get('verb')} {entry.get('resource')}"
        for entry in control.log_entries(types=["request"])
    )
    return dict(counts.most_common())


def _pid(fake: FakeKubeProcess) -> int:
    return fake.process.pid if fake.process is not None else 0


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc); 0 when unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu_s(pid: int) -> dict[int, float]:
    """Native thread id -> user + system CPU seconds (Linux /proc), for a live process."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _start_pyspy(pid: int) -> subprocess.Popen[bytes] | None:
    out = os.environ.get("KQ_BENCH_E2E_PYSPY")
    if not out:
        return None
    spy = shutil.which("py-spy") or str(Path(PYTHON).with_name("py-spy"))
    idle = ["--idle", "--threads"] if os.environ.get("KQ_BENCH_E2E_PYSPY_IDLE") else []
    return subprocess.Popen(
        [spy, "record", "-p", str(pid), "-f", "raw", "-o", out, "--nonblocking", "-r", "50", *idle],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for_readiness(control: RemoteFakeKube, deadline: float) -> None:
    """Until the watcher and a worker have listed the cluster (their first sync)."""
    until = time.monotonic() + deadline
    while time.monotonic() < until:
        requests = control.log_entries(types=["request"])
        lists = [str(r.get("resource")) for r in requests if r.get("verb") == "list"]
        watching = sum(1 for r in lists if r.startswith("jobs")) >= 2  # watcher and a worker
        listed_nodes = any(r.startswith("nodes") for r in lists)
        if watching and listed_nodes:
            time.sleep(1.0)
            return
        time.sleep(0.3)
    raise RuntimeError("the watcher and the workers did not start within a minute")


BENCHMARKS = {"kueue_baseline_e2e": kueue_baseline_e2e}
