"""Counting the database statements and Redis commands of a cycle and a sync, by step
(tests/queueing/test_round_trips.py; the measurement of docs/BENCHMARKS.md)."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connection

# Inside a test's transaction every atomic block is a savepoint; in the product's own
# transactions (autocommit outside) they are BEGIN and COMMIT, which are not counted.
_SAVEPOINTS = ("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")
_SKIP = ("/queueing/models/", "/queueing/trace.py", "/tests/")


def _where() -> str:
    """The innermost function of the product (queueing/, not its models) on the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if "/queueing/" in name and not any(s in name for s in _SKIP):
            module = name.rsplit("/queueing/", 1)[1].removesuffix(".py").replace("/", ".")
            return f"{module}.{frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


@dataclass
class Count:
    """SQL: calls to the database (an executemany is one call, its ``rows`` statements);
    Redis: commands sent (a pipeline is one round trip, ``redis_commands`` what it held)."""

    sql: Counter[str] = field(default_factory=Counter)
    sql_rows: Counter[str] = field(default_factory=Counter)
    redis: Counter[str] = field(default_factory=Counter)
    redis_commands: Counter[str] = field(default_factory=Counter)
    texts: list[str] = field(default_factory=list)

    @property
    def statements(self) -> int:
        return sum(self.sql.values())

    @property
    def round_trips(self) -> int:
        return sum(self.redis.values())


@contextlib.contextmanager
def counting() -> Iterator[Count]:
    """Count in this thread's database connection and in every Redis client of the
    process (the journal's, the cache's; the live stream's asyncio client counted as
    ``events.send``)."""
    import redis
    import redis.asyncio

    count = Count()
    me = threading.get_ident()

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith(_SAVEPOINTS):  # a test's outer transaction makes them
            return execute(sql, params, many, context)
        where = _where()
        count.sql[where] += 1
        count.sql_rows[where] += len(params) if many and params is not None else 1
        count.texts.append(sql)
        return execute(sql, params, many, context)

    originals: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, label: str | None, pipeline: bool, is_async: bool) -> None:
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def key() -> str:
            return label or (_where() if threading.get_ident() == me else "thread")

        def size(self: Any) -> int:
            return len(getattr(self, "command_stack", ())) if pipeline else 1

        if is_async:

            async def counted_async(self: Any, *args: Any, **kwargs: Any) -> Any:
                if not pipeline and getattr(self, "command_stack", None) is not None:
                    return await original(self, *args, **kwargs)
                where = key()
                count.redis[where] += 1
                count.redis_commands[where] += size(self)
                return await original(self, *args, **kwargs)

            setattr(owner, name, counted_async)
        else:

            def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
                where = key()
                count.redis[where] += 1
                count.redis_commands[where] += size(self)
                return original(self, *args, **kwargs)

            setattr(owner, name, counted)

    from queueing import events

    # The live stream's sends leave in the background (events.send): those queued before
    # are not this count's, those queued inside are, once they left.
    events.flush()
    patch(redis.Redis, "execute_command", None, False, False)
    patch(redis.client.Pipeline, "execute", None, True, False)
    patch(redis.asyncio.Redis, "execute_command", "events.send", False, True)
    patch(redis.asyncio.client.Pipeline, "execute", "events.send", True, True)
    try:
        with connection.execute_wrapper(wrapper):
            yield count
        events.flush()
    finally:
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)
