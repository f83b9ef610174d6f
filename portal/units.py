"""Quantities for people, as every page, preview, chart, audit line and message shows them.

cpu: millicores below one core ("250m"), cores from one core up ("2", "1.5", "32.2");
memory and storage: binary units ("512Mi", "9.16Gi", "2.79Ti"); anything else (GPUs,
pods): counts. At most three significant figures, rounded half up in integers (so the
JS twin, static/js/quantity.js, gives the same text for the same amount), never
dropping whole digits. tests/portal/test_units.py runs both over one table of cases.

Forms keep showing exact amounts (queueing.quantities.format_amount): a value someone
edits must not be rounded on its way back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def bytes_like(resource: str) -> bool:
    return "memory" in resource or "storage" in resource


def _rounded(amount: int, unit: int) -> str:
    """amount / unit to three significant figures (half up), trailing zeros dropped."""
    whole = amount // unit
    places = 0 if whole >= 100 else 1 if whole >= 10 else 2
    scale = 10**places
    scaled = (amount * scale * 2 + unit) // (unit * 2)
    whole, fraction = divmod(scaled, scale)
    if not fraction:
        return str(whole)
    return f"{whole}.{str(fraction).rjust(places, '0').rstrip('0')}"


def human(resource: str, amount: int) -> str:
    """One canonical amount (millicores for cpu, bytes for memory) for people."""
    if amount < 0:
        return "-" + human(resource, -amount)
    if resource == "cpu":
        if amount == 0:
            return "0"
        return f"{amount}m" if amount < 1000 else _rounded(amount, 1000)
    if bytes_like(resource):
        for index, (suffix, factor) in enumerate(_BINARY):
            if amount >= factor:
                text = _rounded(amount, factor)
                if text == "1024" and index > 0:  # 1023.9Mi reads as 1Gi, not 1024Mi
                    return "1" + _BINARY[index - 1][0]
                return text + suffix
    return str(amount)


def human_or_text(resource: str, value: Any) -> str:
    """``human`` for an amount; anything else (already a quantity, None) as text."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    return human(resource, math.floor(value + 0.5))  # half up, as JS's Math.round


def describe(values: Mapping[str, Any] | None) -> str:
    """ "cpu 4, memory 16Gi, nvidia.com/gpu 2", or "nothing"."""
    if not values:
        return "nothing"
    return ", ".join(f"{name} {human_or_text(name, values[name])}" for name in sorted(values))
