"""``kq watch QUEUE``: a queue's waiting line, kept current from the WebSocket stream.

It follows docs/events.md as the pages do: subscribe to a window of the queue, then
read the window whole over REST, then apply the stream's ``workloads`` frames (rows,
stubs, removals, the window's ids and counts); a ``resync`` frame, a gap it cannot
fill, or a reconnection reads the window over REST again. Frames are never replayed,
so the REST read after each (re)subscription is what makes the picture whole.
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import websocket
import yaml

from kq import output
from kq.errors import Exit, KqError
from kq.output import relative, table

if TYPE_CHECKING:
    from kq.cli import Context

FORBIDDEN = 4403
PING_EVERY_S = 25.0
BACKOFF_S = (0.5, 15.0)
CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen: the redraw in place


class Closed(Exception):
    def __init__(self, code: int | None) -> None:
        super().__init__(code)
        self.code = code


class Line:
    """What the watcher shows of one queue: the waiting rows at positions 1..rows."""

    def __init__(self, queue: dict[str, Any], rows: int) -> None:
        self.queue = queue
        self.size = rows
        self.rows: dict[int, dict[str, Any]] = {}
        self.order: list[int] = []
        self.pending = 0
        self.holding = 0
        self.at: str | None = None

    def load(self, client: Any) -> None:
        """Read the window over REST (the same rows a fresh page load shows)."""
        page = client.get("queues", self.queue["id"], "pending", params={"limit": self.size})
        counts = client.get("queues", self.queue["id"])
        self.rows = {row["id"]: row for row in page["results"]}
        self.order = [row["id"] for row in page["results"]]
        self.pending = int(page["count"])
        self.holding = int(counts.get("admitted", 0)) + int(counts.get("running", 0))
        self.at = datetime.now(UTC).isoformat()

    def apply(self, frame: dict[str, Any]) -> bool:
        """Apply a ``workloads`` frame; False when it leaves a gap (then: load again)."""
        self.at = frame.get("at") or self.at
        for change in frame.get("changes", []):
            if change.get("queue_id") not in (None, self.queue["id"]):
                continue
            if "name" in change:
                self.rows[change["id"]] = change
            elif change["id"] in self.rows:  # a stub: it left the window, still waiting
                self.rows[change["id"]] |= {
                    "phase": change["phase"],
                    "position": change["position"],
                }
        for gone in frame.get("removed", []):
            self.rows.pop(gone, None)
        for window in frame.get("windows", []):
            if window.get("queue") != self.queue["id"]:
                continue
            self.order = list(window["ids"])
            self.pending = int(window["pending"])
            self.holding = int(window["holding"])
        shown = [i for i in self.order if i in self.rows]
        if len(shown) != len(self.order):
            return False
        # Drop rows no longer shown, so memory stays bounded by the window.
        self.rows = {i: self.rows[i] for i in self.order}
        return True

    def state(self) -> dict[str, Any]:
        keys = ("id", "name", "namespace", "priority", "phase", "position", "global_position",
                "eta_p50", "eta_p90", "reason")  # fmt: skip
        return {
            "queue": self.queue["name"],
            "tenant": self.queue["tenant"],
            "at": self.at,
            "pending": self.pending,
            "holding": self.holding,
            "rows": [{k: self.rows[i].get(k) for k in keys} for i in self.order],
        }

    def draw(self) -> str:
        state = self.state()
        header = (
            f"Queue {state['queue']} (tenant {state['tenant']}): {state['pending']} waiting, "
            f"{state['holding']} admitted or running. Updated {output.clock(state['at'])}.\n"
        )
        if not state["rows"]:
            return header + "Nobody is waiting.\n"
        from io import StringIO

        buffer = StringIO()
        table(state["rows"], [
            ("POS", lambda r: r["position"]),
            ("NAME", lambda r: r["name"]),
            ("PRIORITY", lambda r: r["priority"]),
            ("PHASE", lambda r: r["phase"]),
            ("ETA P50", lambda r: relative(r["eta_p50"]) if r["eta_p50"] else None),
            ("P90", lambda r: relative(r["eta_p90"]) if r["eta_p90"] else None),
            ("REASON", lambda r: r["reason"]),
        ], buffer)  # fmt: skip
        more = state["pending"] - len(state["rows"])
        tail = f"… and {more} more waiting.\n" if more > 0 else ""
        return header + buffer.getvalue() + tail


def stream_url(base: str, tenant_id: int) -> str:
    parts = urlsplit(base)
    scheme = "wss" if parts.scheme == "https" else "ws"
    path = parts.path.rstrip("/") + f"/ws/tenants/{tenant_id}/"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


class Stream:
    """One WebSocket connection, subscribed to the line's window."""

    def __init__(self, url: str, token: str, origin: str, timeout: float) -> None:
        try:
            self.ws = websocket.create_connection(
                url, header=[f"Authorization: Token {token}"], origin=origin, timeout=timeout
            )
        except websocket.WebSocketBadStatusException as exc:
            if exc.status_code in (401, 403):
                raise Closed(FORBIDDEN) from exc
            raise KqError(f"The stream at {url} answered {exc.status_code}.", Exit.ERROR) from exc
        self.last_sent = time.monotonic()

    def send(self, message: dict[str, Any]) -> None:
        self.ws.send(json.dumps(message))
        self.last_sent = time.monotonic()

    def receive(self, wait: float) -> dict[str, Any] | None:
        """The next message, or None after ``wait`` seconds; Closed when the server closes."""
        self.ws.settimeout(max(wait, 0.01))
        try:
            opcode, frame = self.ws.recv_data_frame(True)
        except websocket.WebSocketTimeoutException:
            return None
        except (websocket.WebSocketConnectionClosedException, OSError) as exc:
            raise Closed(None) from exc
        if opcode == websocket.ABNF.OPCODE_CLOSE:
            data = frame.data or b""
            raise Closed(int.from_bytes(data[:2], "big") if len(data) >= 2 else None)
        if opcode not in (websocket.ABNF.OPCODE_TEXT, websocket.ABNF.OPCODE_BINARY):
            return None  # ping/pong frames of the protocol itself
        return dict(json.loads(frame.data))

    def close(self) -> None:
        with contextlib.suppress(Exception):  # it may be gone already
            self.ws.close()


class Watcher:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.client = ctx.client
        args = ctx.args
        if args.rows < 1 or args.rows > 500:
            raise KqError("--rows must be between 1 and 500 (a window's limit).", Exit.USAGE)
        queue = self.client.get("queues", args.queue)
        tenant = self.client.get("tenants", queue["tenant"])
        self.line = Line(queue, args.rows)
        self.url = stream_url(self.client.config.url, int(tenant["id"]))
        self.origin = self.client.config.url
        self.updates = 0
        self.deadline = None if args.timeout is None else time.monotonic() + args.timeout
        self.tty = ctx.out.isatty()

    def remaining(self) -> float:
        return 3600.0 if self.deadline is None else self.deadline - time.monotonic()

    def show(self) -> bool:
        """Print the line; True when --count updates have been shown."""
        out = self.ctx.out
        if self.ctx.format == "json":
            out.write(json.dumps(self.line.state()) + "\n")
        elif self.ctx.format == "yaml":
            out.write("---\n" + yaml.safe_dump(self.line.state(), sort_keys=False))
        else:
            out.write((CLEAR if self.tty else "") + self.line.draw() + ("" if self.tty else "\n"))
        out.flush()
        self.updates += 1
        count = self.ctx.args.count
        return count is not None and self.updates >= count

    def session(self) -> bool:
        """One connection: subscribe, load, follow. True when done (count reached)."""
        stream = Stream(
            self.url, self.client.config.token, self.origin, min(30.0, self.remaining())
        )
        try:
            window = {"id": self.line.queue["id"], "from": 1, "to": self.line.size}
            subscribed = False
            while not subscribed:
                message = stream.receive(self.remaining())
                if message is None:
                    return False  # out of time
                if message.get("type") == "hello":
                    stream.send({"type": "subscribe", "queues": [window], "workloads": []})
                elif message.get("type") == "subscribed":
                    subscribed = True
            self.line.load(self.client)
            if self.show():
                return True
            while self.remaining() > 0:
                idle = PING_EVERY_S - (time.monotonic() - stream.last_sent)
                if idle <= 0:
                    stream.send({"type": "ping"})
                    continue
                message = stream.receive(min(idle, self.remaining()))
                if message is None:
                    continue
                kind = message.get("type")
                if kind == "workloads":
                    if not self.line.apply(message):
                        self.line.load(self.client)
                elif kind == "resync":
                    self.line.load(self.client)
                elif kind == "error":
                    raise KqError(f"The stream refused: {message.get('message')}", Exit.ERROR)
                else:
                    continue  # hello, pong, quotas, activity: nothing to redraw
                if self.show():
                    return True
            return False
        finally:
            stream.close()

    def run(self) -> Exit:
        delay = BACKOFF_S[0]
        while self.remaining() > 0:
            try:
                if self.session():
                    return Exit.OK
            except Closed as closed:
                if closed.code == FORBIDDEN:
                    raise KqError(
                        f"The stream refused you: your token may not watch queue "
                        f"{self.line.queue['name']}.",
                        Exit.FORBIDDEN,
                    ) from None
                sys.stderr.write(f"kq: the stream closed; reconnecting in {delay:.1f}s\n")
            except (OSError, websocket.WebSocketException) as exc:
                sys.stderr.write(f"kq: cannot reach the stream ({exc}); retrying in {delay:.1f}s\n")
            pause = min(delay * random.uniform(0.75, 1.25), max(self.remaining(), 0))  # noqa: S311
            time.sleep(pause)  # the backoff between reconnections, as the pages do
            delay = min(delay * 2, BACKOFF_S[1])
        if self.ctx.args.count is not None:
            raise KqError(
                f"Only {self.updates} of {self.ctx.args.count} updates within "
                f"{self.ctx.args.timeout}s.",
                Exit.TIMEOUT,
            )
        return Exit.OK


def watch(ctx: Context) -> Exit:
    return Watcher(ctx).run()
