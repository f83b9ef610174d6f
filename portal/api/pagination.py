"""Limit/offset pages: ``?limit=50&offset=100``; ``count`` is the total that matches.

Unlike DRF's LimitOffsetPagination, which quietly replaces a bad value with the default,
a ``limit`` or ``offset`` that is not a whole number in range is refused with a 400 that
names the parameter: a caller who asked for ``offset=1e30`` should learn it, not receive
page one (nor a 500 when the number does not fit the database's 64 bits).
"""

from __future__ import annotations

from rest_framework import exceptions
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

# An offset past two thousand million rows pages through nothing any deployment holds,
# and keeps offset + limit well inside every database's 64-bit LIMIT/OFFSET.
MAX_OFFSET = 2**31 - 1


def bounded_int(request: Request, name: str, *, minimum: int, maximum: int) -> int | None:
    """The query parameter ``name`` as an int in [minimum, maximum]; None when absent."""
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    # str.isdigit accepts other scripts' digits (Arabic-Indic ones) and superscripts: ASCII only.
    if (
        not (raw.isascii() and raw.isdigit())
        or len(raw) > 12
        or not (minimum <= int(raw) <= maximum)
    ):
        raise exceptions.ValidationError(
            {name: [f"Must be a whole number from {minimum} to {maximum}, not {raw[:40]!r}."]}
        )
    return int(raw)


class Pagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 1000

    def get_limit(self, request: Request) -> int:
        value = bounded_int(request, self.limit_query_param, minimum=1, maximum=self.max_limit)
        return self.default_limit if value is None else value

    def get_offset(self, request: Request) -> int:
        value = bounded_int(request, self.offset_query_param, minimum=0, maximum=MAX_OFFSET)
        return 0 if value is None else value
