"""What import-linter cannot see: the web layer never writes a model itself.

Views, serializers, forms, read models and the live stream call ``queueing.actions``
(or ``portal.tokens`` for the web layer's own tokens); a ``.save()``, ``.delete()`` or a
queryset write among them would skip the check, the audit record and the event.
"""

from __future__ import annotations

import ast
from pathlib import Path

PORTAL = Path(__file__).resolve().parents[2] / "portal"
WEB = [
    *sorted((PORTAL / "views").glob("*.py")),
    *sorted((PORTAL / "api").rglob("*.py")),
    *(PORTAL / name for name in ("forms.py", "queries.py", "overview.py", "stream_queries.py")),
    *(PORTAL / name for name in ("consumers.py", "delivery.py")),
]
WRITES = {"save", "delete", "create", "update", "bulk_create", "bulk_update", "get_or_create"}
WRITES |= {"update_or_create"}


def writes_in(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in WRITES:
            continue
        receiver = ast.unparse(node.func.value)
        if receiver == "serializer":  # DRF's save() calls the serializer's action
            continue
        model_write = "objects" in receiver or node.func.attr in ("save", "delete")
        if model_write:
            found.append(f"line {node.lineno}: {receiver}.{node.func.attr}(...)")
    return found


def test_the_detector_sees_a_write():  # positive control
    assert writes_in("Quota.objects.filter(pk=1).update(max={})") == [
        "line 1: Quota.objects.filter(pk=1).update(...)"
    ]
    assert writes_in("quota.save()") == ["line 1: quota.save(...)"]
    assert writes_in("context.update(form=form)") == []


def test_the_web_layer_writes_only_through_actions():
    assert all(path.exists() for path in WEB)
    offenders = {str(p.relative_to(PORTAL)): writes_in(p.read_text()) for p in WEB}
    assert {path: lines for path, lines in offenders.items() if lines} == {}
