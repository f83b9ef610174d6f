"""Template helpers: quantities, priority bands, kube-queue phase names, relative times."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from portal import units
from queueing import compat
from queueing.choices import priority_band
from queueing.models import Workload

register = template.Library()


@register.filter
def quantity(amount: Any, resource: str) -> str:
    """``{{ amount|quantity:"memory" }}`` -> "9.16Gi" (portal.units; JS: static/js/quantity.js)."""
    return units.human_or_text(resource, amount)


@register.filter
def resources(values: Mapping[str, Any] | None) -> str:
    """``{{ workload.total_request|resources }}`` -> "cpu 4, memory 16Gi"."""
    return units.describe(values)


@register.filter
def get(mapping: Mapping[str, Any] | None, key: str) -> Any:
    return (mapping or {}).get(key)


@register.filter
def band(priority: int | None) -> str:
    return priority_band(int(priority)) if priority is not None else ""


@register.filter
def kube_phase(phase: str) -> str:
    try:
        return compat.kube_queue_phase(phase)
    except ValueError:
        return phase


def as_datetime(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), tz=timezone.get_current_timezone())
    return parse_datetime(str(value))


def humanize_seconds(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds < 60:
        return f"{int(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        hours, rest = divmod(int(seconds), 3600)
        return f"{hours} h {rest // 60} min" if rest >= 60 else f"{hours} h"
    days, rest = divmod(int(seconds), 86400)
    return f"{days} d {rest // 3600} h" if rest >= 3600 else f"{days} d"


def relative(value: datetime, now: datetime | None = None) -> str:
    delta = (value - (now or timezone.now())).total_seconds()
    if abs(delta) < 1:
        return "now"
    text = humanize_seconds(delta)
    return f"in {text}" if delta > 0 else f"{text} ago"


@register.simple_tag
def reltime(value: Any, mode: str = "rel") -> str:
    """A <time> that live.js keeps fresh: mode "rel" (in 3 min / 3 min ago) or "age" (3 min)."""
    when = as_datetime(value)
    if when is None:
        return mark_safe('<span class="muted">—</span>')
    if mode == "age":
        text = humanize_seconds((timezone.now() - when).total_seconds())
    else:
        text = relative(when)
    local = timezone.localtime(when)
    return format_html(
        '<time datetime="{}" data-rel="{}" title="{}">{}</time>',
        when.isoformat(),
        mode,
        local.strftime("%Y-%m-%d %H:%M:%S %Z"),
        text,
    )


@register.simple_tag
def by_age_note() -> str:
    """Why a waiting row's p50 is earlier than rows ahead of it (the queue page's hover text)."""
    return Workload.BY_AGE_NOTE


@register.simple_tag
def eta_cell(row: Mapping[str, Any], which: str) -> str:
    """A waiting row's ETA cell (``which`` "p50" or "p90"; JS: queue.js ``etaCell``): the
    time; else, in the p90 cell, aging's bound ("at the latest in 3 min") when one is
    stated; else why there is no ETA in a few words, in full on hover."""
    value = row.get(f"eta_{which}")
    if value is not None:
        if which == "p50" and row.get("eta_by_age"):
            return format_html(
                '{} <small class="eta-by-age" title="{}">by age</small>',
                reltime(value),
                Workload.BY_AGE_NOTE,
            )
        return reltime(value)
    if which == "p90" and row.get("starts_by"):
        return format_html(
            '<span class="eta-bound" title="Aging\'s bound: it starts by then at the latest, '
            "unless work joins its queue ahead of it or starts in its quota tree and ends after "
            'then">at the latest {}</span>',
            reltime(row["starts_by"]),
        )
    note = row.get("eta_note") or ""
    if not note:
        return reltime(None)
    return format_html(
        '<span class="eta-none" title="{}">{}</span>', row.get("eta_why") or note, note
    )


@register.filter
def seconds(value: Any) -> str:
    if value is None:
        return "—"
    return humanize_seconds(float(value))


@register.filter
def pct(value: Any) -> str:
    if value is None:
        return "—"
    return f"{float(value):.0f}%"


@register.filter
def pct100(value: Any) -> str:
    """A ratio as a percentage: 0.873 -> "87%"."""
    if value is None:
        return "—"
    return f"{float(value) * 100:.0f}%"


@register.filter
def isotime(value: Any) -> str:
    """An ISO 8601 timestamp for a data attribute, from a datetime or an ISO string."""
    when = as_datetime(value)
    return when.isoformat() if when is not None else ""
