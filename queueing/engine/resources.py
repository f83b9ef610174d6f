"""An immutable resource vector in canonical integer units.

Resources are Kubernetes resource names mapped to integers: ``cpu`` in millicores,
``memory`` and ``ephemeral-storage`` in bytes, ``nvidia.com/gpu``, ``pods`` and any
extended resource as counts. A name that is absent means zero, and zero entries are
dropped, so two vectors that mean the same thing are equal and hash alike.

The engine's hot loops work on plain ``dict[str, int]`` (see :attr:`Resources.raw`);
this type is the immutable face of those dicts at the snapshot and decision boundary.
Parsing quantities such as ``"500m"`` or ``"4Gi"`` is not this module's job: the
Django side uses ``kubernetes.utils.parse_quantity`` and hands integers in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

__all__ = ["EMPTY", "Resources"]

# A dominant share above any real one: a demand against zero capacity.
INFINITE_SHARE = math.inf


class Resources(Mapping[str, int]):
    """Immutable, hashable ``str -> int`` mapping; absent names are zero.

    Arithmetic is element-wise over the union of names. Subtraction may produce
    negative entries (a shortfall is a negative headroom); :meth:`clamp` drops them.

    Fit semantics are spelled out because two readings are common:

    * :meth:`fits` -- ``self <= limit`` for every name, an absent limit meaning **zero**
      (a node without GPUs does not fit a GPU pod).
    * :meth:`fits_ceiling` -- the same, but an absent limit means **no ceiling**
      (a quota ``max`` that does not name a resource does not cap it).
    """

    __slots__ = ("_d", "_h")

    _d: dict[str, int]
    _h: int | None

    def __init__(
        self, data: Mapping[str, int] | Iterable[tuple[str, int]] | None = None, **kw: int
    ) -> None:
        items: dict[str, Any] = dict(data) if data is not None else {}
        if kw:
            items.update(kw)
        clean: dict[str, int] = {}
        for name, value in items.items():
            if type(value) is not int:
                integral = isinstance(value, float) and value.is_integer()
                if integral or (isinstance(value, int) and not isinstance(value, bool)):
                    value = int(value)
                else:
                    raise TypeError(f"resource {name!r} must be an integer, got {value!r}")
            if value:
                clean[name] = value
        self._d = clean
        self._h = None

    @classmethod
    def _wrap(cls, clean: dict[str, int]) -> Resources:
        """Adopt a dict that already has no zero entries (internal, no copy)."""
        obj = cls.__new__(cls)
        obj._d = clean
        obj._h = None
        return obj

    @classmethod
    def from_raw(cls, raw: Mapping[str, int]) -> Resources:
        """Build from a hot-loop dict, dropping zeros; trusts the values are ints."""
        return cls._wrap({k: v for k, v in raw.items() if v})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Resources:
        """Build from JSON-like data (``{"cpu": 4000, "memory": 8589934592}``)."""
        if not data:
            return EMPTY
        return cls({str(k): int(v) for k, v in data.items()})

    def to_dict(self) -> dict[str, int]:
        """A fresh, sorted, JSON-serialisable dict."""
        return {k: self._d[k] for k in sorted(self._d)}

    @property
    def raw(self) -> Mapping[str, int]:
        """The internal dict, for fast read-only iteration in hot loops. Do not mutate."""
        return self._d

    # -- Mapping protocol -------------------------------------------------------------

    def __getitem__(self, name: str) -> int:
        return self._d[name]

    def get(self, name: str, default: Any = 0) -> Any:
        """The amount of ``name``; 0 when absent (unlike ``dict.get``)."""
        return self._d.get(name, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, name: object) -> bool:
        return name in self._d

    def __bool__(self) -> bool:
        return bool(self._d)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is Resources or isinstance(other, Resources):
            return self._d == other._d  # type: ignore[attr-defined]
        if isinstance(other, Mapping):
            return self._d == {k: v for k, v in other.items() if v}
        return NotImplemented

    def __hash__(self) -> int:
        h = self._h
        if h is None:
            h = hash(frozenset(self._d.items()))
            self._h = h
        return h

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v}" for k, v in sorted(self._d.items()))
        return f"Resources({inner})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Resources, (self._d,))

    # -- arithmetic -------------------------------------------------------------------

    def __add__(self, other: Mapping[str, int]) -> Resources:
        out = dict(self._d)
        for k, v in other.items():
            s = out.get(k, 0) + v
            if s:
                out[k] = s
            else:
                out.pop(k, None)
        return Resources._wrap(out)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        out = dict(self._d)
        for k, v in other.items():
            s = out.get(k, 0) - v
            if s:
                out[k] = s
            else:
                out.pop(k, None)
        return Resources._wrap(out)

    def __neg__(self) -> Resources:
        return Resources._wrap({k: -v for k, v in self._d.items()})

    def __mul__(self, factor: int) -> Resources:
        if not isinstance(factor, int) or isinstance(factor, bool):
            return NotImplemented
        if factor == 0:
            return EMPTY
        return Resources._wrap({k: v * factor for k, v in self._d.items()})

    __rmul__ = __mul__

    def scale(self, factor: float) -> Resources:
        """Multiply by a real factor, rounding each entry up (never under-reserve)."""
        return Resources._wrap(
            {k: s for k, v in self._d.items() if (s := math.ceil(v * factor - 1e-9))}
        )

    def clamp(self) -> Resources:
        """Drop negative entries (``max(0, x)`` element-wise)."""
        if all(v > 0 for v in self._d.values()):
            return self
        return Resources._wrap({k: v for k, v in self._d.items() if v > 0})

    def negatives(self) -> Resources:
        """Only the negative entries, made positive: the shortfall of a headroom."""
        return Resources._wrap({k: -v for k, v in self._d.items() if v < 0})

    def union_max(self, other: Mapping[str, int]) -> Resources:
        """Element-wise maximum (absent = 0)."""
        out = dict(self._d)
        for k, v in other.items():
            if v > out.get(k, 0):
                out[k] = v
        return Resources.from_raw(out)

    def union_min(self, other: Mapping[str, int]) -> Resources:
        """Element-wise minimum (absent = 0)."""
        keys = set(self._d) | set(other)
        return Resources.from_raw({k: min(self._d.get(k, 0), other.get(k, 0)) for k in keys})

    def is_nonnegative(self) -> bool:
        """True when no entry is negative."""
        return all(v >= 0 for v in self._d.values())

    # -- comparisons ------------------------------------------------------------------

    def fits(self, limit: Mapping[str, int]) -> bool:
        """``self[r] <= limit[r]`` for every ``r``; an absent limit is **zero**.

        Only positive entries of ``self`` can fail: a vector with negative entries
        always fits in those entries.
        """
        get = limit.get
        # A plain loop: measurably faster than all() over a generator in hot paths.
        for k, v in self._d.items():  # noqa: SIM110
            if v > 0 and v > get(k, 0):
                return False
        return True

    def fits_ceiling(self, ceiling: Mapping[str, int]) -> bool:
        """``self[r] <= ceiling[r]`` for every ``r`` the ceiling names; absent = unbounded."""
        for k, v in self._d.items():  # noqa: SIM110
            # `in`, not `.get`: a Resources ceiling answers 0 for absent names.
            if k in ceiling and v > ceiling[k]:
                return False
        return True

    def shortfall(self, limit: Mapping[str, int]) -> Resources:
        """How much of each resource exceeds ``limit`` (absent limit = zero)."""
        get = limit.get
        return Resources._wrap({k: v - get(k, 0) for k, v in self._d.items() if v > get(k, 0)})

    def dominant_share(self, capacity: Mapping[str, int], weight: float = 1.0) -> float:
        """``max_r self[r] / capacity[r] / weight`` over positive entries.

        Zero-safe: an empty vector has share 0.0; a positive demand against zero (or
        absent) capacity has an infinite share; a non-positive weight is infinite too
        unless the vector is empty.
        """
        best = 0.0
        get = capacity.get
        for k, v in self._d.items():
            if v <= 0:
                continue
            cap = get(k, 0)
            if cap <= 0:
                return INFINITE_SHARE
            s = v / cap
            if s > best:
                best = s
        if best == 0.0:
            return 0.0
        if weight <= 0:
            return INFINITE_SHARE
        return best / weight

    @staticmethod
    def total(vectors: Iterable[Mapping[str, int]]) -> Resources:
        """The element-wise sum of many vectors."""
        out: dict[str, int] = {}
        for vec in vectors:
            for k, v in vec.items():
                out[k] = out.get(k, 0) + v
        return Resources.from_raw(out)


EMPTY = Resources()
