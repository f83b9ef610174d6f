"""pytest-xdist: a Redis database of its own for each worker (load it with
``-p tests.parallel``, as .ci/run does).

pytest-django gives each xdist worker a test database of its own (its name suffixed with
the worker id). Redis has no such thing, and tests flush their Redis database and start
Celery workers on it: two pytest workers on one database would wipe each other's state
and take each other's tasks. Imported before Django reads its settings, this plugin moves
REDIS_URL (and CELERY_BROKER_URL when it names the same database) of worker ``gw<k>`` to
the database index REDIS_URL's + k, k below the number of workers. The controller, and a
run without xdist, are left alone. tests/conftest.py refuses a parallel run with
REDIS_URL that does not load this plugin.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit


def worker_redis_url(url: str, worker: str, count: int) -> str:
    """REDIS_URL for xdist worker ``worker`` (gw<k>) of ``count``."""
    parts = urlsplit(url)
    path = parts.path.strip("/") or "0"
    if parts.scheme not in ("redis", "rediss") or not path.isdigit():
        raise ValueError(
            f"REDIS_URL must be redis://host:port/<index> to run tests in parallel: {url}"
        )
    k = int(worker.removeprefix("gw")) % max(count, 1)  # a restarted worker reuses a slot
    return urlunsplit(parts._replace(path=f"/{int(path) + k}"))


def _move_redis_url() -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    url = os.environ.get("REDIS_URL", "")
    if not worker or not url:
        return
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    moved = worker_redis_url(url, worker, count)
    if os.environ.get("CELERY_BROKER_URL") == url:
        os.environ["CELERY_BROKER_URL"] = moved
    os.environ["REDIS_URL"] = moved


_move_redis_url()
