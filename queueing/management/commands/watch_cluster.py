"""`python manage.py watch_cluster`: trigger cycles on cluster events (kubernetes mode)."""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from queueing import gctune, watch
from queueing.cluster import get_cluster
from queueing.cluster.kubernetes import KubernetesCluster
from queueing.teller import INTERVAL_S, Teller


class Command(BaseCommand):
    help = "Watch jobs, nodes and pods; ask a worker for a cycle as soon as something changes."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--debounce", type=float, default=0.01, help="Seconds per trigger (wakes debounce too)."
        )
        parser.add_argument(
            "--no-tell",
            action="store_true",
            help="Leave the telling (Events, quota and namespace annotations) to the workers.",
        )
        parser.add_argument(
            "--max-seconds", type=float, default=0.0, help="Stop after this long (0: never)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if settings.KQ_CLUSTER != "kubernetes":
            raise CommandError("watch_cluster needs KQ_CLUSTER=kubernetes.")
        cluster = get_cluster()
        if not isinstance(cluster, KubernetesCluster):
            raise CommandError("watch_cluster needs the Kubernetes adapter.")
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():  # the process's own
            gctune.tune()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: stop.set())
        if options["max_seconds"]:
            timer = threading.Timer(options["max_seconds"], stop.set)
            timer.daemon = True
            timer.start()
        self.stdout.write("Watching the cluster; a change starts a cycle.")
        wakes = settings.KQ_WATCH_WAKES
        if not wakes:
            self.stdout.write(
                "KQ_WATCH_WAKES is off: the cycle workers' own watch caches wake them."
            )
        teller = None
        if not options["no_tell"]:  # the telling, out of the workers (queueing.teller)
            # Without informers here nothing pokes it: it looks every interval instead.
            teller = Teller(cluster) if wakes else Teller(cluster, idle_s=INTERVAL_S)
            teller.start(stop)
        try:
            sent = watch.run_watch(
                cluster,
                stop,
                trigger=watch.enqueue_tick,
                debounce_s=options["debounce"],
                also=teller.poke if teller is not None else None,
                wakes=wakes,
            )
        finally:
            stop.set()
            if teller is not None:
                teller.join()
        self.stdout.write(f"Stopped after requesting {sent} cycle(s).")
