"""Kubernetes quantities <-> canonical integer amounts.

Canonical units: ``cpu`` in millicores, every other resource (memory, ephemeral-storage,
nvidia.com/gpu, pods, extended resources) in its base unit. Parsing is delegated to the
kubernetes client's ``parse_quantity`` so that "500m", "4Gi", "1e3" mean exactly what
they mean to the API server.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils import parse_quantity

# Resources whose canonical unit is the milli-unit.
MILLI_RESOURCES = frozenset({"cpu"})

# A qualified name as Kubernetes accepts for resource names: optional DNS subdomain
# prefix, then a name of at most 63 characters.
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
RESOURCE_NAME_RE = re.compile(rf"^(?:{_PREFIX}/)?{_NAME}$")

_BINARY = [("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)]
_DECIMAL = [("E", 10**18), ("P", 10**15), ("T", 10**12), ("G", 10**9), ("M", 10**6), ("k", 10**3)]


# Kubernetes keeps a quantity's value in 64 bits (in its canonical unit here).
MAX_AMOUNT = 2**63 - 1

# The grammar of Kubernetes' resource.Quantity (k8s.io/apimachinery/pkg/api/resource):
#   <quantity> ::= <signedNumber><suffix>;  <number> ::= <digits> | <digits>.<digits> |
#   <digits>. | .<digits>;  <suffix> ::= <binarySI> | <decimalExponent> | <decimalSI>
#   binarySI Ki..Ei; decimalSI n u m "" k M G T P E; decimalExponent e|E <signedNumber>.
# The Python client's parse_quantity hands the number to Decimal, which also takes
# spaces, "_", other scripts' digits, "NaN" and suffixes such as "K" or "ki" that the API
# server refuses; the grammar is checked first so that the same strings are refused here.
# ASCII only, and fullmatch: "$" would let a trailing newline through.
QUANTITY_RE = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[eE][+-]?[0-9]+|[numkMGTPE])?",
    re.ASCII,
)
# resource.Quantity parses the exponent as a 32-bit integer.
_EXPONENT_RE = re.compile(r"[eE]([+-]?[0-9]+)\Z", re.ASCII)
_INT32 = 2**31 - 1


def is_quantity(text: str) -> bool:
    """Whether ``text`` is a quantity string the Kubernetes API server would accept."""
    if not QUANTITY_RE.fullmatch(text):
        return False
    exponent = _EXPONENT_RE.search(text)
    return exponent is None or abs(int(exponent.group(1))) <= _INT32


class QuantityError(ValueError):
    """A quantity or resource map that cannot be parsed; the message is for people."""


def validate_resource_name(name: str) -> None:
    if not isinstance(name, str) or len(name) > 253 or not RESOURCE_NAME_RE.match(name):
        raise QuantityError(
            f"{name!r} is not a Kubernetes resource name (like cpu, memory or nvidia.com/gpu)."
        )


def parse_amount(resource: str, value: Any) -> int:
    """Parse one quantity for ``resource`` into canonical integer units.

    Accepts Kubernetes quantity strings and plain numbers. Refuses negatives and
    precision finer than the canonical unit (1m of cpu, 1 byte, 1 device).
    """
    validate_resource_name(resource)
    if isinstance(value, bool):
        raise QuantityError(f"{resource}: {value!r} is not a quantity.")
    text = str(value)
    if not text:
        raise QuantityError(f"{resource}: an empty value is not a quantity.")
    if not is_quantity(text):
        raise QuantityError(f"{resource}: {text!r} is not a Kubernetes quantity.")
    try:
        amount = parse_quantity(text)
    except (ValueError, InvalidOperation, TypeError) as exc:
        raise QuantityError(f"{resource}: {text!r} is not a Kubernetes quantity.") from exc
    if not isinstance(amount, Decimal):
        amount = Decimal(str(amount))
    if not amount.is_finite():  # "NaN", "Infinity": Decimal parses them, Kubernetes does not
        raise QuantityError(f"{resource}: {text!r} is not a Kubernetes quantity.")
    if amount < 0:
        raise QuantityError(f"{resource}: {text} is negative; amounts must be 0 or more.")
    scaled = amount * 1000 if resource in MILLI_RESOURCES else amount
    if scaled != scaled.to_integral_value():
        unit = "1m" if resource in MILLI_RESOURCES else "1"
        raise QuantityError(f"{resource}: {text} is finer than the smallest unit ({unit}).")
    if scaled > MAX_AMOUNT:
        raise QuantityError(f"{resource}: {text} is more than a Kubernetes quantity can hold.")
    return int(scaled)


def parse_resources(values: Mapping[str, Any] | None) -> dict[str, int]:
    """Parse a resource map; the error names the resource and the value."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise QuantityError("resources must be a map of resource name to quantity.")
    return {str(name): parse_amount(str(name), value) for name, value in values.items()}


def format_amount(resource: str, amount: int) -> str:
    """Render a canonical amount the way a person would type it ("500m", "64Gi", "8")."""
    if resource in MILLI_RESOURCES:
        if amount % 1000 == 0:
            return str(amount // 1000)
        return f"{amount}m"
    if amount == 0:
        return "0"
    for suffix, factor in _BINARY:
        if amount % factor == 0 and amount >= factor:
            return f"{amount // factor}{suffix}"
    if amount >= 10**6:
        for suffix, factor in _DECIMAL:
            if amount % factor == 0 and amount >= factor:
                return f"{amount // factor}{suffix}"
    return str(amount)


def format_resources(values: Mapping[str, int]) -> dict[str, str]:
    return {name: format_amount(name, amount) for name, amount in sorted(values.items())}


def describe(values: Mapping[str, int]) -> str:
    """One line for messages: "cpu 4, memory 16Gi"."""
    if not values:
        return "nothing"
    return ", ".join(
        f"{name} {format_amount(name, amount)}" for name, amount in sorted(values.items())
    )
