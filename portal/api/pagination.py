"""Limit/offset pages: ``?limit=50&offset=100``; ``count`` is the total that matches."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 1000
