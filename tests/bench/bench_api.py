"""REST API list latency with 50,000 workloads: `python -m tests.bench api_list_50k`.

A fresh database (a SQLite file, or a scratch PostgreSQL database next to DATABASE_URL
when that is set) gets the demo world and 50,000 workloads; uvicorn serves the ASGI app
on a free loopback port (DEBUG off, throttling on with room to spare, the cache in Redis
when REDIS_URL is set); an open-loop asyncio client sends list requests at a steady rate
(each is timed from when it was due, so a slow answer cannot hide the ones queued behind
it) and reports latency percentiles. Not a test: it asserts nothing about time.

Environment knobs: KQ_BENCH_RATE (requests/s, default 25), KQ_BENCH_SECONDS (default
20), KQ_BENCH_WORKERS (uvicorn workers, default 1), KQ_BENCH_WORKLOADS (default 50000).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the database ------------------------------------------------------------------------


def scratch_database(base_url: str, name: str) -> str:
    """A URL naming a fresh database ``name`` on the same PostgreSQL server."""
    import psycopg

    parts = urlsplit(base_url)
    admin = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return urlunsplit(parts._replace(path=f"/{name}"))


def drop_database(url: str) -> None:
    import psycopg

    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.lstrip("/")}" WITH (FORCE)')


def seed(count: int) -> dict[str, Any]:
    """Runs in a child process with the bench's settings: demo world + ``count`` workloads.

    Workloads are bulk-inserted (50,000 through submit_workload would take minutes); the
    demo world around them is made through actions as `make run` makes it.
    """
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.utils import timezone

    from portal import tokens
    from queueing import demo
    from queueing.actions import Actor, total_request
    from queueing.choices import Phase, Source
    from queueing.models import Queue, Quota, Workload
    from queueing.quantities import parse_resources

    demo.seed()
    rng = random.Random(7)
    leaves = list(Quota.objects.filter(children__isnull=True, tenant__isnull=False))
    queues = {q.pk: q for q in Queue.objects.all()}
    now = timezone.now()
    phases = [
        (Phase.PENDING, 40),
        (Phase.BACKOFF, 2),
        (Phase.ADMITTED, 3),
        (Phase.RUNNING, 10),
        (Phase.SUCCEEDED, 35),
        (Phase.FAILED, 5),
        (Phase.CANCELLED, 5),
    ]
    shapes = [(pods, parse_resources(requests)) for _, pods, requests, *_ in demo.SHAPES]
    positions: dict[int, int] = {}
    rows = []
    for i in range(count):
        quota = rng.choice(leaves)
        queue = queues[quota.default_queue_id]  # type: ignore[index]
        phase = rng.choices([p for p, _ in phases], weights=[w for _, w in phases])[0]
        pods, requests = rng.choice(shapes)
        pod_sets = [
            {
                "name": "workers",
                "count": pods,
                "requests": dict(requests),
                "node_selector": {},
                "tolerations": [],
            }
        ]
        at = now - timedelta(seconds=count - i)
        waiting = phase in (Phase.PENDING, Phase.BACKOFF)
        position = None
        if waiting:
            positions[queue.pk] = positions.get(queue.pk, 0) + 1
            position = positions[queue.pk]
        rows.append(
            Workload(
                tenant_id=quota.tenant_id,
                quota=quota,
                queue=queue,
                name=f"bench-{i:06d}",
                namespace=quota.namespaces[0],
                priority=rng.choice([3500, 5000, 5200, 7000, 9000]),
                pod_sets=pod_sets,
                total_request=total_request(pod_sets),
                expected_runtime_s=float(rng.randint(30, 3600)),
                queue_order_at=at,
                phase=phase,
                position=position,
                global_position=i if waiting else None,
                eta_p50=now + timedelta(seconds=rng.randint(10, 3600)) if waiting else None,
                eta_p90=now + timedelta(seconds=rng.randint(3600, 7200)) if waiting else None,
                reason=(
                    f"Quota {quota.name} is short of cpu {rng.randint(1, 64)}; "
                    f"{position} workloads ahead."
                    if waiting
                    else ""
                ),
                explanation=(
                    {
                        "blocked_by": quota.name,
                        "shortfall": {"cpu": rng.randint(1, 64) * 1000},
                        "ahead": [rng.randint(1, count) for _ in range(10)],
                        "unblock": "Free 8 cpu or raise the quota's max.",
                    }
                    if waiting
                    else None
                ),
                labels={"koord-queue/queue-name": queue.name},
                source=Source.API,
                admitted_at=at if phase not in (Phase.PENDING, Phase.BACKOFF) else None,
                finished_at=(
                    at + timedelta(seconds=60)
                    if phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)
                    else None
                ),
            )
        )
    Workload.objects.bulk_create(rows, batch_size=2000)
    if connection.vendor == "postgresql":
        # What autovacuum does within a minute of a bulk load: statistics and the
        # visibility map (index-only scans for COUNT). Without it the first minutes
        # measure a table no long-running database has.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    users = get_user_model().objects
    admin = tokens.create_token(Actor.system(), users.get(username="admin"), name="bench")
    member = tokens.create_token(Actor.system(), users.get(username="noor"), name="bench")
    queue_names = sorted(q.name for q in queues.values())
    return {"admin": admin.key, "member": member.key, "queues": queue_names}


# --- load ------------------------------------------------------------------------------


async def drive(
    base: str, paths: list[tuple[str, str]], rate: float, seconds: float, warmup: float
) -> tuple[list[float], dict[str, list[float]], int, float]:
    """Open loop: request i is due at start + i/rate, whatever happened before."""
    import aiohttp

    latencies: list[float] = []
    by_path: dict[str, list[float]] = {}
    errors = 0
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(index: int, due: float, measure: bool) -> None:
            nonlocal errors
            path, key = paths[index % len(paths)]
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                async with session.get(
                    base + path, headers={"Authorization": f"Token {key}"}
                ) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            if measure:
                latencies.append((time.perf_counter() - due) * 1000)
                by_path.setdefault(path, []).append(latencies[-1])
                errors += 0 if ok else 1

        start = time.perf_counter() + 0.05
        total_warm = int(warmup * rate)
        total = int(seconds * rate)
        tasks = [
            asyncio.create_task(one(i, start + i / rate, i >= total_warm))
            for i in range(total_warm + total)
        ]
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - (start + total_warm / rate)
    return latencies, by_path, errors, total / elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def api_list_50k() -> dict[str, Any]:
    count = int(os.environ.get("KQ_BENCH_WORKLOADS", "50000"))
    rate = float(os.environ.get("KQ_BENCH_RATE", "25"))
    seconds = float(os.environ.get("KQ_BENCH_SECONDS", "20"))
    workers = int(os.environ.get("KQ_BENCH_WORKERS", "1"))
    scratch = Path(tempfile.mkdtemp(prefix="kq-bench-api-"))
    base_db = os.environ.get("DATABASE_URL", "")
    db_url = (
        scratch_database(base_db, f"kq_bench_api_{os.getpid()}")
        if base_db.startswith("postgres")
        else f"sqlite:///{scratch / 'bench.sqlite3'}"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DATABASE_URL": db_url,
        "KQ_VAR_DIR": str(scratch),
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(40),
        "KQ_API_RATE": "1000000/min",
        "LOG_LEVEL": "WARNING",
        "KQ_TEST_DB_NAME": "",
    }
    server_env = {**env, "KQ_DB_POOL": "1"}  # as run_all starts the ASGI server
    server = None
    try:
        subprocess.run([PYTHON, "manage.py", "migrate", "-v", "0"], cwd=ROOT, env=env, check=True)
        seeded = subprocess.run(
            [PYTHON, "-m", "tests.bench.bench_api", "seed", str(count)],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        keys = json.loads(seeded.stdout.strip().splitlines()[-1])
        port = free_port()
        server = subprocess.Popen(
            [
                PYTHON, "-m", "uvicorn", "portal.asgi:application",
                "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
                "--no-access-log", "--log-level", "warning",
            ],
            cwd=ROOT,
            env=server_env,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        wait_for(base, keys["admin"])
        admin, member = keys["admin"], keys["member"]
        queue = "vision-train"
        paths = [
            ("/api/v1/workloads/", admin),
            ("/api/v1/workloads/?phase=Pending", member),
            ("/api/v1/workloads/?tenant=vision&ordering=-priority", admin),
            (f"/api/v1/workloads/?queue={queue}&offset=500", admin),
            ("/api/v1/workloads/?phase=Running&phase=Admitted", member),
        ]
        load_before = os.getloadavg()[0]
        latencies, by_path, errors, achieved = asyncio.run(
            drive(base, paths, rate, seconds, warmup=min(5.0, seconds / 4))
        )
        return {
            "p50_ms": round(percentile(latencies, 50), 1),
            "p95_ms": round(percentile(latencies, 95), 1),
            "p99_ms": round(percentile(latencies, 99), 1),
            "rate": round(achieved, 1),
            "target_rate": rate,
            "requests": len(latencies),
            "errors": errors,
            "mean_ms": round(statistics.fmean(latencies), 1),
            "workloads": count,
            "database": "postgresql" if db_url.startswith("postgres") else "sqlite",
            "cache": "redis" if os.environ.get("REDIS_URL") else "locmem",
            "uvicorn_workers": workers,
            "page": 50,
            "p95_ms_by_path": {
                path: round(percentile(values, 95), 1) for path, values in by_path.items()
            },
            # The machine is shared: the 1-minute load average before and after the run.
            "load_avg": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        }
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        if db_url.startswith("postgres"):
            drop_database(db_url)
        shutil.rmtree(scratch, ignore_errors=True)


def wait_for(base: str, key: str, timeout: float = 60.0) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    request = urllib.request.Request(  # noqa: S310 - a loopback URL we built
        f"{base}/api/v1/workloads/?limit=1", headers={"Authorization": f"Token {key}"}
    )
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"the API server did not answer within {timeout}s")
        time.sleep(0.2)


BENCHMARKS = {"api_list_50k": api_list_50k}


if __name__ == "__main__":
    if sys.argv[1:2] == ["seed"]:
        print(json.dumps(seed(int(sys.argv[2]))))
