"""plugins/module_utils/coerce.py: every function's accepted and rejected spellings, inclusive bounds, the field
name in every message, the caller's error class and message templates."""

from __future__ import annotations

import math
import re
from decimal import Decimal

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.module_utils.coerce import (
    ANSIBLE_FALSE,
    ANSIBLE_TRUE,
    as_bool,
    as_choice,
    as_float,
    as_int,
    as_list,
    as_str,
    split_text,
)


class CallerError(ValueError):
    """Stands for a caller's own error class (PlanError, CliffConfigError, SlurmSpecError ...)."""


def raises(field, match=""):
    """pytest.raises for CallerError whose message starts with ``field`` and contains ``match``."""
    return pytest.raises(CallerError, match=r"^" + re.escape(field) + r".*" + re.escape(match))


# -- as_int ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0, 0), (7, 7), (-3, -3), ("12", 12), (" 12 ", 12), ("\t8\n", 8), ("007", 7)],
)
def test_as_int_digits_accepts(value, expected):
    result = as_int("f", value)
    assert result == expected
    assert isinstance(result, int) and not isinstance(result, bool)


@pytest.mark.parametrize("value", ["+3", "-3", "1_000", "1.0", "", " ", "abc", "١٢", 2.0, 2.5, None, [1], {"a": 1}])
def test_as_int_digits_rejects(value):
    with raises("aic_x", "expected an integer, got " + repr(value)):
        as_int("aic_x", value, error=CallerError)


@pytest.mark.parametrize("value", [True, False])
@pytest.mark.parametrize("parse", ["int", "digits", "signed", "str"])
def test_as_int_rejects_booleans_in_every_mode(value, parse):
    with raises("aic_x", f"expected an integer, got boolean {value!r}"):
        as_int("aic_x", value, error=CallerError, parse=parse, integral_floats=True)


def test_as_int_bounds_are_inclusive():
    assert as_int("f", 1, 1, 65535) == 1
    assert as_int("f", "65535", 1, 65535) == 65535
    with raises("aic_port", "0 is outside 1..65535"):
        as_int("aic_port", 0, 1, 65535, error=CallerError)
    with raises("aic_port", "65536 is outside 1..65535"):
        as_int("aic_port", " 65536 ", 1, 65535, error=CallerError)


def test_as_int_one_sided_bounds():
    assert as_int("f", 5, minimum=5) == 5
    assert as_int("f", 5, maximum=5) == 5
    assert as_int("f", -(10**30)) == -(10**30)
    with raises("seed", "must be at least 0, got -1"):
        as_int("seed", -1, 0, error=CallerError)
    with raises("n", "must be at most 5, got 6"):
        as_int("n", 6, maximum=5, error=CallerError)


def test_as_int_parse_int_takes_int_instances_only():
    assert as_int("c", 3, parse="int") == 3
    for value in ("3", 3.0):
        with raises("c", "expected an integer"):
            as_int("c", value, error=CallerError, parse="int")


@pytest.mark.parametrize(("value", "expected"), [("+3", 3), ("-3", -3), (" -3 ", -3), ("3", 3)])
def test_as_int_parse_signed(value, expected):
    assert as_int("f", value, parse="signed") == expected


def test_as_int_signed_still_rejects_underscores_and_decimals():
    for value in ("1_000", "3.0", "+-3", "+"):
        with raises("f", "expected an integer"):
            as_int("f", value, error=CallerError, parse="signed")


@pytest.mark.parametrize(("value", "expected"), [(2, 2), ("2", 2), (" 2 ", 2), ("+2", 2), ("1_000", 1000), ("-4", -4)])
def test_as_int_parse_str_reads_whatever_int_reads(value, expected):
    assert as_int("f", value, parse="str") == expected


@pytest.mark.parametrize("value", [None, 2.0, "2.0", "two", [2]])
def test_as_int_parse_str_rejects(value):
    with raises("nodes", "expected an integer"):
        as_int("nodes", value, error=CallerError, parse="str")


def test_as_int_integral_floats():
    assert as_int("f", 2.0, integral_floats=True) == 2
    assert isinstance(as_int("f", 2.0, integral_floats=True), int)
    for value in (2.5, float("nan"), float("inf")):
        with raises("f", "expected an integer"):
            as_int("f", value, error=CallerError, integral_floats=True)
    with raises("f", "expected an integer, got 2.0"):
        as_int("f", 2.0, error=CallerError)


def test_as_int_unknown_parse_is_a_programming_error():
    with pytest.raises(ValueError, match="parse must be one of"):
        as_int("f", 1, parse="hex")


def test_as_int_default_error_class_is_value_error():
    with pytest.raises(ValueError, match=r"^f: expected an integer"):
        as_int("f", "x")


def test_as_int_message_templates():
    one = "{field} must be an integer >= {minimum} (got {value!r})"
    with pytest.raises(CallerError, match=re.escape("gpus must be an integer >= 0 (got 'two')")):
        as_int("gpus", "two", 0, error=CallerError, parse="str", message=one)
    with pytest.raises(CallerError, match=re.escape("gpus must be an integer >= 0 (got True)")):
        as_int("gpus", True, 0, error=CallerError, parse="str", message=one)
    # messages (per kind) win over message (every kind)
    with pytest.raises(CallerError, match=re.escape("gpus: -1 < 0")):
        as_int("gpus", -1, 0, error=CallerError, message=one, messages={"minimum": "{field}: {number} < {minimum}"})


# -- as_float ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), (0.5, 0.5), ("0.5", 0.5), (" 2 ", 2.0), ("1e3", 1000.0), (Decimal("0.25"), 0.25)],
)
def test_as_float_accepts(value, expected):
    result = as_float("f", value)
    assert result == expected
    assert isinstance(result, float)


@pytest.mark.parametrize("value", [None, "", "abc", [1.0], {"a": 1}])
def test_as_float_rejects(value):
    with raises("aic_gb", "expected a number, got " + repr(value)):
        as_float("aic_gb", value, error=CallerError)


@pytest.mark.parametrize("parse", ["float", "number"])
@pytest.mark.parametrize("value", [True, False])
def test_as_float_rejects_booleans(parse, value):
    with raises("aic_gb", f"expected a number, got boolean {value!r}"):
        as_float("aic_gb", value, error=CallerError, parse=parse)


def test_as_float_bounds_are_inclusive():
    assert as_float("f", "0.01", 0.01, 1.0) == 0.01
    assert as_float("f", 1, 0.01, 1.0) == 1.0
    with raises("aic_util", "1.5 is outside 0.01..1"):
        as_float("aic_util", 1.5, 0.01, 1.0, error=CallerError)
    with raises("aic_util", "0.001 is outside 0.01..1"):
        as_float("aic_util", "0.001", 0.01, 1.0, error=CallerError)
    with raises("drain", "must be at least 0, got -1"):
        as_float("drain", -1, 0.0, error=CallerError)
    with raises("drain", "must be at most 2, got 3"):
        as_float("drain", 3, maximum=2.0, error=CallerError)


def test_as_float_nan_and_inf_fail_bounds_without_finite():
    assert math.isinf(as_float("f", "inf"))
    with raises("f", "nan is outside 0..1"):
        as_float("f", "nan", 0.0, 1.0, error=CallerError)
    with raises("f", "inf is outside 0..1"):
        as_float("f", float("inf"), 0.0, 1.0, error=CallerError)


def test_as_float_finite_rejects_nan_and_inf_showing_the_number():
    with raises("f", "expected a number, got nan"):
        as_float("f", "nan", error=CallerError, finite=True)
    with raises("f", "expected a number, got inf"):
        as_float("f", float("inf"), error=CallerError, finite=True)


def test_as_float_parse_number_takes_numbers_and_strings_only():
    assert as_float("f", "2.5", parse="number") == 2.5
    assert as_float("f", 3, parse="number") == 3.0
    with raises("f", "expected a number, got Decimal('1')"):
        as_float("f", Decimal("1"), error=CallerError, parse="number")


def test_as_float_unknown_parse_is_a_programming_error():
    with pytest.raises(ValueError, match="parse must be one of"):
        as_float("f", 1, parse="decimal")


def test_as_float_range_template():
    template = "{field}: must be between {minimum:g} and {maximum:g}, got {number:g}"
    with raises("l1_size_gb", "must be between 0.001 and 65536, got 70000"):
        as_float("l1_size_gb", 70000, 0.001, 65536.0, error=CallerError, messages={"range": template})


# -- as_bool -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, "true", "TRUE", " yes ", "1", "On"])
def test_as_bool_true_spellings(value):
    assert as_bool("f", value) is True


@pytest.mark.parametrize("value", [False, "false", "No", " 0 ", "OFF"])
def test_as_bool_false_spellings(value):
    assert as_bool("f", value) is False


@pytest.mark.parametrize("value", ["y", "t", "n", "f", "", "maybe", 1, 0, 1.0, None, [True], b"yes"])
def test_as_bool_default_rejects(value):
    with raises("aic_flag", "expected a boolean (true/false), got " + repr(value)):
        as_bool("aic_flag", value, error=CallerError)


def test_as_bool_text_reads_any_values_text():
    assert as_bool("f", 1, text=True) is True
    assert as_bool("f", 0, text=True) is False
    for value in (1.0, None, [1]):
        with raises("f", "expected a boolean"):
            as_bool("f", value, error=CallerError, text=True)


def test_as_bool_strings_false_takes_bools_only():
    assert as_bool("requeue", False, strings=False) is False
    with pytest.raises(CallerError, match=re.escape("requeue must be a boolean (got 'true')")):
        as_bool(
            "requeue", "true", error=CallerError, strings=False, message="{field} must be a boolean (got {value!r})"
        )


@pytest.mark.parametrize(
    ("value", "expected"),
    [("y", True), ("T", True), (" yes ", True), (b"on", True), (1, True), (1.0, True), ("n", False), ("F", False)]
    + [(b"0", False), (0, False), (0.0, False), (False, False)],
)
def test_as_bool_ansible_spellings(value, expected):
    result = as_bool("f", value, binary=True, numbers=True, true=ANSIBLE_TRUE, false=ANSIBLE_FALSE)
    assert result is expected


@pytest.mark.parametrize("value", ["maybe", None, 2, 0.5, [True], b"\xff"])
def test_as_bool_ansible_rejects(value):
    with raises("split", "expected a boolean"):
        as_bool("split", value, error=CallerError, binary=True, numbers=True, true=ANSIBLE_TRUE, false=ANSIBLE_FALSE)


# -- split_text / as_list ----------------------------------------------------------------------------------------


def test_split_text():
    assert split_text("a, b ,,c") == ["a", "b", "c"]
    assert split_text("a b,c") == ["a b", "c"]
    assert split_text(" a, b  c\td", ", ") == ["a", "b", "c", "d"]
    assert split_text("x;y,z", ",;") == ["x", "y", "z"]
    assert split_text(" , ;", ",;") == []
    assert split_text("a.b|c", ".|") == ["a", "b", "c"]  # regex characters are literal separators


def test_as_list_strings_lists_and_tuples():
    assert as_list("f", "a, b,,c") == ["a", "b", "c"]
    assert as_list("f", "") == []
    assert as_list("f", "a;b", ",;") == ["a", "b"]
    assert as_list("f", ["a", 1]) == ["a", 1]
    assert as_list("f", ("a", 1), convert=str) == ["a", "1"]
    original = ["x"]
    assert as_list("f", original) is not original


@pytest.mark.parametrize("value", [None, 1, 1.5, True, {"a": 1}, {"a"}])
def test_as_list_rejects_other_values(value):
    with raises("aic_gpus", f"expected a list, got {type(value).__name__} {value!r}"):
        as_list("aic_gpus", value, error=CallerError)


def test_as_list_scalar_wraps_and_none_empty():
    assert as_list("f", 8, scalar=True) == [8]
    assert as_list("f", None, scalar=True) == [None]
    assert as_list("f", None, none_empty=True) == []


def test_as_list_separators_none_rejects_strings():
    with raises("extra_args", "expected a list, got str '--x'"):
        as_list("extra_args", "--x", None, error=CallerError)


def test_as_list_types_object_takes_any_iterable():
    assert as_list("f", (c for c in "ab"), types=object) == ["a", "b"]
    with pytest.raises(TypeError):
        as_list("f", 5, types=object)


def test_as_list_item_types():
    assert as_list("f", ["a"], item_types=str) == ["a"]
    with raises("arches", "expected a list of strings, got int 950"):
        as_list("arches", ["gfx942", 950], error=CallerError, item_types=str)


def test_as_list_split_items_after_convert():
    assert as_list("f", ["gfx942;GFX950", "gfx1151 "], ";, ", item_types=str, split_items=True) == [
        "gfx942",
        "GFX950",
        "gfx1151",
    ]
    assert as_list("f", [942, "a,b"], types=object, convert=str, split_items=True) == ["942", "a", "b"]


def test_as_list_empty_false():
    assert as_list("f", ["a"], empty=False) == ["a"]
    for value in ("", " , ", []):
        with raises("concurrency", "must not be empty"):
            as_list("concurrency", value, error=CallerError, empty=False)
    with raises("arches", "empty arch set"):
        as_list(
            "arches",
            None,
            error=CallerError,
            none_empty=True,
            empty=False,
            messages={"empty": "{field}: empty arch set"},
        )


# -- as_str ------------------------------------------------------------------------------------------------------


def test_as_str_strips_by_default_and_requires_a_string():
    assert as_str("f", "  a b ") == "a b"
    assert as_str("f", " a ", strip=False) == " a "
    for value in (None, 1, True, ["a"]):
        with raises("name", f"expected a string, got {type(value).__name__} {value!r}"):
            as_str("name", value, error=CallerError)


def test_as_str_convert_and_reject():
    assert as_str("f", 12, convert=True) == "12"
    assert as_str("f", None, convert=True) == "None"
    assert as_str("f", ["a"], convert=True) == "['a']"
    with raises("aic_model", "expected a string, got list"):
        as_str(
            "aic_model",
            ["a"],
            error=CallerError,
            convert=True,
            reject=(list, dict),
            message="{field}: expected a string, got {type}",
        )


def test_as_str_none():
    assert as_str("f", None, none="") == ""
    assert as_str("f", None, none="default") == "default"


def test_as_str_empty_and_whitespace():
    with raises("ref", "must not be empty"):
        as_str("ref", "", error=CallerError, empty=False)
    with raises("ref", "must not be empty"):
        as_str("ref", "   ", error=CallerError, empty=False)  # stripped first
    with raises("ref", "' v1' has leading or trailing whitespace"):
        as_str("ref", " v1", error=CallerError, strip="reject")
    with raises("ref", "must not be empty"):
        as_str("ref", "", error=CallerError, strip="reject", empty=False)
    assert as_str("ref", "v1", strip="reject", empty=False) == "v1"


def test_as_str_spaces():
    assert as_str("model", " org/model ", spaces=False) == "org/model"
    with raises("model", "'a b' contains whitespace"):
        as_str("model", " a b ", error=CallerError, spaces=False)
    with raises("model", "contains whitespace"):
        as_str("model", "a\tb", error=CallerError, spaces=False)


def test_as_str_pattern():
    name = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
    assert as_str("f", " ok-name ", pattern=name) == "ok-name"
    assert as_str("f", "abc", pattern=r"[a-c]+") == "abc"
    with raises("aic_stack_name", "'Bad' does not match ^[a-z0-9][a-z0-9_.-]*$"):
        as_str("aic_stack_name", "Bad", error=CallerError, pattern=name)
    with raises("aic_stack_name", "'Bad' is not a valid name"):
        as_str(
            "aic_stack_name",
            "Bad",
            error=CallerError,
            pattern=name,
            messages={"pattern": "{field}: {value!r} is not a valid name"},
        )


# -- as_choice ---------------------------------------------------------------------------------------------------


def test_as_choice():
    assert as_choice("mode", "auto", ("auto", "full")) == "auto"
    assert as_choice("arm", "dram", {"vram": 1, "dram": 2}) == "dram"
    with raises("mode", "'Auto' is not one of auto, full"):
        as_choice("mode", "Auto", ("auto", "full"), error=CallerError)
    with raises("mode", "' auto' is not one of auto, full"):
        as_choice("mode", " auto", ("auto", "full"), error=CallerError)
    with raises("arm", "unknown arm 'gds' (choose from vram, dram)"):
        as_choice(
            "arm",
            "gds",
            {"vram": 1, "dram": 2},
            error=CallerError,
            message="{field}: unknown arm {value!r} (choose from {choices})",
        )
    with raises("mode", "[1] is not one of auto"):
        as_choice("mode", [1], ("auto",), error=CallerError)


# -- error classes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda error: as_int("the_field", "x", error=error),
        lambda error: as_float("the_field", "x", error=error),
        lambda error: as_bool("the_field", "x", error=error),
        lambda error: as_list("the_field", 3, error=error),
        lambda error: as_str("the_field", 3, error=error),
        lambda error: as_choice("the_field", "x", ("y",), error=error),
    ],
)
@pytest.mark.parametrize("error", [CallerError, AnsibleFilterError, ValueError, TypeError])
def test_every_function_raises_the_callers_class_naming_the_field(call, error):
    with pytest.raises(error) as info:
        call(error)
    assert info.type is error
    assert str(info.value).startswith("the_field")


def test_caller_error_classes_of_the_collection():
    from ansible_collections.aic.stack.plugins.module_utils.plan import PlanError
    from ansible_collections.aic.stack.plugins.module_utils.slurm import SlurmSpecError
    from ansible_collections.aic.stack.plugins.plugin_utils.cliff.profiles import CliffConfigError

    for error in (PlanError, CliffConfigError, SlurmSpecError):
        with pytest.raises(error, match=r"^aic_x: expected an integer"):
            as_int("aic_x", "nope", error=error)
