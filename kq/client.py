"""The REST API over HTTP: one session, errors turned into KqError with an exit code."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import requests

from kq import __version__
from kq.config import Config
from kq.errors import Exit, KqError, exit_for_status

API = "/api/v1"
TIMEOUT_S = 30.0
PAGE = 500  # the API allows up to 1000 a page


def _segment(value: str | int) -> str:
    return quote(str(value), safe="")


class Client:
    def __init__(self, config: Config, *, timeout: float = TIMEOUT_S) -> None:
        self.config = config
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers.update(
            {
                "Authorization": f"Token {config.token}",
                "Accept": "application/json",
                "User-Agent": f"kq/{__version__}",
            }
        )

    def url(self, *path: str | int) -> str:
        return self.config.url + API + "/" + "".join(f"{_segment(p)}/" for p in path)

    def request(
        self,
        method: str,
        *path: str | int,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
    ) -> Any:
        try:
            answer = self.session.request(
                method,
                self.url(*path),
                params=params,
                json=body,
                timeout=self.timeout,
            )
        except requests.RequestException as exc:
            raise KqError(
                f"Cannot reach {self.config.url}: {exc.__class__.__name__}: {exc}",
                Exit.UNREACHABLE,
            ) from exc
        if answer.status_code < 400:
            if answer.status_code == 204 or not answer.content:
                return None
            try:
                return answer.json()
            except ValueError as exc:
                raise KqError(
                    f"{method} {answer.url} answered {answer.status_code} but not JSON.",
                    Exit.ERROR,
                ) from exc
        raise self._error(method, answer)

    @staticmethod
    def _error(method: str, answer: requests.Response) -> KqError:
        try:
            body = answer.json()
        except ValueError:
            body = None
        detail = body.get("detail") if isinstance(body, dict) else None
        if not detail:
            detail = f"{method} {answer.url} answered {answer.status_code} {answer.reason}"
        if answer.status_code == 429 and answer.headers.get("Retry-After"):
            detail = f"{detail} (retry after {answer.headers['Retry-After']} s)"
        return KqError(str(detail), exit_for_status(answer.status_code), body)

    def get(self, *path: str | int, params: Mapping[str, Any] | None = None) -> Any:
        return self.request("GET", *path, params=params)

    def post(self, *path: str | int, body: Any = None) -> Any:
        return self.request("POST", *path, body=body)

    def pages(
        self, *path: str | int, params: Mapping[str, Any] | None = None, limit: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every result of a paged list (at most ``limit``), fetched a page at a time."""
        query: dict[str, Any] = dict(params or {})
        offset = 0
        seen = 0
        while True:
            size = PAGE if limit is None else min(PAGE, limit - seen)
            if size <= 0:
                return
            page = self.get(*path, params={**query, "limit": size, "offset": offset})
            results = page.get("results", [])
            yield from results
            seen += len(results)
            offset += len(results)
            if not page.get("next") or not results:
                return
