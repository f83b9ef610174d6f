"""Run one command and start it again whenever it exits: the embedded Redis under `make run`.

Honcho stops everything when one process ends; a Redis that crashed (or was killed by
the OOM killer) should instead come back on the same port while web and workers
reconnect. Restarts back off from 0.5 s to 10 s and reset after a minute of uptime. A
SIGTERM or SIGINT stops the child and this supervisor.

The child runs in a session of its own (and dies with this supervisor), so the signal
honcho sends to this process group at Ctrl-C reaches the supervisor only. With
``--redis-port`` the supervisor then lets the Redis go last: it waits (at most
``LINGER_S``, within honcho's 5 s before SIGKILL) until the web process and the workers
have closed their connections, so none of them logs a traceback for a broker that
vanished while it finished its last task.
"""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand

HEALTHY_AFTER_S = 60.0
LINGER_S = 4.0


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the supervisor dies (Linux; elsewhere the
    child simply outlives a supervisor that was killed)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def redis_clients(port: int) -> int | None:
    """Clients connected to the Redis on ``port``, this question's own excluded."""
    import redis

    try:
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5)
        try:
            return int(client.info("clients")["connected_clients"]) - 1
        finally:
            client.close()
    except redis.RedisError:
        return None


def linger(port: int, limit_s: float = LINGER_S) -> None:
    """Wait until the Redis on ``port`` has no clients left, or ``limit_s`` passed."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        clients = redis_clients(port)
        if clients is None or clients <= 0:
            return
        time.sleep(0.1)


class Command(BaseCommand):
    help = "Run a command and restart it whenever it exits (with backoff)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--name", default="child")
        parser.add_argument(
            "--redis-port",
            type=int,
            default=None,
            help="The child is a Redis on this port: on stop, wait for its clients to leave.",
        )
        parser.add_argument(
            "--linger-s",
            type=float,
            default=LINGER_S,
            help="How long a stopping Redis waits for its clients at most.",
        )
        parser.add_argument("command", nargs=1, help="The command line, quoted as one argument.")

    def handle(self, *args: Any, **options: Any) -> None:
        argv = shlex.split(options["command"][0])
        name = options["name"]
        stopping = threading.Event()
        child: list[subprocess.Popen[bytes]] = []
        redis_port = options["redis_port"]

        def stop(signum: int, frame: Any) -> None:
            stopping.set()
            if child and child[0].poll() is None:
                if redis_port is not None:
                    linger(redis_port, options["linger_s"])
                child[0].terminate()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        delay = 0.5
        while not stopping.is_set():
            started = time.monotonic()
            child[:] = [
                subprocess.Popen(  # noqa: S603  # the operator's own command line
                    argv, start_new_session=True, preexec_fn=_die_with_parent
                )
            ]
            code = child[0].wait()
            if stopping.is_set():
                break
            if time.monotonic() - started > HEALTHY_AFTER_S:
                delay = 0.5
            sys.stderr.write(f"{name} exited with {code}; starting it again in {delay:g} s\n")
            sys.stderr.flush()
            stopping.wait(delay)
            delay = min(10.0, delay * 2)
