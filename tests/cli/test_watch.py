"""``kq watch``: a queue's line kept current from the WebSocket stream, authenticated by
the API token (portal.ws_auth)."""

from __future__ import annotations

import json
import os
import pty
import selectors
import subprocess
import time
from typing import IO, Any

import pytest
import websocket

from queueing import actions
from tests import live
from tests.builders import SYSTEM, submit
from tests.services import ROOT

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.live, pytest.mark.slow]


def read_line(stream: IO[str], timeout: float = 20.0) -> str:
    """The next line the watcher prints, or fail after ``timeout``."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    try:
        if not selector.select(timeout):
            raise AssertionError(f"no update within {timeout}s")
        return stream.readline()
    finally:
        selector.close()


def test_watch_prints_the_line_then_follows_the_stream(kq, site):
    a, b, c = (submit(site.world, name) for name in ("job-a", "job-b", "job-c"))
    live.rank([a.pk, b.pk, c.pk])
    proc = subprocess.Popen(
        kq.argv("watch", site.queue.name, "-o", "json", "--count", "3", "--timeout", "60"),
        cwd=ROOT, env=kq.env("vic-ro"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, bufsize=1,
    )  # fmt: skip
    try:
        first = json.loads(read_line(proc.stdout))
        assert [(r["position"], r["name"]) for r in first["rows"]] == [
            (1, "job-a"), (2, "job-b"), (3, "job-c"),
        ]  # fmt: skip
        assert (first["queue"], first["tenant"], first["pending"]) == (
            site.queue.name, "team-a", 3,
        )  # fmt: skip

        live.rank([c.pk, a.pk, b.pk])  # a cycle reorders the line
        second = json.loads(read_line(proc.stdout))
        assert [(r["position"], r["name"]) for r in second["rows"]] == [
            (1, "job-c"), (2, "job-a"), (3, "job-b"),
        ]  # fmt: skip
        assert second["rows"][0]["eta_p50"] is not None

        actions.cancel_workload(SYSTEM, a)  # one leaves the line
        third = json.loads(read_line(proc.stdout))
        assert [r["name"] for r in third["rows"]] == ["job-c", "job-b"]
        assert third["pending"] == 2
        assert proc.wait(timeout=20) == 0  # --count 3 reached
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_on_a_terminal_the_line_is_redrawn_in_place(kq, site):
    submit(site.world, "job-t")
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        kq.argv("watch", site.queue.name, "--count", "1", "--timeout", "30"),
        cwd=ROOT, env=kq.env("ada"), stdout=secondary, stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(secondary)
    try:
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""
        screen = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed: everything is read
                break
            if not chunk:
                break
            screen += chunk
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    text = screen.decode()
    assert text.startswith("\x1b[H\x1b[2J")  # home and clear, then the whole line again
    assert f"Queue {site.queue.name} (tenant team-a): 1 waiting" in text
    assert "job-t" in text


def test_watch_with_a_timeout_but_too_few_updates_exits_10(kq, site):
    started = time.monotonic()
    run = kq("watch", site.queue.name, "--count", "2", "--timeout", "2")
    assert run.code == 10, run.err
    assert "Only 1 of 2 updates within 2.0s" in run.err
    assert time.monotonic() - started < 30
    assert "Nobody is waiting." in run.out  # the first update did come


def stream(url: str, tenant_id: int, token: str | None) -> Any:
    header = [f"Authorization: Token {token}"] if token else []
    return websocket.create_connection(
        url.replace("http", "ws", 1) + f"/ws/tenants/{tenant_id}/",
        header=header, origin=url, timeout=10,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("who", "allowed"), [("vic-ro", True), ("bob", False), ("bad", False), (None, False)]
)
def test_the_stream_takes_a_token_and_keeps_tenants_apart(kq, site, who, allowed):
    token = {"bad": "kq_unknown"}.get(who or "", kq.keys.get(who or ""))
    if allowed:
        ws = stream(kq.url, site.tenant.pk, token)
        try:
            assert json.loads(ws.recv())["type"] == "hello"
        finally:
            ws.close()
    else:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            stream(kq.url, site.tenant.pk, token)
        assert refused.value.status_code == 403
