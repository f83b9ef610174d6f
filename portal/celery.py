"""The Celery application: workers run the sync + admission cycle that beat schedules."""

from __future__ import annotations

import logging
import os
import select
import sys
from typing import Any

from celery import Celery
from celery.signals import task_prerun, worker_process_init, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

try:
    from django.conf import settings

    _ = settings.INSTALLED_APPS  # evaluates the settings now, to fail with one sentence
except Exception as exc:
    from django.core.exceptions import ImproperlyConfigured

    if isinstance(exc, ImproperlyConfigured):
        print(f"Koord-Queue cannot start: {exc}", file=sys.stderr)
        sys.exit(2)
    raise

log = logging.getLogger(__name__)


def survive_broker_restarts() -> None:
    """Keep a worker alive when its Redis broker restarts while it holds unacknowledged
    messages (the cycler always may: a woken cycle waits its debounce countdown, unacked).

    On a lost connection Celery 5.7 first collects the connection (which drops the
    transport's reference to it) and then closes it; closing the channel restores the
    unacknowledged messages, and kombu's Redis QoS then builds a client from the dropped
    reference: AttributeError, not a connection error, so the worker stops with
    "Unrecoverable error" instead of reconnecting (seen in
    tests/e2e/test_services_restart.py; under `make run` honcho then stops everything).
    Here that restore is skipped when the connection is already gone: the messages stay
    in Redis's unacked set for its visibility timeout (or went with a Redis that
    restarted), and beat's tick does what a lost wake would have done.
    """
    from kombu.transport import redis as kombu_redis

    original = kombu_redis.QoS.restore_unacked
    if getattr(original, "kq_guarded", False):
        return

    def restore_unacked(self: Any, client: Any = None) -> Any:
        transport = getattr(self.channel, "connection", None)
        if client is None and getattr(transport, "client", None) is None:
            log.warning(
                "broker connection lost: %d unacknowledged message(s) left to Redis",
                len(self._delivered),
            )
            self._delivered.clear()
            return None
        return original(self, client)

    restore_unacked.kq_guarded = True  # type: ignore[attr-defined]
    restore_unacked.__wrapped__ = original  # type: ignore[attr-defined]
    kombu_redis.QoS.restore_unacked = restore_unacked  # type: ignore[method-assign]


survive_broker_restarts()

app = Celery("koord_queue")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["queueing"])
# Woken cycles go to a queue of their own, consumed by the cycle worker (run_all's
# "cycler", a solo pool: one long-lived process keeps its state between tasks).
app.conf.task_routes = {
    "queueing.react": {"queue": settings.KQ_CYCLE_QUEUE},
    # The forecast of the waiting, off the admission path (queueing.forecaster).
    "queueing.forecast": {"queue": settings.KQ_FORECAST_QUEUE or settings.KQ_CYCLE_QUEUE},
}


@worker_ready.connect
def _tune_collector(sender: Any = None, **kwargs: Any) -> None:
    """The worker's process, once started (a solo pool runs its tasks here): queueing.gctune."""
    from queueing import gctune

    gctune.tune()


@worker_process_init.connect
def _tune_pool_process(sender: Any = None, **kwargs: Any) -> None:
    """Each process of a prefork pool, forked before the worker is ready."""
    from queueing import gctune

    gctune.tune()


def _consumed_queues(worker: Any) -> list[str] | None:
    """The names of the queues a starting worker consumes; None if it cannot tell."""
    consumer = getattr(worker, "task_consumer", None)
    queues = getattr(consumer, "queues", None)
    return None if queues is None else [queue.name for queue in queues]


@worker_ready.connect
def _wake_on_start(sender: Any = None, **kwargs: Any) -> None:
    """A cycle worker that starts wakes a sync and every tree (queueing.wake)."""
    from queueing import wake

    try:
        wake.on_worker_start(_consumed_queues(sender))
    except Exception:  # the broker or the cache is not there yet: beat's tick comes
        log.exception("could not wake the cycle at the worker's start")


@worker_ready.connect
def _forecaster_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    """A worker that consumes the forecast queue says it is there (queueing.forecaster)."""
    from queueing import forecaster

    names = _consumed_queues(sender)
    if names is None:
        return  # cannot tell which queues it serves: the cycles forecast themselves
    forecaster.start_heartbeat(names)


@worker_shutdown.connect
def _forecaster_gone(sender: Any = None, **kwargs: Any) -> None:
    from queueing import forecaster

    forecaster.stop_heartbeat()


@task_prerun.connect
def _usable_database(sender: Any = None, **kwargs: Any) -> None:
    """Before each task, the checks Django makes before each request, cheaply.

    Workers keep their database connection between tasks (CELERY_DB_REUSE_MAX), so
    nothing else would notice one that broke meanwhile: PostgreSQL restarted, or an
    administrator ended the backend. Django's own rules apply first (errors since the last
    commit, autocommit left off, CONN_MAX_AGE); then a connection whose socket has
    something to say while idle is dropped -- a server that ends a backend sends its
    reason and closes the socket -- and the task connects anew. A live one is marked
    checked, so Django does not send its health check's SELECT 1 before the task's first
    query (one round trip per task). Eager tasks run in their caller's connection."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        conn.close_if_unusable_or_obsolete()
        if conn.connection is None or conn.in_atomic_block:
            continue
        if _dropped(conn.connection):
            log.warning("database connection %s was closed by the server: reconnecting", conn.alias)
            conn.close()
        else:
            conn.health_check_done = True  # type: ignore[attr-defined]


def _dropped(raw: Any) -> bool:
    """A psycopg connection the server closed (or that has data waiting while idle, which
    only a closing server sends it); False for other drivers (SQLite: no server)."""
    pgconn = getattr(raw, "pgconn", None)
    if pgconn is None:
        return False
    if raw.closed or raw.broken:
        return True
    try:
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except Exception:  # no socket any more
        return True


app.conf.beat_schedule = {
    "tick": {
        "task": "queueing.tick",
        "schedule": settings.KQ_CYCLE_INTERVAL_S,
        # A tick nobody picked up in time is useless: the next one is on its way.
        "options": {"expires": max(settings.KQ_CYCLE_INTERVAL_S * 2, 2.0)},
    },
    "demo-trickle": {
        "task": "queueing.demo_trickle",
        "schedule": 5.0,
        "options": {"expires": 10.0},
    },
}
if not settings.KQ_DEMO_TRICKLE:
    del app.conf.beat_schedule["demo-trickle"]
