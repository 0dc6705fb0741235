"""Filters of the cliff benchmark (roles/cliff_bench): profile resolution and per-arm plan overrides."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.aic.stack.plugins.plugin_utils.cliff import profiles


def cliff_overrides(site, operator=None):
    """The run's profile overrides: ``site`` (the inventory's) with ``operator``'s over them; an empty operator value
    keeps the default."""
    try:
        return profiles.merge_overrides(site, operator)
    except profiles.CliffConfigError as exc:
        raise AnsibleFilterError(f"cliff_bench: {exc}") from exc


def cliff_profile(name, overrides=None, user_profiles=None):
    """The resolved profile ``name`` (built-in or user-defined); empty override values keep the default."""
    try:
        return profiles.resolve_profile(name, overrides or {}, user_profiles or {})
    except profiles.CliffConfigError as exc:
        raise AnsibleFilterError(f"cliff_bench: {exc}") from exc


def cliff_arm_overrides(profile, arm, current=None):
    """aic_* plan overrides that deploy ``arm`` of ``profile`` (aic_vllm_lmcache false for vLLM-only arms)."""
    try:
        overrides = profiles.arm_plan_overrides(profile, arm, current or {})
        overrides["aic_vllm_lmcache"] = profiles.arm_uses_lmcache(arm)
    except profiles.CliffConfigError as exc:
        raise AnsibleFilterError(f"cliff_bench: {exc}") from exc
    return overrides


def cliff_cli_sets(overrides):
    """``--set=KEY=VALUE`` arguments of bench/cliff.py for ``overrides``; lists joined by commas, empty values
    left out (they mean "the default")."""
    out = []
    for key, value in (overrides or {}).items():
        if profiles.is_default(value):
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            value = "true" if value else "false"
        out.append(f"--set={key}={value}")
    return out


class FilterModule:
    def filters(self):
        return {
            "cliff_overrides": cliff_overrides,
            "cliff_profile": cliff_profile,
            "cliff_arm_overrides": cliff_arm_overrides,
            "cliff_cli_sets": cliff_cli_sets,
        }
