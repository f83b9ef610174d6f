"""WebSocket delivery. Consumers authorise and deliver; they hold no domain logic.

The cycle and the actions (queueing.events) send small ``changed`` notifications to a
tenant's channel-layer group after the database commit. A consumer joins the group of
one tenant the user belongs to (or, for cluster admins, the group of every tenant),
buffers what arrives for ``KQ_WS_DEBOUNCE_MS``, then reads what its subscription shows
(portal.stream_queries, shared with the other connections of the process) and sends
only what changed since its last frame (portal.delivery). The message schema is in
docs/events.md and portal/event_schema.py.

Client messages: ``{"type": "ping"}`` -> ``{"type": "pong"}``;
``{"type": "subscribe", ...}`` -> ``{"type": "subscribed", ...}``. Anything else (not
JSON, binary, too large, too many) gets an ``error`` frame and the connection stays open;
a client that keeps sending far beyond the rate is closed with 1008 (policy violation).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from portal import delivery, stream_queries
from queueing import access, events

log = logging.getLogger(__name__)

FORBIDDEN = 4403  # close code: not allowed to watch this tenant (also for unknown ones)
REAUTHORISE_S = 60.0  # a removed member stops receiving within this long
POLICY_VIOLATION = 1008  # close code: kept flooding after being told to slow down
SERVICE_RESTART = 1012  # close code: the channel layer (Redis) went away; reconnect
# What a channel layer raises when its Redis restarts or is away.
LAYER_ERRORS = (ConnectionError, TimeoutError, RedisConnectionError, RedisTimeoutError)
clock = time.monotonic  # the frame budget's clock; tests turn it by hand


def max_frame_bytes() -> int:
    return int(getattr(settings, "KQ_WS_MAX_FRAME_BYTES", 65536))


def frame_rate() -> tuple[float, float]:
    """(frames per second, burst) a client may send."""
    rate = float(getattr(settings, "KQ_WS_FRAME_RATE", 20))
    return rate, max(1.0, rate * 2)


class FrameBudget:
    """A token bucket of client frames: ``rate`` per second, up to ``burst`` at once.

    ``take`` answers whether this frame may be handled; ``debt`` counts refused frames since
    the bucket was last full (the client calmed down), so that a client ignoring the error
    frames can be let go.
    """

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = burst
        self.at = clock()
        self.debt = 0

    def take(self) -> bool:
        now = clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= self.burst:
            self.debt = 0
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        self.debt += 1
        return False


def debounce_s() -> float:
    return max(0.0, float(getattr(settings, "KQ_WS_DEBOUNCE_MS", 100)) / 1000.0)


class TenantConsumer(AsyncJsonWebsocketConsumer):
    """Live changes of one tenant's workloads and quotas."""

    group: str | None = None
    tenant_id: int | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # When Redis restarts, the layer's receive raises and the group membership is gone
        # with Redis' memory: close with 1012 so the client reconnects (and rejoins, and
        # resyncs) instead of an unhandled exception - or a connection left open and silent.
        try:
            await super().__call__(scope, receive, send)
        except LAYER_ERRORS as exc:
            log.warning("live stream: the channel layer went away (%s); closing with 1012", exc)
            try:
                await send({"type": "websocket.close", "code": SERVICE_RESTART})
            except Exception:  # the connection may be gone already
                log.debug("could not close the live stream", exc_info=True)

    async def allowed(self) -> bool:
        user = self.scope.get("user")
        return bool(await database_sync_to_async(access.has_role)(user, self.tenant_id, "viewer"))

    async def connect(self) -> None:
        self.tenant_id = int(self.scope["url_route"]["kwargs"]["tenant_id"])
        if not await self.allowed():
            await self.close(code=FORBIDDEN)
            return
        await self.join(events.group_name(self.tenant_id))

    async def join(self, group: str) -> None:
        self.group = group
        self.stream = delivery.Stream()
        self.buffer = delivery.Buffer()
        self.flush_handle: asyncio.TimerHandle | None = None
        self.flush_lock = asyncio.Lock()  # one flush at a time keeps frames in order
        self.closed = False
        self.checked_at = time.monotonic()
        try:
            await self.channel_layer.group_add(group, self.channel_name)
        except LAYER_ERRORS:
            # A pooled connection from before a Redis restart fails once; a fresh one works.
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send_json(
            {
                "type": "hello",
                "tenant": self.tenant_id,
                "protocol": delivery.PROTOCOL,
                "debounce_ms": round(debounce_s() * 1000),
            }
        )

    async def disconnect(self, code: int) -> None:
        self.closed = True
        handle = getattr(self, "flush_handle", None)
        if handle is not None:
            handle.cancel()
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """Every client frame is bounded and parsed here; none may end the connection."""
        budget = getattr(self, "budget", None)
        if budget is None:
            budget = self.budget = FrameBudget(*frame_rate())
        if not budget.take():
            if budget.debt == 1:  # one error per burst of refusals, not one per frame
                await self.send_error("rate", "Too many messages; slow down (docs/events.md).")
            elif budget.debt > 10 * budget.burst:
                log.info("closing a live-stream client that kept flooding: %s", self.channel_name)
                await self.close(code=POLICY_VIOLATION)
            return
        if text_data is None:
            await self.send_error("invalid", "Send JSON text frames, not binary ones.")
            return
        size = len(text_data.encode("utf-8", "replace"))  # a lone surrogate is no crash
        if size > max_frame_bytes():
            await self.send_error(
                "too_large", f"A message may be at most {max_frame_bytes()} bytes."
            )
            return
        try:
            content = json.loads(text_data)
        except ValueError:  # JSONDecodeError, and RecursionError's cousins from deep nesting
            await self.send_error("invalid", "That is not JSON; see docs/events.md.")
            return
        except RecursionError:
            await self.send_error("invalid", "That JSON nests too deeply.")
            return
        await self.receive_json(content)

    async def send_error(self, code: str, message: str) -> None:
        await self.send_json({"type": "error", "code": code, "message": message})

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "ping":
            await self.send_json({"type": "pong"})
        elif kind == "subscribe":
            try:
                subscription = delivery.Subscription.parse(content)
            except delivery.SubscriptionError as exc:
                await self.send_error("invalid", str(exc))
                return
            async with self.flush_lock:  # not in the middle of a flush under the old one
                self.stream.subscribe(subscription)
            await self.send_json({"type": "subscribed", **subscription.describe()})
        else:
            await self.send_error("invalid", "Send ping or subscribe; see docs/events.md.")

    async def kq_event(self, message: dict[str, Any]) -> None:
        payload = message["payload"]
        if self.tenant_id is not None and payload.get("tenant") != self.tenant_id:
            return  # never another tenant's, whatever reached this group
        self.buffer.add(payload)
        if self.flush_handle is None:
            loop = asyncio.get_running_loop()
            self.flush_handle = loop.call_later(
                debounce_s(), lambda: loop.create_task(self.flush())
            )

    async def flush(self) -> None:
        self.flush_handle = None
        async with self.flush_lock:
            if self.closed:
                return
            if time.monotonic() - self.checked_at > REAUTHORISE_S:
                self.checked_at = time.monotonic()
                if not await self.allowed():
                    self.closed = True
                    await self.close(code=FORBIDDEN)
                    return
            frames, notices = self.buffer.drain()
            for tenant, notice in notices.items():
                try:
                    frames += await stream_queries.frames(self.stream, tenant, notice)
                except Exception:  # best effort: the page resyncs; the next change retries
                    log.exception("could not read the live changes of tenant %s", tenant)
            try:
                for frame in frames:
                    await self.send(text_data=stream_queries.SHARED.text(frame))
            except Exception:  # the client went away mid-send; disconnect() follows
                log.debug("could not deliver to %s", self.channel_name, exc_info=True)


class ClusterConsumer(TenantConsumer):
    """Every tenant's changes, for cluster admins."""

    async def allowed(self) -> bool:
        return access.is_cluster_admin(self.scope.get("user"))

    async def connect(self) -> None:
        self.tenant_id = None
        if not await self.allowed():
            await self.close(code=FORBIDDEN)
            return
        await self.join(events.ALL_GROUP)
