"""Each bad tree is refused with a message naming the field and the numbers; nothing is saved."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from queueing import actions
from queueing.actions import ConflictError
from queueing.models import AuditEvent, Queue, Quota
from tests.builders import SYSTEM


@pytest.fixture
def tree(db: None) -> dict[str, Quota]:
    root = actions.create_quota(
        SYSTEM,
        name="cluster",
        tenant=None,
        parent=None,
        min={"cpu": "100", "memory": "400Gi"},
        max={"cpu": "100", "memory": "400Gi"},
    )
    tenant = actions.create_tenant(SYSTEM, name="team")
    team = actions.create_quota(
        SYSTEM,
        name="team",
        tenant=tenant,
        parent=root,
        min={"cpu": "40"},
        max={"cpu": "80", "nvidia.com/gpu": "4"},
    )
    leaf = actions.create_quota(
        SYSTEM, name="team-dev", tenant=tenant, parent=team, min={"cpu": "10"}, max={"cpu": "20"}
    )
    return {"root": root, "team": team, "leaf": leaf}


def refused(call, field: str, *fragments: str) -> None:
    counts = (Quota.objects.count(), Queue.objects.count(), AuditEvent.objects.count())
    with pytest.raises(ValidationError) as info:
        call()
    messages = info.value.message_dict
    assert field in messages, messages
    text = " ".join(messages[field])
    for fragment in fragments:
        assert fragment in text, text
    assert (Quota.objects.count(), Queue.objects.count(), AuditEvent.objects.count()) == counts


def test_min_above_max_is_refused(tree):
    refused(
        lambda: actions.create_quota(
            SYSTEM,
            name="bad",
            tenant=tree["team"].tenant,
            parent=tree["team"],
            min={"cpu": "8"},
            max={"cpu": "4"},
        ),
        "min",
        "min cpu (8)",
        "max cpu (4)",
    )


def test_children_min_sum_above_parent_min_is_refused(tree):
    # team min 40 = dev 10 + this 31 -> 41
    refused(
        lambda: actions.create_quota(
            SYSTEM,
            name="big",
            tenant=tree["team"].tenant,
            parent=tree["team"],
            min={"cpu": "31"},
            max={"cpu": "40"},
        ),
        "min",
        "min cpu (31)",
        "siblings' (10)",
        "guarantees (40)",
    )


def test_child_max_above_parent_max_is_refused(tree):
    refused(
        lambda: actions.create_quota(
            SYSTEM, name="wide", tenant=tree["team"].tenant, parent=tree["team"], max={"cpu": "81"}
        ),
        "max",
        "max cpu (81)",
        "allows (80)",
    )


def test_child_max_is_checked_against_the_nearest_ancestor_ceiling(tree):
    refused(
        lambda: actions.create_quota(
            SYSTEM,
            name="gpus",
            tenant=tree["team"].tenant,
            parent=tree["leaf"].parent,
            max={"nvidia.com/gpu": "5"},
        ),
        "max",
        "nvidia.com/gpu",
        "(5)",
        "(4)",
    )


def test_negative_amounts_are_refused(tree):
    refused(
        lambda: actions.create_quota(
            SYSTEM, name="neg", tenant=tree["team"].tenant, parent=tree["team"], min={"cpu": "-1"}
        ),
        "min",
        "negative",
    )


@pytest.mark.parametrize("name", ["bad name", "-cpu", "a/b/c", "x" * 64, "cpu!"])
def test_resource_names_must_be_kubernetes_names(tree, name):
    refused(
        lambda: actions.create_quota(
            SYSTEM, name="odd", tenant=tree["team"].tenant, parent=tree["team"], max={name: "1"}
        ),
        "max",
        "not a Kubernetes resource name",
    )


def test_unparseable_quantity_is_refused(tree):
    refused(
        lambda: actions.create_quota(
            SYSTEM,
            name="odd",
            tenant=tree["team"].tenant,
            parent=tree["team"],
            max={"memory": "lots"},
        ),
        "max",
        "'lots' is not a Kubernetes quantity",
    )


def test_a_cycle_is_refused_and_nothing_changes(tree):
    before = Quota.objects.get(pk=tree["team"].pk).parent_id
    refused(
        lambda: actions.update_quota(SYSTEM, tree["team"], parent=tree["leaf"]), "parent", "a cycle"
    )
    assert Quota.objects.get(pk=tree["team"].pk).parent_id == before


def test_lowering_a_parent_min_below_its_children_is_refused(tree):
    refused(
        lambda: actions.update_quota(SYSTEM, tree["team"], min={"cpu": "5"}),
        "min",
        "children are guaranteed cpu 10",
        "min cpu (5)",
    )
    assert Quota.objects.get(pk=tree["team"].pk).min == {"cpu": 40000}


def test_lowering_a_parent_max_below_a_child_max_is_refused(tree):
    refused(
        lambda: actions.update_quota(SYSTEM, tree["team"], max={"cpu": "15"}),
        "max",
        "max cpu (15)",
        "'team-dev' allows (20)",
    )


def test_a_namespace_belongs_to_one_quota(tree):
    actions.update_quota(SYSTEM, tree["leaf"], namespaces=["dev"])
    refused(
        lambda: actions.create_quota(
            SYSTEM,
            name="other",
            tenant=tree["team"].tenant,
            parent=tree["team"],
            namespaces=["dev"],
        ),
        "namespaces",
        "'dev' already belongs to quota 'team-dev'",
    )


def test_a_child_belongs_to_its_parents_tenant(tree):
    other = actions.create_tenant(SYSTEM, name="other")
    refused(
        lambda: actions.create_quota(SYSTEM, name="stray", tenant=other, parent=tree["team"]),
        "tenant",
        "same tenant",
    )


def test_quantities_are_stored_in_canonical_units(tree):
    quota = actions.create_quota(
        SYSTEM,
        name="units",
        tenant=tree["team"].tenant,
        parent=tree["team"],
        min={"cpu": "500m"},
        max={"cpu": "1.5", "memory": "4Gi"},
    )
    assert quota.min == {"cpu": 500}
    assert quota.max == {"cpu": 1500, "memory": 4 * 2**30}


def test_a_valid_edit_bumps_the_version_and_is_audited(tree):
    quota = actions.update_quota(SYSTEM, tree["leaf"], expected_version=1, max={"cpu": "30"})
    assert quota.version == 2
    event = AuditEvent.objects.filter(action="quota.update").latest("id")
    assert event.before["max"] == {"cpu": 20000}
    assert event.after["max"] == {"cpu": 30000}


def test_a_stale_edit_is_refused_and_overwrites_nothing(tree):
    actions.update_quota(SYSTEM, tree["leaf"], expected_version=1, max={"cpu": "30"})
    with pytest.raises(ConflictError, match="version 2"):
        actions.update_quota(SYSTEM, tree["leaf"], expected_version=1, max={"cpu": "12"})
    assert Quota.objects.get(pk=tree["leaf"].pk).max == {"cpu": 30000}


def test_every_tenant_quota_gets_a_default_queue(tree):
    assert tree["leaf"].default_queue is not None
    assert tree["leaf"].default_queue.name == "team-dev"
    assert tree["root"].default_queue is None


@pytest.mark.parametrize(
    "text", ["NaN", "nan", "Infinity", "-Infinity", "sNaN", "9223372036854775808", "1e40", "10E"]
)
def test_what_decimal_parses_but_kubernetes_refuses_is_a_clear_error(text):
    from queueing.quantities import QuantityError, parse_amount

    with pytest.raises(QuantityError) as caught:
        parse_amount("nvidia.com/gpu", text)
    assert "nvidia.com/gpu" in str(caught.value)


def test_the_largest_kubernetes_quantity_is_accepted():
    from queueing.quantities import MAX_AMOUNT, parse_amount

    assert parse_amount("memory", str(MAX_AMOUNT)) == MAX_AMOUNT
