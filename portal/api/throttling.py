"""Rate limits per token (per user for sessions, per address for the anonymous).

A fixed window counted with the cache's atomic ``incr`` (Redis when REDIS_URL is set, so
every web process shares the count; process-local otherwise). One cache round trip per
request, unlike DRF's SimpleRateThrottle which rewrites a list of timestamps. Over the
limit the answer is 429 with ``Retry-After`` (seconds until the window ends).
"""

from __future__ import annotations

import math
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle

from portal.models import APIToken

PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600, "d": 86400, "day": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """ "600/min" -> (600, 60)."""
    count, _, period = rate.partition("/")
    return int(count), PERIODS[period.strip().lower()]


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
        limit, period = parse_rate(rate)
        now = time.time()
        window = int(now // period)
        key = f"kq:throttle:{ident}:{period}:{window}"
        cache.add(key, 0, timeout=period + 1)
        try:
            count = cache.incr(key)
        except ValueError:  # expired between add and incr: start the window again
            cache.add(key, 1, timeout=period + 1)
            count = 1
        if count <= limit:
            return True
        self._wait = (window + 1) * period - now
        return False

    def wait(self) -> float | None:
        return math.ceil(self._wait) if self._wait is not None else None
