"""Logging filters.

Django logs a refused request (403, 404 from an exception, 400) through ``django.request``
with the exception attached, so every 403 printed a traceback that says nothing an
operator needs. A client's mistake is one line; a 5xx keeps its traceback.
"""

from __future__ import annotations

import logging


class ClientErrorsInOneLine(logging.Filter):
    """4xx, and 503s of a database outage (portal.outage), without their tracebacks."""

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status_code", None)
        if record.exc_info and isinstance(status, int):
            from portal.outage import is_outage

            if status < 500 or (status == 503 and is_outage(record.exc_info[1])):
                record.exc_info = None
                record.exc_text = None
        return True
