"""Quantities follow the grammar of Kubernetes' resource.Quantity exactly.

The kubernetes client's ``parse_quantity`` gives the value; the grammar decides what is a
quantity at all (the client hands the number to Decimal, which takes far more).
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from queueing.quantities import MAX_AMOUNT, QUANTITY_RE, QuantityError, is_quantity, parse_amount

# Strings the Kubernetes API server refuses (resource.ParseQuantity answers
# ErrFormatWrong or ErrSuffix) although Decimal, and so parse_quantity, may accept them.
REFUSED_BY_KUBERNETES = [
    "500 m",  # a space between number and suffix
    "1_000m",  # Python's digit separator
    " 1",
    "1 ",
    "1\n",
    "\t1",
    "\u0661",  # ARABIC-INDIC DIGIT ONE
    "\u0661\u0662m",
    "\uff11",  # FULLWIDTH DIGIT ONE
    "²",  # SUPERSCRIPT TWO
    "NaN",
    "nan",
    "Infinity",
    "inf",
    "-Infinity",
    "sNaN",
    "1K",  # the decimal kilo is "k"; "K" only appears in "Ki"
    "1ki",
    "1KI",
    "1mi",
    "1e",
    "1E3.5",
    "1e3m",
    "0x10",
    "1/2",
    "",
    ".",
    "+",
    "-.",
    "1..2",
    "1.2.3",
    "++1",
    "1e99999999999",  # the exponent is a 32-bit integer
    "1Gib",
    "4 Gi",
    "1,000",
]

# And what it accepts, with the canonical value (memory: bytes).
ACCEPTED = [
    ("0", 0),
    ("1", 1),
    ("+1", 1),
    ("1.", 1),
    ("1.0", 1),
    (".5k", 500),
    ("4Gi", 4 * 2**30),
    ("1Ki", 1024),
    ("2k", 2000),
    ("1e3", 1000),
    ("1E3", 1000),
    ("1e+3", 1000),
    ("1000e-3", 1),
    ("1E", 10**18),  # the exa suffix, not an exponent
    ("5000m", 5),
    ("7000000u", 7),
    ("3000000000n", 3),
]


@pytest.mark.parametrize("text", REFUSED_BY_KUBERNETES)
def test_strings_kubernetes_refuses_are_refused(text: str) -> None:
    assert not is_quantity(text)
    with pytest.raises(QuantityError, match="memory"):
        parse_amount("memory", text)


@pytest.mark.parametrize(("text", "amount"), ACCEPTED)
def test_strings_kubernetes_accepts_are_accepted(text: str, amount: int) -> None:
    assert is_quantity(text)
    assert parse_amount("memory", text) == amount


def test_cpu_is_in_millicores_through_the_same_grammar() -> None:
    assert parse_amount("cpu", "500m") == 500
    assert parse_amount("cpu", "1.5") == 1500
    with pytest.raises(QuantityError):
        parse_amount("cpu", "500 m")


def test_json_numbers_are_quantities() -> None:
    assert parse_amount("memory", 4096) == 4096
    assert parse_amount("cpu", 0.25) == 250
    assert parse_amount("memory", 1e3) == 1000
    with pytest.raises(QuantityError):
        parse_amount("memory", float("nan"))


# Strings of the grammar, built from its productions (not from the regular expression under
# test), so that a mistake in QUANTITY_RE shows up as a refusal here.
_digits = st.text("0123456789", min_size=1, max_size=12)
_number = st.one_of(
    _digits,
    st.builds(lambda a, b: f"{a}.{b}", _digits, _digits),
    st.builds(lambda a: f"{a}.", _digits),
    st.builds(lambda b: f".{b}", _digits),
)
_suffix = st.one_of(
    st.sampled_from(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]),
    st.sampled_from(["n", "u", "m", "", "k", "M", "G", "T", "P", "E"]),
    st.builds(
        lambda e, sign, n: f"{e}{sign}{n}",
        st.sampled_from("eE"),
        st.sampled_from(["", "+", "-"]),
        st.integers(0, 40).map(str),
    ),
)
grammar_quantities = st.builds(
    lambda sign, number, suffix: f"{sign}{number}{suffix}",
    st.sampled_from(["", "+", "-"]),
    _number,
    _suffix,
)


@settings(max_examples=400, deadline=None)
@given(grammar_quantities)
def test_every_string_of_the_grammar_is_accepted_with_the_clients_value(text: str) -> None:
    assert is_quantity(text)
    expected = Decimal(parse_quantity(text))
    if expected < 0 or expected != expected.to_integral_value() or expected > MAX_AMOUNT:
        with pytest.raises(QuantityError):
            parse_amount("memory", text)
    else:
        assert parse_amount("memory", text) == int(expected)


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(
        st.text(max_size=12),
        st.text("0123456789.+-eEinumkKMGTP _\n \u0661", max_size=10),
        grammar_quantities.flatmap(
            lambda q: st.sampled_from([f" {q}", f"{q} ", f"{q}\n", q.replace("0", "_0")])
        ),
    )
)
def test_whatever_is_accepted_is_a_kubernetes_quantity_of_the_same_value(text: str) -> None:
    try:
        amount = parse_amount("memory", text)
    except QuantityError:
        return
    # Accepted: it is in the grammar (ASCII, no whitespace) and the client agrees on the value.
    assert QUANTITY_RE.fullmatch(text)
    assert text.isascii()
    assert text == text.strip()
    assert "_" not in text
    assert Decimal(parse_quantity(text)) == amount
