"""Rate limits per token (per user for sessions, per address for the anonymous).

A fixed window counted with the cache's atomic ``incr`` (Redis when REDIS_URL is set, so
every web process shares the count; process-local otherwise). One cache round trip per
request, unlike DRF's SimpleRateThrottle which rewrites a list of timestamps. Over the
limit the answer is 429 with ``Retry-After`` (seconds until the window ends).

Requests that fail authentication never reach a throttle (DRF checks permissions first,
and a bad token fails before that): ``count_failed_auth``, called for every 401 by the
API's exception handler, counts it against the client's anonymous rate and, for a wrong
key shaped like one of ours, against that key's prefix, and turns the 401 into a 429
past either limit.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from portal import security, tokens
from portal.models import APIToken
from queueing.choices import Source

log = logging.getLogger(__name__)

PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """ "600/min" -> (600, 60)."""
    count, _, period = rate.partition("/")
    return int(count), PERIODS[period.strip().lower()]


_redis_clients: dict[str, Any] = {}


def _redis() -> Any:
    """A Redis client of REDIS_URL (shared by every request of the process), or None."""
    url = settings.REDIS_URL
    if not url:
        return None
    if url not in _redis_clients:
        import redis

        _redis_clients[url] = redis.Redis.from_url(url)
    return _redis_clients[url]


def hit(key: str, *, ttl: int) -> int:
    """Count one request under ``key``; the count lives ``ttl`` seconds from its first hit.

    With Redis: SET NX + INCR in one pipelined round trip (Django's cache.incr would take
    two more); Redis 6 (the embedded one) lacks EXPIRE NX, hence the SET. Without Redis,
    the process-local cache. A Redis failure lets the request through: an outage of the
    limiter must not become an outage of the API.
    """
    client = _redis()
    if client is None:
        cache.add(key, 0, timeout=ttl)
        try:
            return int(cache.incr(key))
        except ValueError:  # expired between add and incr: a new window
            cache.add(key, 1, timeout=ttl)
            return 1
    import redis

    try:
        pipe = client.pipeline(transaction=False)
        pipe.set(key, 0, ex=ttl, nx=True)
        pipe.incr(key)
        return int(pipe.execute()[1])
    except redis.RedisError:
        log.warning("rate limiting is off for this request: Redis did not answer")
        return 0


class TokenRateThrottle(BaseThrottle):
    def __init__(self) -> None:
        self._wait: float | None = None

    def identity(self, request: Request) -> tuple[str, str]:
        """(cache identity, rate scope) of the caller."""
        if isinstance(request.auth, APIToken):
            return f"token:{request.auth.pk}", "token"
        if request.user and request.user.is_authenticated:
            return f"user:{request.user.pk}", "token"
        return f"anon:{self.get_ident(request)}", "anon"

    def allow_request(self, request: Request, view: Any) -> bool:
        ident, scope = self.identity(request)
        rate = settings.KQ_API_RATES.get(scope)
        if not rate:
            return True
        count, limit, remaining = _window("throttle", ident, rate)
        if count <= limit:
            return True
        self._wait = remaining
        return False

    def wait(self) -> float | None:
        return math.ceil(self._wait) if self._wait is not None else None


def _window(scope: str, ident: str, rate: str) -> tuple[int, int, float]:
    """Count one hit of ``ident`` at ``rate``: (count, limit, seconds to the window's end)."""
    limit, period = parse_rate(rate)
    now = time.time()
    window = int(now // period)
    count = hit(f"kq:{scope}:{ident}:{period}:{window}", ttl=period + 1)
    return count, limit, (window + 1) * period - now


def count_failed_auth(request: Request) -> float | None:
    """Count a request that failed authentication; seconds to wait when over a limit."""
    checks: list[tuple[str, str, str]] = []
    anon_rate = settings.KQ_API_RATES.get("anon")
    if anon_rate:
        # The same count as the anonymous throttle's: 401s and anonymous 200s share it.
        checks.append(("throttle", f"anon:{BaseThrottle().get_ident(request)}", anon_rate))
    key_rate = settings.KQ_API_AUTH_FAIL_RATE
    header = request.META.get("HTTP_AUTHORIZATION", "").split()
    if key_rate and len(header) == 2 and header[1].startswith(tokens.KEY_PREFIX):
        checks.append(("authfail", f"prefix:{header[1][: tokens.PREFIX_LENGTH]}", key_rate))
    wait: float | None = None
    for scope, ident, rate in checks:
        count, limit, remaining = _window(scope, ident, rate)
        if count > limit:
            if count == limit + 1:  # once per window and client (or key prefix)
                security.record(
                    "auth.throttled",
                    object_type=ident.split(":")[0],
                    object_id=ident.split(":", 1)[1],
                    source=Source.API,
                    details={"rate": rate, "path": request.path[:200]},
                )
            wait = max(wait or 0.0, remaining)
    return wait
