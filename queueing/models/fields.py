"""Model fields of our own."""

from __future__ import annotations

import re
from typing import Any

import orjson
from django.db import models
from django.db.models.fields.json import KeyTransform

_LONG_NUMBER = re.compile(r"[0-9]{19}")


class JSONField(models.JSONField):
    """Django's JSONField, its column values decoded with orjson (a few times faster than
    ``json.loads``, which the cycle's and the sync's reads of workloads called for every
    row's pod sets, requests, assignment, labels and annotations). The same values: a
    document orjson refuses (a number beyond 64 bits, ``NaN``) or a field with its own
    ``decoder`` goes to Django's decoding as before, and so does a document with a run
    of 19 digits or more: orjson turns an integer beyond 64 bits into a float, where
    ``json.loads`` keeps it exact."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if (
            isinstance(value, str)
            and self.decoder is None
            and not isinstance(expression, KeyTransform)
            and _LONG_NUMBER.search(value) is None
        ):
            try:
                return orjson.loads(value)
            except orjson.JSONDecodeError:
                pass
        return super().from_db_value(value, expression, connection)
