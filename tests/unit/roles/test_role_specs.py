"""Every role's ``meta/argument_specs.yml`` agrees with its ``defaults/main.yml`` (the checks prometheus-community's
Ansible roles run in CI), so ``ansible-doc -t role`` and argument validation describe what the role really does.

The rules, for every role under ``roles/``:

1. The role has ``meta/argument_specs.yml`` with the entry point ``main`` (except an internal role recorded in
   ``INTERNAL_ROLES``: only other roles include it, with ``tasks_from``), and every entry point ``<ep>`` is a
   ``tasks/<ep>.yml`` (what ``tasks_from: <ep>`` runs), except a schema recorded in ``SCHEMA_ENTRY_POINTS``.
2. Every variable of ``defaults/main.yml`` is public and named ``<role>_...``.
3. Every variable of ``defaults/main.yml`` is an option of at least one entry point, and of every entry point whose
   tasks read it. What an entry point reads: ``tasks/<ep>.yml``, the role's task files and templates it names
   (followed recursively), the role's ``vars/`` and ``handlers/``, and the defaults those refer to; a task file or
   template named only through a Jinja expression (``file: "{{ exporter.name }}.yml"``) counts for every entry point
   that has such a templated name. Comments do not count.
4. Where both give a default they are the same value after YAML loading, type included (``1`` is not ``1.0`` nor
   ``true``); a Jinja-templated default is the same string.
5. A non-templated value of ``defaults/main.yml`` is also the option's spec ``default`` in every entry point that
   lists the option (a templated one is described in words instead: its value depends on the plan or the inventory).
6. Argument validation does not set defaults (ansible-core 2.19), so a spec ``default`` is only true if something
   else applies it: ``defaults/main.yml`` for the role's own variables. The one other allowed source is the plan:
   the preflight role's ``aic_*`` inputs (its schema entry point ``inputs``) are defaulted by the aic.stack.plan
   action from ``module_utils/plan.DEFAULTS`` (an empty string means the default, which is why they are not in
   ``defaults/main.yml``), and their spec default must equal it. Any other option with a spec ``default`` and no ``defaults/main.yml`` entry fails.
7. Every option (sub-options included) has a ``type``; ``raw`` only where a reason is recorded in ``RAW_REASONS``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS as PLAN_DEFAULTS

ROLES_DIR = Path(__file__).resolve().parents[3] / "roles"
ROLES = sorted(p.name for p in ROLES_DIR.iterdir() if (p / "tasks").is_dir())

# Roles allowed to type options ``raw``, and why (none: every option has its real type).
RAW_REASONS: dict[str, str] = {}

# Entry points that are a schema, not something to run (no tasks file), and why.
SCHEMA_ENTRY_POINTS = {
    ("preflight", "inputs"): (
        "the aic_* inputs, typed: the aic.stack.plan action validates them with ArgumentSpecValidator after the "
        "empty-means-default step; as a role entry point, Ansible's validation would refuse '' (the default) for an int"
    ),
}

# Internal roles (prometheus-community's ``_common`` pattern; ansible-lint's role-name rule refuses the leading
# underscore, so the name says it): included by other roles with ``tasks_from`` and explicit ``_<role>_*`` variables,
# never run on their own, hence no ``main``. Why each one exists.
INTERNAL_ROLES = {
    "exporter": (
        "the image and the container of one exporter, with the one rescue of every exporter: the node_exporter and "
        "amd_metrics_exporter roles include its image and run entry points"
    ),
}

# A file name built by Jinja: "{{ x.name }}.yml", "Dockerfile.{{ x }}.j2".
TEMPLATED_NAME = re.compile(r"\{\{[^}]*\}\}[\w.-]*\.(?:ya?ml|j2)\b")


def _load(path: Path):
    return yaml.safe_load(path.read_text()) if path.is_file() else None


def _defaults(role: str) -> dict:
    return _load(ROLES_DIR / role / "defaults" / "main.yml") or {}


def _specs(role: str) -> dict:
    return (_load(ROLES_DIR / role / "meta" / "argument_specs.yml") or {}).get("argument_specs") or {}


def _options(entry: dict) -> dict:
    return entry.get("options") or {}


def _strings(node):
    """Every string of a loaded YAML document, keys included (so comments never count)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from _strings(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item)


def _text_of(value) -> str:
    return "\n".join(_strings(value))


def _text(path: Path) -> str:
    if path.suffix in (".yml", ".yaml"):
        return _text_of(_load(path))
    return re.sub(r"\{#.*?#\}", "", path.read_text(), flags=re.S)


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _templated(value) -> bool:
    return any("{{" in s or "{%" in s for s in _strings(value))


def _names_in(text: str, names) -> set:
    """The names (variables, file names) that occur in text as whole words.

    ``name=value`` (an extra variable passed on a command line) sets the name, it does not read it.
    """
    return {n for n in names if re.search(rf"(?<![\w.-]){re.escape(n)}(?![\w-]|=[^=])", text)}


def _read_by_entry_points(role: str) -> dict:
    """{entry point: the defaults/main.yml variables its tasks read} (rule 3)."""
    root = ROLES_DIR / role
    defaults = _defaults(role)
    tasks = {p.name: p for p in sorted((root / "tasks").glob("*.yml"))}
    templates = {p.name: p for p in sorted((root / "templates").rglob("*")) if p.is_file()}
    files = {**tasks, **{f"templates/{n}": p for n, p in templates.items()}}
    texts = {key: _text(path) for key, path in files.items()}
    handlers = [_text(p) for p in sorted((root / "handlers").glob("*.yml"))]
    # vars/ is loaded for every entry point; its variables read defaults when they are read themselves.
    role_vars = {}
    for path in sorted((root / "vars").glob("*.yml")):
        role_vars.update(_load(path) or {})
    known = {**role_vars, **defaults}

    def named(text):
        found = {f for f in tasks if _names_in(text, [f])}
        return found | {f"templates/{n}" for n in templates if _names_in(text, [n])}

    named_anywhere = set().union(*(named(t) for t in texts.values())) if texts else set()
    entry_points = {f"{entry}.yml" for entry in _specs(role)}
    by_name_only = {f for f in files if f not in named_anywhere and f not in entry_points}

    result = {}
    for entry in _specs(role):
        scope, todo = set(), [f"{entry}.yml"] if f"{entry}.yml" in tasks else []
        while todo:
            current = todo.pop()
            if current in scope:
                continue
            scope.add(current)
            todo.extend(named(texts[current]) - scope)
            if TEMPLATED_NAME.search(texts[current]):
                todo.extend(by_name_only - scope)
        read = _names_in("\n".join([texts[f] for f in scope] + handlers), known)
        # A variable built from other variables reads them too.
        while True:
            more = _names_in("\n".join(_text_of(known[n]) for n in read), known) - read
            if not more:
                break
            read |= more
        result[entry] = read & set(defaults)
    return result


def _walk_options(options: dict, path: str = ""):
    for name, option in options.items():
        yield f"{path}{name}", option
        yield from _walk_options(option.get("options") or {}, f"{path}{name}.")


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_specs_with_main_and_a_task_file_per_entry_point(role):
    specs = _specs(role)
    assert (ROLES_DIR / role / "meta" / "argument_specs.yml").is_file(), f"{role}: no meta/argument_specs.yml"
    assert "main" in specs or role in INTERNAL_ROLES, f"{role}: argument_specs.yml has no entry point main"
    assert "main" not in specs or role not in INTERNAL_ROLES, f"{role}: an internal role has no main"
    missing = [e for e in specs if not (ROLES_DIR / role / "tasks" / f"{e}.yml").is_file()]
    assert not [e for e in missing if (role, e) not in SCHEMA_ENTRY_POINTS], (
        f"{role}: entry points without tasks/<entry>.yml: {missing}"
    )
    # A schema entry point has no tasks file (tasks_from it fails plainly instead of validating).
    schemas = [e for (r, e) in SCHEMA_ENTRY_POINTS if r == role]
    assert not [e for e in schemas if e not in missing], f"{role}: schema entry points with tasks: {schemas}"


@pytest.mark.parametrize("role", ROLES)
def test_defaults_are_prefixed_with_the_role_name(role):
    wrong = [name for name in _defaults(role) if not name.startswith(f"{role}_")]
    assert not wrong, f"{role}: defaults/main.yml variables not named {role}_*: {wrong}"


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_an_option_of_the_entry_points_that_read_it(role):
    specs = _specs(role)
    problems = []
    for name in _defaults(role):
        if not any(name in _options(entry) for entry in specs.values()):
            problems.append(f"{name}: in no entry point")
    for entry, read in _read_by_entry_points(role).items():
        problems += [
            f"{name}: read by {entry} but not its option" for name in sorted(read - set(_options(specs[entry])))
        ]
    assert not problems, f"{role}: " + "; ".join(problems)


@pytest.mark.parametrize("role", ROLES)
def test_spec_defaults_equal_defaults_main(role):
    defaults = _defaults(role)
    problems = []
    for entry_name, entry in _specs(role).items():
        for name, option in _options(entry).items():
            if name not in defaults:
                continue
            if "default" in option:
                if not _same(option["default"], defaults[name]):
                    problems.append(
                        f"{entry_name}.{name}: spec default {option['default']!r} != defaults/main.yml {defaults[name]!r}"
                    )
            elif not _templated(defaults[name]):
                problems.append(f"{entry_name}.{name}: no spec default (defaults/main.yml: {defaults[name]!r})")
    assert not problems, f"{role}: " + "; ".join(problems)


@pytest.mark.parametrize("role", ROLES)
def test_spec_defaults_are_applied_by_defaults_main_or_the_plan(role):
    defaults = _defaults(role)
    problems = []
    for entry_name, entry in _specs(role).items():
        for name, option in _options(entry).items():
            if "default" not in option or name in defaults:
                continue
            if (role, entry_name) == ("preflight", "inputs") and name in PLAN_DEFAULTS:
                if not _same(option["default"], PLAN_DEFAULTS[name]):
                    problems.append(f"{entry_name}.{name}: spec default != plan DEFAULTS {PLAN_DEFAULTS[name]!r}")
                continue
            problems.append(f"{entry_name}.{name}: spec default {option['default']!r} that nothing applies")
    assert not problems, f"{role}: " + "; ".join(problems)


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_type_and_raw_only_with_a_reason(role):
    untyped, raw = [], []
    for entry_name, entry in _specs(role).items():
        for name, option in _walk_options(_options(entry)):
            if "type" not in option:
                untyped.append(f"{entry_name}.{name}")
            elif option["type"] == "raw":
                raw.append(f"{entry_name}.{name}")
    assert not untyped, f"{role}: options without a type: {untyped}"
    assert not raw or role in RAW_REASONS, f"{role}: options typed raw with no reason in RAW_REASONS: {raw}"


def test_the_analysis_follows_includes_templates_vars_and_templated_names():
    # Guards rule 3 against reading nothing: known reads through each way a variable reaches an entry point.
    monitoring = _read_by_entry_points("monitoring")
    # server.yml -> import grafana.yml -> the grafana role's input grafana_volume
    assert "monitoring_grafana_volume" in monitoring["server"]
    # server.yml -> the prometheus role's input prometheus_slab_free_ratio_alert
    assert "monitoring_slab_free_ratio_alert" in monitoring["server"]
    # exporters.yml -> import decide.yml -> the exporter roles' install inputs
    assert "monitoring_image_pull" in monitoring["exporters"]
    assert monitoring["report"] == set()
    prometheus = _read_by_entry_points("prometheus")
    # configure.yml -> template aic-rules.yml.j2
    assert "prometheus_slab_free_ratio_alert" in prometheus["configure"]
    # main.yml -> import run.yml
    assert {"prometheus_volume", "prometheus_retention"} <= prometheus["main"]
    assert "prometheus_volume" not in prometheus["configure"]
    # amd_metrics_exporter's run.yml -> import configure.yml; its install only pulls
    amd = _read_by_entry_points("amd_metrics_exporter")
    assert "amd_metrics_exporter_image_pull" in amd["install"]
    assert "amd_metrics_exporter_image_pull" not in amd["run"]
    health = _read_by_entry_points("health")
    assert {"health_cluster_nodes", "health_cluster_exporters"} <= health["cluster"]
    assert "health_cluster_nodes" not in health["main"]
    # The tasks read health_endpoints only; it is built from health_prometheus_url, built from health_monitoring_host.
    assert {"health_prometheus_url", "health_monitoring_host"} <= health["main"]
    # log_stream's vars/main.yml reads log_stream_job_id for main only (stop does not read that variable).
    log_stream = _read_by_entry_points("log_stream")
    assert "log_stream_job_id" in log_stream["main"]
    assert "log_stream_job_id" not in log_stream["stop"]
    # image_build's slurm.yml passes image_build_where=host to the job: that sets the variable, it does not read it.
    assert "image_build_where" not in _read_by_entry_points("image_build")["slurm"]
