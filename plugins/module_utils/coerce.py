# Copyright: aic.stack contributors
# Apache-2.0
"""Input coercion: an operator's value (int/str/bool/list from inventory, ``-e``, a CSV or a profile) to a typed,
range-checked value, or an error that names the field.

One implementation for every caller (plugins/module_utils/plan.py, cliff.py, slurm.py, plugins/filter/rocm.py).
Each function takes:

``field``
    the name the error message starts with (a variable, a profile key, a job spec field).
``error``
    the exception class to raise (``PlanError``, ``CliffConfigError``, ``SlurmSpecError``, ``AnsibleFilterError``
    ...); it is called with the message as its only argument. Default ``ValueError``.
``message`` / ``messages``
    the wording: ``messages`` maps a failure kind (listed per function, with its default template) to a
    :meth:`str.format` template, ``message`` is one template for every kind (``messages`` wins over it). Templates
    see ``field``, ``value`` (the value as it stood when the check failed) and what the function lists; the
    defaults read ``"<field>: expected an integer, got 'x'"`` and so on.

Where callers deliberately differ (``" 12 "`` or ``"+12"`` as an integer, ``"on"`` as a boolean, floats that must be
finite ...) a keyword option chooses; the defaults are the plan's (plugins/module_utils/plan.py) semantics.
Pure standard library, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable

__all__ = [
    "ANSIBLE_FALSE",
    "ANSIBLE_TRUE",
    "FALSE_WORDS",
    "TRUE_WORDS",
    "as_bool",
    "as_choice",
    "as_float",
    "as_int",
    "as_list",
    "as_str",
    "split_text",
]

# Boolean spellings (compared after strip() and lower()).
TRUE_WORDS = ("true", "yes", "1", "on")
FALSE_WORDS = ("false", "no", "0", "off")
# Ansible's own (ansible.module_utils.parsing.convert_bool.boolean): also y/t and n/f.
ANSIBLE_TRUE = ("y", "yes", "on", "1", "true", "t")
ANSIBLE_FALSE = ("n", "no", "off", "0", "false", "f")

# as_int(parse=...): which strings are integers (surrounding whitespace allowed; [0-9] is ASCII only).
_INT_STRINGS = {
    "digits": re.compile(r"\s*[0-9]+\s*"),
    "signed": re.compile(r"\s*[+-]?[0-9]+\s*"),
}
_INT_PARSES = ("int", "digits", "signed", "str")
_FLOAT_PARSES = ("float", "number")
_ONE = frozenset((1,))  # 1, 1.0 and True hash and compare alike
_ZERO = frozenset((0,))


def _fail(error, kind, defaults, message, messages, **context):
    """Raise ``error`` with the template chosen for ``kind``, formatted with ``context``."""
    template = (messages or {}).get(kind) or message or defaults[kind]
    raise error(template.format(**context))


def _bounds_kind(minimum, maximum):
    if minimum is not None and maximum is not None:
        return "range"
    return "minimum" if minimum is not None else "maximum"


def _out_of_bounds(number, minimum, maximum):
    """True when ``number`` is outside the given (inclusive) bounds; NaN is outside any bound."""
    return (minimum is not None and not minimum <= number) or (maximum is not None and not number <= maximum)


def _read_int(value, parse, integral_floats):
    """The integer ``value`` stands for under as_int's ``parse`` rules, else None (booleans are checked before)."""
    if parse == "str":
        if value is None:
            return None
        try:
            return int(str(value).strip())
        except ValueError:
            return None
    if isinstance(value, int):
        return value
    if integral_floats and isinstance(value, float) and value.is_integer():
        return int(value)
    if parse in _INT_STRINGS and isinstance(value, str) and _INT_STRINGS[parse].fullmatch(value):
        return int(value)
    return None


def _read_float(value, parse):
    """The number ``value`` stands for under as_float's ``parse`` rules, else None (booleans are checked before)."""
    if parse == "float" or isinstance(value, str):
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    if isinstance(value, (int, float)):
        return value
    return None


def _as_number(field, value, minimum, maximum, read, defaults, *, error, message, messages, finite=False):
    """What as_int and as_float share: no booleans, ``read(value)`` (None: not a number), optionally finite, bounds."""

    def fail(kind, shown=value, number=None):
        _fail(
            error,
            kind,
            defaults,
            message,
            messages,
            field=field,
            value=shown,
            number=number,
            minimum=minimum,
            maximum=maximum,
        )

    if isinstance(value, bool):
        fail("boolean")
    number = read(value)
    if number is None:
        fail("type")
    if finite and not math.isfinite(number):
        fail("type", shown=number)
    if _out_of_bounds(number, minimum, maximum):
        fail(_bounds_kind(minimum, maximum), number=number)
    return number


_INT_MESSAGES = {
    "boolean": "{field}: expected an integer, got boolean {value!r}",
    "type": "{field}: expected an integer, got {value!r}",
    "range": "{field}: {number} is outside {minimum}..{maximum}",
    "minimum": "{field}: must be at least {minimum}, got {number}",
    "maximum": "{field}: must be at most {maximum}, got {number}",
}


def as_int(
    field,
    value,
    minimum=None,
    maximum=None,
    *,
    error=ValueError,
    parse="digits",
    integral_floats=False,
    message=None,
    messages=None,
):
    """``value`` as an integer within ``minimum``..``maximum`` (both inclusive, either None for no bound).

    A boolean is never an integer (``True`` is rejected, not read as 1). ``parse`` says what else is accepted:

    ``"int"``
        int instances only;
    ``"digits"`` (default)
        also strings of ASCII digits, surrounding whitespace allowed (``" 12 "``), no sign;
    ``"signed"``
        also such strings with a ``+``/``-`` sign;
    ``"str"``
        anything but None whose ``str()``, stripped, :func:`int` reads (signs, ``1_000``, ints).

    ``integral_floats`` also accepts a float with an integral value (``2.0`` -> 2).

    Message kinds: ``boolean``, ``type`` (not an integer), and for a number out of bounds ``range`` (both bounds
    set), ``minimum`` (only a lower one) or ``maximum`` (only an upper one). Every template also sees ``minimum``
    and ``maximum``, and ``number`` (the integer read; None before one is read).
    """
    if parse not in _INT_PARSES:
        raise ValueError(f"as_int: parse must be one of {', '.join(_INT_PARSES)}, got {parse!r}")

    return _as_number(
        field,
        value,
        minimum,
        maximum,
        lambda v: _read_int(v, parse, integral_floats),
        _INT_MESSAGES,
        error=error,
        message=message,
        messages=messages,
    )


_FLOAT_MESSAGES = {
    "boolean": "{field}: expected a number, got boolean {value!r}",
    "type": "{field}: expected a number, got {value!r}",
    "range": "{field}: {number:g} is outside {minimum:g}..{maximum:g}",
    "minimum": "{field}: must be at least {minimum:g}, got {number:g}",
    "maximum": "{field}: must be at most {maximum:g}, got {number:g}",
}


def as_float(
    field,
    value,
    minimum=None,
    maximum=None,
    *,
    error=ValueError,
    parse="float",
    finite=False,
    message=None,
    messages=None,
):
    """``value`` as a float within ``minimum``..``maximum`` (both inclusive, either None for no bound).

    A boolean is never a number. ``parse`` says what is accepted:

    ``"float"`` (default)
        whatever :func:`float` reads (numbers, numeric strings with surrounding whitespace, ``"nan"``, ``"inf"``);
    ``"number"``
        int and float instances and strings :func:`float` reads.

    ``finite`` rejects NaN and infinities as ``type`` (its message then shows the number read, e.g. ``nan``);
    without it they fail the bounds, if any.

    Message kinds: ``boolean``, ``type``, and ``range`` / ``minimum`` / ``maximum`` as :func:`as_int`'s
    (every template sees ``number``, ``minimum`` and ``maximum``; the defaults format them with ``:g``).
    """
    if parse not in _FLOAT_PARSES:
        raise ValueError(f"as_float: parse must be one of {', '.join(_FLOAT_PARSES)}, got {parse!r}")

    number = _as_number(
        field,
        value,
        minimum,
        maximum,
        lambda v: _read_float(v, parse),
        _FLOAT_MESSAGES,
        error=error,
        message=message,
        messages=messages,
        finite=finite,
    )
    return float(number)


_BOOL_MESSAGES = {"type": "{field}: expected a boolean (true/false), got {value!r}"}


def as_bool(
    field,
    value,
    *,
    error=ValueError,
    strings=True,
    text=False,
    binary=False,
    numbers=False,
    true=TRUE_WORDS,
    false=FALSE_WORDS,
    message=None,
    messages=None,
):
    """``value`` as a boolean: a bool as it is, else a spelling of ``true`` / ``false`` (after strip and lower).

    ``strings`` (default) reads str values; ``strings=False`` accepts bools only. ``text`` reads ``str(value)`` of
    any value (so the int 1 is ``"1"``, but the float 1.0 is not a boolean). ``binary`` also reads bytes (UTF-8).
    ``numbers`` accepts numbers equal to 1 and 0 (``1``, ``1.0``, ``0``), as Ansible's ``boolean()`` does; with
    ``true=ANSIBLE_TRUE, false=ANSIBLE_FALSE, binary=True, numbers=True`` this is Ansible's strict ``boolean()``.

    Message kind: ``type``.
    """
    if isinstance(value, bool):
        return value
    word = None
    if text:
        word = str(value)
    elif strings and isinstance(value, str):
        word = value
    elif strings and binary and isinstance(value, bytes):
        word = value.decode("utf-8", "surrogateescape")
    if word is not None:
        word = word.strip().lower()
        if word in true:
            return True
        if word in false:
            return False
    elif numbers and isinstance(value, Hashable):
        if value in _ONE:
            return True
        if value in _ZERO:
            return False
    _fail(error, "type", _BOOL_MESSAGES, message, messages, field=field, value=value)


def split_text(text, separators=","):
    """The non-empty, stripped parts of ``text`` between any of the ``separators`` characters.

    A whitespace character among ``separators`` stands for any whitespace: ``split_text(" a, b  c", ", ")`` is
    ``["a", "b", "c"]``; ``split_text("a b,c")`` is ``["a b", "c"]``.
    """
    chars = "".join(re.escape(c) for c in separators if not c.isspace())
    if any(c.isspace() for c in separators):
        chars += r"\s"
    return [part.strip() for part in re.split(f"[{chars}]", text) if part.strip()]


_LIST_MESSAGES = {
    "type": "{field}: expected a list, got {type} {value!r}",
    "item": "{field}: expected a list of strings, got {type} {item!r}",
    "empty": "{field}: must not be empty",
}


def as_list(
    field,
    value,
    separators=",",
    *,
    error=ValueError,
    types=(list, tuple),
    none_empty=False,
    scalar=False,
    item_types=None,
    split_items=False,
    convert=None,
    empty=True,
    message=None,
    messages=None,
):
    """``value`` as a new list.

    A string is split at any of ``separators`` (see :func:`split_text`; ``separators=None``: a string is not a
    list but a ``type`` error); an instance of ``types`` gives its items (``types=object``: whatever :func:`list`
    takes, its TypeError unchanged). ``none_empty`` reads None as ``[]``; ``scalar`` makes any other value a
    one-item list instead of a ``type`` error.

    Each item must then be an instance of ``item_types`` (when given; else ``item`` error), is passed through
    ``convert`` (a callable, e.g. ``str``) when given, and is split like a string value when ``split_items`` (its
    parts become items; items must be strings by then). ``empty=False`` makes an empty result an ``empty`` error.

    Message kinds: ``type`` (templates see ``type``, the type's name), ``item`` (``item`` and its ``type``),
    ``empty``.
    """
    if value is None and none_empty:
        items = []
    elif isinstance(value, str) and separators is not None:
        items = split_text(value, separators)
    elif isinstance(value, types):
        items = list(value)
    elif scalar:
        items = [value]
    else:
        _fail(error, "type", _LIST_MESSAGES, message, messages, field=field, value=value, type=type(value).__name__)
    if item_types is not None:
        for item in items:
            if not isinstance(item, item_types):
                _fail(
                    error,
                    "item",
                    _LIST_MESSAGES,
                    message,
                    messages,
                    field=field,
                    value=value,
                    item=item,
                    type=type(item).__name__,
                )
    if convert is not None:
        items = [convert(item) for item in items]
    if split_items:
        items = [part for item in items for part in split_text(item, separators or "")]
    if not items and not empty:
        _fail(error, "empty", _LIST_MESSAGES, message, messages, field=field, value=value)
    return items


_STR_MESSAGES = {
    "type": "{field}: expected a string, got {type} {value!r}",
    "empty": "{field}: must not be empty",
    "whitespace": "{field}: {value!r} has leading or trailing whitespace",
    "spaces": "{field}: {value!r} contains whitespace",
    "pattern": "{field}: {value!r} does not match {pattern}",
}
_KEEP = object()


def as_str(
    field,
    value,
    *,
    error=ValueError,
    convert=False,
    reject=(),
    none=_KEEP,
    strip=True,
    empty=True,
    spaces=True,
    pattern=None,
    message=None,
    messages=None,
):
    """``value`` as a string.

    ``none`` (when given) is returned for None as it is. A value of a ``reject`` type is a ``type`` error; any other
    non-string is one too, unless ``convert``, which takes ``str(value)``. ``strip``: True strips the string,
    False keeps it, ``"reject"`` makes leading or trailing whitespace a ``whitespace`` error (after the ``empty``
    check). Then ``empty=False`` rejects ``""`` (``empty``), ``spaces=False`` any whitespace inside (``spaces``),
    and ``pattern`` (a regex, used with ``match``) what it does not match (``pattern``; templates see ``pattern``,
    its text).

    Message kinds: ``type`` (templates see ``type``, the type's name), ``empty``, ``whitespace``, ``spaces``,
    ``pattern``; templates see the value as it stood (stripped, when stripping).
    """

    def fail(kind, **extra):
        _fail(error, kind, _STR_MESSAGES, message, messages, field=field, value=value, **extra)

    if value is None and none is not _KEEP:
        return none
    if isinstance(value, reject) or not (isinstance(value, str) or convert):
        fail("type", type=type(value).__name__)
    if not isinstance(value, str):
        value = str(value)
    if strip is True:
        value = value.strip()
    if not empty and not value:
        fail("empty")
    if strip == "reject" and value != value.strip():
        fail("whitespace")
    if not spaces and any(c.isspace() for c in value):
        fail("spaces")
    if pattern is not None:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        if not regex.match(value):
            fail("pattern", pattern=regex.pattern)
    return value


_CHOICE_MESSAGES = {"choice": "{field}: {value!r} is not one of {choices}"}


def as_choice(field, value, choices, *, error=ValueError, message=None, messages=None):
    """``value`` itself when it is one of ``choices`` (compared as they are: no strip, no case folding).

    Message kind: ``choice`` (templates see ``choices``, joined with ``", "``).
    """
    if value not in choices:
        _fail(
            error,
            "choice",
            _CHOICE_MESSAGES,
            message,
            messages,
            field=field,
            value=value,
            choices=", ".join(str(c) for c in choices),
        )
    return value
