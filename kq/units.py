"""Quantities for people: what the dashboard shows (portal's ``quantity`` filter and
static/js/quantity.js), re-implemented here because kq imports nothing of the server.
tests/cli/test_units.py runs all three over one table of cases.

cpu: millicores below one core ("250m"), cores above ("2", "1.5", "32.2"); memory and
storage: binary units ("512Mi", "9.16Gi"); everything else (GPUs, pods): counts.
Three significant figures at most, rounded half up, never dropping whole digits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_BINARY = [("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)]
_SUFFIX = {
    "m": (1, 1000),
    "": (1, 1),
    "k": (10**3, 1),
    "M": (10**6, 1),
    "G": (10**9, 1),
    "T": (10**12, 1),
    "P": (10**15, 1),
    "E": (10**18, 1),
    **{suffix: (factor, 1) for suffix, factor in _BINARY},
}
_QUANTITY = re.compile(r"^(\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|)$")


def bytes_like(resource: str) -> bool:
    return "memory" in resource or "storage" in resource


def canonical(resource: str, value: Any) -> int | None:
    """The canonical amount (millicores for cpu) of a quantity as the API spells it, or
    None for something else (then it is shown as it came)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    match = _QUANTITY.match(str(value).strip())
    if not match:
        return None
    number, suffix = int(match.group(1)), match.group(2)
    multiplier, divisor = _SUFFIX[suffix]
    scaled = number * multiplier * (1000 if resource == "cpu" else 1)
    if scaled % divisor:
        return None
    return scaled // divisor


def _decimals(whole: int) -> int:
    return 0 if whole >= 100 else 1 if whole >= 10 else 2


def _rounded(amount: int, unit: int) -> str:
    """amount / unit to three significant figures (half up), trailing zeros dropped."""
    places = _decimals(amount // unit)
    scale = 10**places
    scaled = (amount * scale * 2 + unit) // (unit * 2)  # round half up, in integers
    whole, fraction = divmod(scaled, scale)
    if not places or not fraction:
        return str(whole)
    return f"{whole}.{str(fraction).rjust(places, '0').rstrip('0')}"


def human(resource: str, amount: int) -> str:
    """One canonical amount for people (see the module docstring)."""
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
                if text == "1024" and index > 0:  # 1023.9Mi rounds to 1Gi, not 1024Mi
                    return "1" + _BINARY[index - 1][0]
                return text + suffix
        return str(amount)
    return str(amount)


def human_value(resource: str, value: Any) -> str:
    amount = canonical(resource, value)
    return str(value) if amount is None else human(resource, amount)


def describe(resources: Mapping[str, Any] | None) -> str:
    """ "cpu 4, memory 16Gi, nvidia.com/gpu 2" (or "-" for nothing)."""
    if not resources:
        return "-"
    return ", ".join(f"{name} {human_value(name, resources[name])}" for name in sorted(resources))
