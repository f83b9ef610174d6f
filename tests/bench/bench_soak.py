"""Soak: `make bench BENCH=soak` runs the product as `make run` does for ten minutes.

`manage.py run_all` starts in a temporary var/ (embedded SQLite and Redis, the simulated
cluster seeded with the demo, Celery worker and beat, uvicorn) with cycles every second
and the demo's trickle on. Meanwhile this process sends steady API traffic with the
tokens of several tenants' users (submissions, cancellations, lists, reads of single
workloads, the cluster view) and keeps 200 live-stream clients connected and subscribed
(session cookies of those users), reconnecting any that drop.

The API traffic is an open loop at a fixed rate (2 writes + 8 reads a second by default),
in a thread with its own event loop: a request starts on time whatever the previous ones
take, so the rate is what was asked and a slow answer shows in the latency, not as fewer
requests (a closed loop, one request after the other, sent 4.6 a second on a loaded
machine). ``requests_per_s`` is the rate reached; ``shed`` counts requests not sent
because MAX_IN_FLIGHT were already waiting (0 unless the product stalls).

It prints one JSON line: ``requests``, ``errors`` (transport failures and unexpected
statuses), ``fivexx``, ``p95_ms`` of the API, the live clients' ``ws_frames``,
``ws_drops`` and ``ws_errors``, per process ``rss_mb`` after warm-up and at the end and
``rss_growth_pct`` between the two, ``cycles`` run, ``db_rows_lost`` (workloads this
process created, 201, minus those found in the database at the end) and the count of
tracebacks in the product's log while it ran (and, apart, during its shutdown). Target
(DESIGN.md): 0 errors, 0 5xx, every process's memory within 10 % of where it was after
warm-up, nothing lost. Not a test.

Knobs: KQ_SOAK_SECONDS (600), KQ_SOAK_WARMUP_S (60, at most a fifth of the run),
KQ_SOAK_WS_CLIENTS (200), KQ_SOAK_WRITES_PER_S (2), KQ_SOAK_READS_PER_S (8).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
# Requests of the open loop (Load.paced) waiting for an answer at once, per kind.
MAX_IN_FLIGHT = 32


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Product:
    """`manage.py run_all` in a temporary var/, and what the soak needs of it."""

    def __init__(self) -> None:
        self.var = Path(tempfile.mkdtemp(prefix="kq-soak-"))
        self.port = _free_port()
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "REDIS_URL", "DEBUG", "KQ_TEST_DB_NAME")
        }
        self.env.update(
            KQ_VAR_DIR=str(self.var),
            KQ_CYCLE_INTERVAL_S="1",
            KQ_DEMO_TRICKLE="1",
            DJANGO_SETTINGS_MODULE="portal.settings",
            PYTHONUNBUFFERED="1",
        )
        self.log_path = self.var / "product.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [PYTHON, "manage.py", "run_all", "--port", str(self.port)],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 240
        import urllib.request

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"run_all exited; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.base}/login/", timeout=2) as answer:  # noqa: S310
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise SystemExit("the product did not answer within 240 s")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def manage(self, *args: str) -> str:
        out = subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=ROOT,
            env={**self.env, "REDIS_URL": self.redis_url()},
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def redis_url(self) -> str:
        procfile = (self.var / "Procfile").read_text()
        match = re.search(r"--port (\d+)", procfile)
        return f"redis://127.0.0.1:{match.group(1)}/0" if match else ""

    def processes(self) -> dict[str, list[int]]:
        """Process name (as in the Procfile) -> pids (a Celery worker has pool children)."""
        import psutil

        assert self.proc is not None
        found: dict[str, list[int]] = {}
        for child in psutil.Process(self.proc.pid).children(recursive=True):
            try:
                line = " ".join(child.cmdline())
            except psutil.Error:
                continue
            if "redis-server" in line:
                name = "redis"
            elif "uvicorn" in line:
                name = "web"
            elif "celery" in line and " worker" in line:
                name = "cycler" if "cycler@" in line else "worker"
            elif "celery" in line and " beat" in line:
                name = "beat"
            else:
                continue
            found.setdefault(name, []).append(child.pid)
        return found

    def rss_mb(self) -> dict[str, float]:
        import psutil

        out: dict[str, float] = {}
        for name, pids in self.processes().items():
            total = 0
            for pid in pids:
                try:
                    total += psutil.Process(pid).memory_info().rss
                except psutil.Error:
                    continue
            out[name] = round(total / 2**20, 1)
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def database(self) -> Path:
        return self.var / "koord-queue.sqlite3"


class Load:
    """Steady API traffic and live clients; counts everything it sees."""

    def __init__(self, product: Product, tokens: dict[str, str], cookies: list[str]) -> None:
        self.product = product
        self.tokens = tokens
        self.cookies = cookies
        self.latencies: list[float] = []
        self.requests = 0
        self.errors = 0
        self.fivexx = 0
        self.unexpected: dict[str, int] = {}
        self.created: list[int] = []
        self.ws_frames = 0
        self.ws_drops = 0
        self.ws_errors = 0
        self.ws_connected = 0
        self.shed = 0  # requests the open loop did not send: MAX_IN_FLIGHT were waiting
        # Set from the main thread, read by both event loops.
        self.stopping = threading.Event()
        self.rng = random.Random(7)

    async def call(
        self, session: Any, who: str, method: str, path: str, expect: tuple[int, ...], **kw: Any
    ) -> Any:
        import aiohttp

        headers = {"Authorization": f"Token {self.tokens[who]}"}
        started = time.perf_counter()
        self.requests += 1
        try:
            async with session.request(
                method, f"{self.product.base}{path}", headers=headers, **kw
            ) as answer:
                body = await answer.read()
                self.latencies.append((time.perf_counter() - started) * 1000)
                if answer.status >= 500:
                    self.fivexx += 1
                if answer.status not in expect:
                    self.errors += 1
                    key = f"{method} {path.split('?')[0]} {answer.status}"
                    self.unexpected[key] = self.unexpected.get(key, 0) + 1
                    return None
                return json.loads(body) if body else None
        except (aiohttp.ClientError, TimeoutError):
            self.errors += 1
            self.unexpected["transport"] = self.unexpected.get("transport", 0) + 1
            return None

    async def paced(self, per_s: float, step: Any) -> None:
        """Open loop: ``step(n)`` starts every 1/per_s seconds whatever the answers take
        (a slow answer does not delay the next request, as it would with one loop that
        waits for each), at most MAX_IN_FLIGHT at once; the rest are counted as shed."""
        in_flight: set[asyncio.Task[Any]] = set()
        n = 0
        due = time.monotonic()
        while not self.stopping.is_set():
            n += 1
            if len(in_flight) < MAX_IN_FLIGHT:
                task = asyncio.create_task(step(n))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
            else:
                self.shed += 1
            due += 1 / per_s
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        await asyncio.gather(*in_flight, return_exceptions=True)

    async def write(self, session: Any, n: int) -> None:
        # (token, queue) pairs the user may submit to: two tenants' members and the admin.
        targets = [("ada", "vision-dev"), ("noor", "nlp-research"), ("admin", "analytics-adhoc")]
        who, queue = targets[n % len(targets)]
        if n % 5 == 0 and self.created:
            victim = self.rng.choice(self.created[-50:])
            await self.call(
                session, "admin", "POST", f"/api/v1/workloads/{victim}/cancel/", (200, 409)
            )
            return
        body = {
            "name": f"soak-{n}",
            "queue": queue,
            "priority": 5000 + n % 500,
            "expected_runtime_s": 20 + n % 40,
            "pod_sets": [{"count": 1, "requests": {"cpu": "1", "memory": "2Gi"}}],
        }
        made = await self.call(session, who, "POST", "/api/v1/workloads/", (201,), json=body)
        if made:
            self.created.append(int(made["id"]))

    async def read(self, session: Any, n: int) -> None:
        readers = ["ada", "noor", "sam", "admin"]
        who = readers[n % len(readers)]
        kind = n % 4
        if kind == 0:
            await self.call(session, who, "GET", "/api/v1/workloads/?limit=50", (200,))
        elif kind == 1 and self.created and who == "admin":
            wid = self.rng.choice(self.created)
            await self.call(session, who, "GET", f"/api/v1/workloads/{wid}/", (200,))
        elif kind == 2:
            await self.call(session, who, "GET", "/api/v1/queues/", (200,))
        else:
            await self.call(session, who, "GET", "/api/v1/cluster/", (200,))

    async def api(self, writes_per_s: float, reads_per_s: float) -> None:
        """The API traffic, in its own thread and event loop (see _drive)."""
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=30)
        connector = aiohttp.TCPConnector(limit=2 * MAX_IN_FLIGHT)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await asyncio.gather(
                self.paced(writes_per_s, lambda n: self.write(session, n)),
                self.paced(reads_per_s, lambda n: self.read(session, n)),
            )

    async def live_client(self, index: int, tenant_id: int, cookie: str) -> None:
        import websockets

        url = f"ws://127.0.0.1:{self.product.port}/ws/tenants/{tenant_id}/"
        headers = {"Cookie": cookie, "Origin": self.product.base}
        while not self.stopping.is_set():
            try:
                async with websockets.connect(url, additional_headers=headers) as ws:
                    self.ws_connected += 1
                    await ws.send(json.dumps({"type": "subscribe", "queues": "*"}))
                    while not self.stopping.is_set():
                        try:
                            raw = await asyncio.wait_for(ws.recv(), timeout=1.0)
                        except TimeoutError:
                            continue
                        self.ws_frames += 1
                        # Parsed only when it may be an error frame: 200 clients' frames
                        # decoded here would load this process more than the product.
                        if "error" in raw and json.loads(raw).get("type") == "error":
                            self.ws_errors += 1
                    return
            except (OSError, websockets.WebSocketException):
                if self.stopping.is_set():
                    return
                self.ws_drops += 1
                await asyncio.sleep(1.0)


def _tenant_ids(product: Product) -> dict[str, int]:
    with sqlite3.connect(product.database(), timeout=30) as db:
        return {name: pk for pk, name in db.execute("SELECT id, name FROM queueing_tenant")}


def _login_cookie(product: Product, username: str, password: str) -> str:
    import http.cookiejar
    import urllib.parse
    import urllib.request

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    opener.open(f"{product.base}/login/", timeout=10).read()
    csrf = next(c.value for c in jar if c.name == "csrftoken")
    data = urllib.parse.urlencode(
        {"username": username, "password": password, "csrfmiddlewaretoken": csrf}
    ).encode()
    request = urllib.request.Request(  # noqa: S310  # loopback http, built here
        f"{product.base}/login/", data=data, headers={"Referer": f"{product.base}/login/"}
    )
    opener.open(request, timeout=10).read()
    session = next(c.value for c in jar if c.name == "sessionid")
    return f"sessionid={session}"


async def _drive(product: Product, load: Load, seconds: float, warmup: float) -> dict[str, Any]:
    clients = int(os.environ.get("KQ_SOAK_WS_CLIENTS", "200"))
    writes = float(os.environ.get("KQ_SOAK_WRITES_PER_S", "2"))
    reads = float(os.environ.get("KQ_SOAK_READS_PER_S", "8"))
    tenants = _tenant_ids(product)
    homes = [tenants["vision"], tenants["nlp"], tenants["analytics"]]
    # The API traffic runs in a thread with an event loop of its own, so that the live
    # clients' frames (hundreds a second) do not delay requests or their timing.
    api = threading.Thread(target=lambda: asyncio.run(load.api(writes, reads)), name="api")
    api.start()
    tasks = []
    for i in range(clients):
        # ada, noor and sam each watch their own tenant.
        tasks.append(asyncio.create_task(load.live_client(i, homes[i % 3], load.cookies[i % 3])))
        if i % 20 == 19:
            await asyncio.sleep(0.2)  # connect in waves, as browsers would arrive
    await asyncio.sleep(warmup)
    rss_warm = product.rss_mb()
    before = (load.requests, load.errors)
    await asyncio.sleep(seconds - warmup)
    rss_end = product.rss_mb()
    load.stopping.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.to_thread(api.join)
    return {"rss_warm": rss_warm, "rss_end": rss_end, "warm": before}


def soak() -> dict[str, Any]:
    seconds = float(os.environ.get("KQ_SOAK_SECONDS", "600"))
    warmup = min(float(os.environ.get("KQ_SOAK_WARMUP_S", "60")), seconds / 5)
    product = Product()
    started = time.monotonic()
    try:
        product.start()
        logins = {
            item["username"]: item["password"]
            for item in json.loads((product.var / "demo-logins.json").read_text())
        }
        tokens = {user: product.manage("create_token", user) for user in logins}
        cookies = [_login_cookie(product, user, logins[user]) for user in ("ada", "noor", "sam")]
        load = Load(product, tokens, cookies)
        measured = asyncio.run(_drive(product, load, seconds, warmup))
        with sqlite3.connect(product.database(), timeout=30) as db:
            found = 0
            ids = load.created
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                found += db.execute(
                    f"SELECT COUNT(*) FROM queueing_workload WHERE id IN ({marks})",  # noqa: S608
                    chunk,
                ).fetchone()[0]
            cycles = db.execute(
                "SELECT COUNT(*) FROM queueing_cyclerun WHERE started_at >= datetime('now', ?)",
                (f"-{int(seconds)} seconds",),
            ).fetchone()[0]
    finally:
        product.stop()
    log = product.log_path.read_text(errors="replace")
    rss_warm, rss_end = measured["rss_warm"], measured["rss_end"]
    result = {
        "seconds": seconds,
        "warmup_s": warmup,
        "requests": load.requests,
        "requests_per_s": round(load.requests / seconds, 2),
        "shed": load.shed,
        "errors": load.errors,
        "fivexx": load.fivexx,
        "unexpected": load.unexpected,
        "p95_ms": round(_percentile(load.latencies, 0.95), 1),
        "p50_ms": round(_percentile(load.latencies, 0.50), 1),
        "ws_clients": int(os.environ.get("KQ_SOAK_WS_CLIENTS", "200")),
        "ws_connects": load.ws_connected,
        "ws_frames": load.ws_frames,
        "ws_drops": load.ws_drops,
        "ws_errors": load.ws_errors,
        "rss_mb_after_warmup": rss_warm,
        "rss_mb_end": rss_end,
        "rss_growth_pct": {
            name: round((rss_end[name] - rss_warm[name]) / rss_warm[name] * 100, 1)
            for name in rss_warm
            if name in rss_end and rss_warm[name]
        },
        "cycles": cycles,
        "workloads_created": len(load.created),
        "db_rows_lost": len(load.created) - found,
        # While the product ran, and during its shutdown (the embedded Redis waits for its
        # clients to leave: portal/management/commands/keep_running.py).
        "tracebacks_in_log": log.split("SIGINT received")[0].count(
            "Traceback (most recent call last)"
        ),
        "tracebacks_at_shutdown": log.partition("SIGINT received")[2].count(
            "Traceback (most recent call last)"
        ),
        "wall_s": round(time.monotonic() - started, 1),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    if not os.environ.get("KQ_SOAK_KEEP"):
        shutil.rmtree(product.var, ignore_errors=True)
    else:
        result["var"] = str(product.var)
    return result


BENCHMARKS = {"soak": soak}
