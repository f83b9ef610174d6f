"""Run one command and start it again whenever it exits: the embedded Redis under `make run`.

Honcho stops everything when one process ends; a Redis that crashed (or was killed by
the OOM killer) should instead come back on the same port while web and workers
reconnect. Restarts back off from 0.5 s to 10 s and reset after a minute of uptime. A
SIGTERM or SIGINT stops the child and this supervisor.
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


class Command(BaseCommand):
    help = "Run a command and restart it whenever it exits (with backoff)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--name", default="child")
        parser.add_argument("command", nargs=1, help="The command line, quoted as one argument.")

    def handle(self, *args: Any, **options: Any) -> None:
        argv = shlex.split(options["command"][0])
        name = options["name"]
        stopping = threading.Event()
        child: list[subprocess.Popen[bytes]] = []

        def stop(signum: int, frame: Any) -> None:
            stopping.set()
            if child and child[0].poll() is None:
                child[0].terminate()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        delay = 0.5
        while not stopping.is_set():
            started = time.monotonic()
            child[:] = [subprocess.Popen(argv)]  # noqa: S603  # the operator's own command line
            code = child[0].wait()
            if stopping.is_set():
                break
            if time.monotonic() - started > HEALTHY_AFTER_S:
                delay = 0.5
            sys.stderr.write(f"{name} exited with {code}; starting it again in {delay:g} s\n")
            sys.stderr.flush()
            stopping.wait(delay)
            delay = min(10.0, delay * 2)
