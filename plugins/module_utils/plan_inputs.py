# Copyright: aic.stack contributors
# Apache-2.0
"""The schema of the ``aic_*`` inputs, checked with Ansible's own ArgumentSpecValidator.

The schema is the preflight role's argument spec, entry point ``inputs`` (``roles/preflight/meta/argument_specs.yml``:
type, elements, choices, default and description of every input; ``ansible-doc -t role aic.stack.preflight`` shows
it). It is not the role's ``main`` entry point because an empty string means "the default" for every input, integers
included, and the role's own argument validation would refuse ``""`` for an ``int``. So the aic.stack.plan action
applies the defaults first (:func:`plan.resolve`), then validates what results against the spec here, then
:func:`plan.build_plan` converts, checks the ranges and the cross-field rules.
"""

from __future__ import annotations

import os

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS, FLAVOURS, PlanError, is_default, resolve

ENTRY_POINT = "inputs"
# What ArgumentSpecValidator reads of an option; the rest (description, default) documents it. The spec's default is
# never applied here: the plan's DEFAULTS are (tests/unit/plan/test_plan.py keeps the two equal).
_VALIDATOR_KEYS = ("type", "elements", "choices", "options", "no_log")


def spec_path():
    """The preflight role's argument spec file, in this collection."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "roles", "preflight", "meta", "argument_specs.yml")


def input_options(specs):
    """The options of the ``inputs`` entry point of a loaded argument spec document (``{argument_specs: ...}``)."""
    try:
        options = specs["argument_specs"][ENTRY_POINT]["options"]
    except (KeyError, TypeError) as exc:
        raise PlanError(f"the preflight argument spec has no entry point {ENTRY_POINT!r} with options") from exc
    if not isinstance(options, dict) or not options:
        raise PlanError(f"the preflight argument spec's entry point {ENTRY_POINT!r} has no options")
    return options


def validator_spec(options):
    """``options`` reduced to what the validator reads (sub-options too)."""
    spec = {}
    for name, option in options.items():
        reduced = {key: option[key] for key in _VALIDATOR_KEYS if key in option}
        if isinstance(reduced.get("options"), dict):
            reduced["options"] = validator_spec(reduced["options"])
        spec[name] = reduced
    return spec


def check_inputs(inputs, options):
    """Check every plan input of ``inputs`` against the spec ``options``, after the empty-means-default step.

    Returns what was checked ({name: value}, the defaults applied, every plan input with a value); raises
    :class:`PlanError` naming every input of the wrong type or outside its choices. An input
    that has no default for the flavour and is unset (``aic_vllm_model`` on rocm) is left to the plan, which names it.
    Variables the plan does not know are not looked at (the plan warns about unknown ``aic_*`` names).
    """
    missing = sorted(set(DEFAULTS) - set(options))
    if missing:
        raise PlanError(f"the preflight argument spec ({ENTRY_POINT}) lacks the plan inputs {', '.join(missing)}")
    flavour = resolve(inputs, "aic_flavour")
    flavour = flavour.strip() if isinstance(flavour, str) else flavour
    params = {}
    for name in DEFAULTS:
        value = inputs.get(name)
        if is_default(value):
            # The flavour's default; an unknown flavour is reported below, against the flavour's choices.
            value = resolve(inputs, name, flavour if flavour in FLAVOURS else "cpu")
        if value is not None:
            params[name] = value
    spec = validator_spec({name: options[name] for name in DEFAULTS})
    result = ArgumentSpecValidator(spec).validate(params)
    if result.error_messages:
        raise PlanError("; ".join(result.error_messages))
    return params
