"""kq: a command-line client for Koord-Queue, a thin client of its REST API.

It imports nothing of the server (import-linter holds it to that): everything it knows,
it reads from ``/api/v1/`` and the ``/ws/`` stream, as any other client would.
See docs/cli.md.
"""

__version__ = "0.1.0"
