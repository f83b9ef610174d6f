"""Why a waiting workload shows no ETA: in a few words for a table cell, in full for its
title and the workload page (issue 11: every waiting row shows an ETA or a reason).

One function for every place that shows a waiting workload -- the queue page as served
and as the live stream updates it (both from ``portal.queries.live_row``), the workload
page and the API -- so they say the same thing. It reads only what the cycle stored:
the ETA's own reason (``Workload.eta``) and the explanation's kind and limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from queueing.choices import WAITING_PHASES, Phase
from queueing.models import Workload

#: The explanation keys read (``queries.ROW_COLUMNS`` reads them as ``explanation__<key>``).
EXPLANATION_KEYS = ("kind", "limit", "to_free", "starts_by")

NOT_RANKED = (
    "Not ranked yet: the next admission cycle places it in its queue and forecasts its start"
)


def no_eta(
    *,
    phase: str,
    has_eta: bool,
    reason: str,
    eta_reason: str,
    explanation: Mapping[str, Any] | None,
) -> tuple[str, str]:
    """(short, full) why a waiting workload has no ETA; ("", "") when it has one or is
    not waiting. ``reason`` is the stored sentence (``Workload.reason``), ``eta_reason``
    the forecast's (``Workload.eta["reason"]``), ``explanation`` the stored explanation's
    :data:`EXPLANATION_KEYS` (or None)."""
    if has_eta or phase not in WAITING_PHASES:
        return "", ""
    e = explanation or {}
    kind, limit = e.get("kind"), e.get("limit")
    sentence = (reason or "").strip()
    if phase == Phase.BACKOFF or kind == "backoff":
        return "backing off", sentence or "Backing off after a failed start or eviction."
    if kind == "never-fits":
        if limit == "cluster" and e.get("to_free"):
            return "room held by other trees", sentence
        return "never fits", sentence
    if kind == "unknown-queue":
        return "not considered", sentence
    why = (eta_reason or "").strip()
    if kind == "quota" and limit == "guarantees":
        # It asks more than its quota can get while siblings keep their mins for their
        # own demand: the sentence names them, and what would let it start.
        return "held by others' minimums", (f"No ETA: {why}. " if why else "") + sentence
    if why:
        short = "beyond the horizon" if "horizon" in why else why
        if "time budget" in why:
            short = "not forecast this cycle"
        return short, f"No ETA: {why}." + (f" {sentence}" if sentence else "")
    if not kind:
        return "next cycle", NOT_RANKED + "."
    return "no forecast yet", (
        "No ETA: the last forecast did not reach it (forecasts run at most every few "
        "seconds per tree)." + (f" {sentence}" if sentence else "")
    )


def starts_by(phase: str, bound: Any) -> datetime | None:
    """Aging's bound as stored (``explanation["starts_by"]``, epoch s) of a waiting workload."""
    if phase not in WAITING_PHASES or not isinstance(bound, int | float):
        return None
    return datetime.fromtimestamp(bound, tz=UTC)


def of_row(values: Mapping[str, Any]) -> tuple[str, str]:
    """:func:`no_eta` of a ``values()`` row with ``queries.ROW_COLUMNS``."""
    return no_eta(
        phase=values["phase"],
        has_eta=values["eta_p50"] is not None,
        reason=values["reason"],
        eta_reason=str(values.get("eta__reason") or ""),
        explanation={k: values.get(f"explanation__{k}") for k in EXPLANATION_KEYS},
    )


def of_workload(w: Workload) -> tuple[str, str]:
    """:func:`no_eta` of a model instance."""
    eta = w.eta if isinstance(w.eta, dict) else {}
    return no_eta(
        phase=w.phase,
        has_eta=w.eta_p50 is not None,
        reason=w.reason,
        eta_reason=str(eta.get("reason") or ""),
        explanation=w.explanation if isinstance(w.explanation, dict) else None,
    )
