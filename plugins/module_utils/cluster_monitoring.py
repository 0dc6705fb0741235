# Copyright: aic.stack contributors
# Apache-2.0
"""One Prometheus for the job: which host runs it, what it scrapes on every node, and what health expects.

Pure functions over the per-host plans (``aic_plan``) and the per-node exporter decision (the fact
``monitoring_exporters_running``: names of the exporters that run on the node). Ansible's ``hostvars`` is read as
a plain mapping of host name to variables, so unit tests pass dicts.

Targets: on the monitoring host's own node (same host, same Docker engine) Prometheus runs on the stack's bridge
network and scrapes containers by name on their own ports, exactly like the single-node stack; every other node is
scraped at ``<aic_advertise_address>:<published port>``. Every target carries ``node`` (inventory host name), and
vLLM targets ``gpu`` (the instance's GPU id from the plan, empty on cpu).
"""

from __future__ import annotations

import ipaddress
import re

from ansible_collections.aic.stack.plugins.module_utils.plan import DEFAULTS, PlanError, build_plan

# The fact each node publishes after its exporter decision (roles/monitoring/tasks/exporters.yml).
RUNNING_FACT = "monitoring_exporters_running"
# Jobs scraped but not required by health: NIXL serves telemetry only from the worker that won the port, and only
# after its first transfer.
OPTIONAL_JOBS = ("nixl",)
# Stack jobs per node, in the order they appear in prometheus.yml (exporters follow, in plan order).
_PROMETHEUS_JOB = "prometheus"


class MonitoringError(ValueError):
    """Inconsistent cluster monitoring inputs; the message names the host and the variable."""


def _get(mapping, key, default=None):
    try:
        return mapping[key]
    except (KeyError, TypeError):
        return default


def _host_vars(hostvars, host):
    if host not in hostvars:
        raise MonitoringError(f"{host!r} is not a host of the inventory")
    return hostvars[host]


def plan_of(hostvars, host):
    """The host's ``aic_plan``; a host whose preflight did not run in this play gets its plan built from its aic_*
    variables (validated the same way)."""
    variables = _host_vars(hostvars, host)
    plan = _get(variables, "aic_plan")
    if plan:
        return plan
    inputs = {name: variables[name] for name in DEFAULTS if name in variables}
    try:
        return build_plan(inputs)[0]
    except PlanError as exc:
        raise MonitoringError(f"{host}: invalid input: {exc}") from exc


def node_plan(hostvars, host):
    """The ``aic_plan`` the host's preflight published (MonitoringError naming the host when there is none)."""
    variables = _host_vars(hostvars, host)
    plan = _get(variables, "aic_plan")
    if not plan:
        raise MonitoringError(f"{host}: no aic_plan (run the preflight role on every node first)")
    return plan


def job_host(hostvars, nodes, section, default="", *, within_job=False):
    """The inventory host that runs the job's one service of the plan's ``section`` (``monitoring``: Prometheus;
    ``router``: the vllm-router): the nodes' ``plan[section]["host"]`` (``aic_<section>_host``; all that set it must
    agree), else ``default`` (the playbook passes ``groups['aic_nodes'] | first``), else the first node. It must be a
    host of the inventory and, ``within_job``, one of ``nodes``."""
    field = f"aic_{section}_host"
    nodes = list(nodes)
    requested = {}
    for host in nodes:
        plan = _get(_host_vars(hostvars, host), "aic_plan") or {}
        value = _get(_get(plan, section, {}), "host", "")
        if value:
            requested.setdefault(value, []).append(host)
    if len(requested) > 1:
        detail = "; ".join(f"{value!r} on {', '.join(hosts)}" for value, hosts in sorted(requested.items()))
        raise MonitoringError(f"{field}: the nodes disagree on the job's {section} host ({detail})")
    if requested:
        host = next(iter(requested))
    elif default:
        host = default
    elif nodes:
        host = nodes[0]
    else:
        raise MonitoringError(f"{field}: no nodes, and no {section} host given")
    if host not in hostvars:
        raise MonitoringError(f"{field}: {host!r} is not a host of the inventory")
    if within_job and host not in nodes:
        raise MonitoringError(f"{field}: {host!r} is not a node of the job ({', '.join(nodes)})")
    return host


def job_monitoring_host(hostvars, nodes, default=""):
    """The inventory host that runs the job's Prometheus: the nodes' ``aic_monitoring_host`` (all that set it must
    agree), else ``default`` (the playbook passes ``groups['aic_nodes'] | first``), else the first node; any host of
    the inventory."""
    return job_host(hostvars, nodes, "monitoring", default)


def job_prometheus_url(hostvars, monitoring_host):
    """Base URL of the job's Prometheus: the monitoring host's published Prometheus endpoint (its advertise
    address and aic_prometheus_port)."""
    return plan_of(hostvars, monitoring_host)["endpoints"]["prometheus"]


def is_local(host, monitoring_host):
    """Whether a container on ``monitoring_host`` (Prometheus, or the router) reaches ``host``'s containers by name on
    its own bridge network (same host, same engine)."""
    return host == monitoring_host


def published_address(host, plan, reader, reader_role="monitoring host"):
    """The address part of ``<address>:<port>`` for a node's published ports (IPv6 bracketed), checked to be
    reachable from ``reader``, another host (the ``reader_role``: the monitoring host, the router host)."""
    advertise = plan["advertise_address"]
    bind = plan["bind_address"]
    if _unreachable(advertise):
        raise MonitoringError(
            f"{host}: aic_advertise_address is {advertise!r} (empty = aic_bind_address), which the {reader_role} "
            f"{reader} cannot reach; set it to the name or IP address other hosts use for {host}"
        )
    try:
        loopback = ipaddress.ip_address(bind).is_loopback
    except ValueError:
        loopback = False
    if loopback and bind != advertise:
        raise MonitoringError(
            f"{host}: aic_bind_address {bind} publishes the services on {host}'s loopback only, out of reach of the "
            f"{reader_role} {reader}; set aic_bind_address (0.0.0.0, or the address of aic_advertise_address)"
        )
    return f"[{advertise}]" if ":" in advertise else advertise


def _unreachable(address):
    """The single-host default (every host is 127.0.0.1 to itself, so it can only mean the monitoring host) and
    unspecified addresses. Other loopback aliases (127.0.0.2, ...) are taken as deliberate: test beds put several
    "nodes" on one machine that way."""
    if not address or address.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_unspecified or ip in (ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1"))


def _split(target):
    host, _dummy, port = str(target).rpartition(":")
    return host, port


def _running(variables, plan):
    names = _get(variables, RUNNING_FACT)
    if not names:
        return []
    names = [str(name) for name in names]
    return [e for e in plan["monitoring"]["exporters"] if e["name"] in names]


def _node_targets(hostvars, host, monitoring_host):
    """[(job, target, labels)] of one node, in prometheus.yml order."""
    variables = _host_vars(hostvars, host)
    plan = node_plan(hostvars, host)
    local = is_local(host, monitoring_host)
    address = None if local else published_address(host, plan, monitoring_host)
    gpus = {f"{i['name']}:{i['port']}": i["gpu"] for i in plan["vllm_instances"]}
    jobs = [j for j in plan["prometheus"]["jobs"] if j["job"] != _PROMETHEUS_JOB]
    jobs += list(plan["monitoring"]["jobs"]) + _running(variables, plan)
    out = []
    for job in jobs:
        for target in job["targets"]:
            labels = {"node": host}
            if job["job"] == "vllm":
                gpu = gpus.get(target)
                labels["gpu"] = "" if gpu is None else str(gpu)
            if not local:
                # Every service publishes its container port unchanged on the node (plan ports).
                target = f"{address}:{_split(target)[1]}"
            out.append((job["job"], target, labels))
    return out


def router_target(hostvars, hosts, monitoring_host):
    """``(job, target, labels)`` of the job's vllm-router metrics (aic_router_metrics_port on the router host, as
    ``monitoring_host`` reaches it), or None when the job runs no router (aic_router_enabled false on its first node).
    The router host is decided as the router's own playbook decides it (aic_router_host, else the first node)."""
    hosts = list(dict.fromkeys(hosts))
    if not hosts or not _get(_get(node_plan(hostvars, hosts[0]), "router", {}), "enabled", False):
        return None
    host = job_host(hostvars, hosts, "router", hosts[0], within_job=True)
    plan = node_plan(hostvars, host)
    port = plan["router"]["metrics_port"]
    if is_local(host, monitoring_host):
        target = f"{plan['router']['container']}:{port}"
    else:
        target = f"{published_address(host, plan, monitoring_host)}:{port}"
    return "router", target, {"node": host}


def cluster_scrape_jobs(hostvars, hosts, monitoring_host):
    """Scrape jobs of the job's Prometheus for ``aic.stack.prometheus_config``: every target of every node in
    ``hosts`` grouped per job, one static group per (node, labels), plus Prometheus itself on the monitoring host and
    the job's router (job ``router``) when it runs one.

    A node's exporters are those of its ``monitoring_exporters_running`` fact (none when it is absent).
    """
    hosts = list(dict.fromkeys(hosts))
    mon_plan = plan_of(hostvars, monitoring_host)
    own = next(j for j in mon_plan["prometheus"]["jobs"] if j["job"] == _PROMETHEUS_JOB)
    order = [_PROMETHEUS_JOB]
    groups = {_PROMETHEUS_JOB: [{"targets": list(own["targets"]), "labels": {"node": monitoring_host}}]}
    targets = [t for host in hosts for t in _node_targets(hostvars, host, monitoring_host)]
    router = router_target(hostvars, hosts, monitoring_host)
    for job, target, labels in targets + ([router] if router else []):
        if job not in groups:
            order.append(job)
            groups[job] = []
        same = next((g for g in groups[job] if g["labels"] == labels), None)
        if same is None:
            groups[job].append({"targets": [target], "labels": labels})
        elif target not in same["targets"]:
            same["targets"].append(target)
    return [{"job": job, "groups": groups[job]} for job in order]


def cluster_expected_targets(hostvars, hosts, monitoring_host=None, exporters=True):
    """Label matchers for ``aic.stack.prometheus_targets`` (``expected_targets``): every required target of every
    node in ``hosts`` (vLLM per GPU, LMCache, and with ``exporters`` the exporters that run there), plus Prometheus
    itself when ``monitoring_host`` is given. NIXL telemetry is scraped but not required."""
    out = []
    if monitoring_host:
        out.append({"job": _PROMETHEUS_JOB, "node": monitoring_host})
    exporter_jobs = set()
    for host in dict.fromkeys(hosts):
        plan = node_plan(hostvars, host)
        exporter_jobs = {e["job"] for e in plan["monitoring"]["exporters"]}
        # Targets are resolved against the node itself: only the labels matter here, not the addresses.
        for job, _target, labels in _node_targets(hostvars, host, host):
            if job in OPTIONAL_JOBS or (not exporters and job in exporter_jobs):
                continue
            matcher = {"job": job, **labels}
            if matcher not in out:
                out.append(matcher)
    return out


def node_expected_targets(plan, node):
    """What one node's health check expects of the job's Prometheus: Prometheus itself (wherever it runs), every
    vLLM instance of the node with its GPU, and the node's LMCache. An empty ``node`` (a host checking a stack from
    outside the job's nodes) matches by job and GPU only."""
    here = {"node": node} if node else {}
    out = [{"job": _PROMETHEUS_JOB}]
    for instance in plan["vllm_instances"]:
        out.append({"job": "vllm", **here, "gpu": "" if instance["gpu"] is None else str(instance["gpu"])})
    out.append({"job": "lmcache", **here})
    return out


def local_builds(plan, part):
    """Monitoring images this host builds FROM the base image (so it needs ``release_base_ref``).

    ``part`` is ``server`` (Prometheus, on the monitoring host) or ``exporters`` (on every node). An image given in
    the plan (the rocm flavour's upstream images) is never built.
    """
    if part == "server":
        return [] if plan["images"]["prometheus"]["image"] else ["prometheus"]
    if part != "exporters":
        raise MonitoringError(f"local_builds: part must be 'server' or 'exporters', got {part!r}")
    if plan["monitoring"]["mode"] == "prometheus_only":
        return []
    return [e["name"] for e in plan["monitoring"]["exporters"] if e["enabled"] and e["build_name"] and not e["image"]]


# The fact each node publishes: the mount point of the filesystem that holds its L2 slab directory.
SLAB_MOUNT_FACT = "monitoring_slab_mountpoint"


def cluster_slab_mountpoints(hostvars, hosts):
    """The distinct slab mount points of ``hosts`` (their ``monitoring_slab_mountpoint`` facts), ``["/"]`` if none."""
    out = []
    for host in dict.fromkeys(hosts):
        value = _get(_host_vars(hostvars, host), SLAB_MOUNT_FACT)
        if value and str(value).strip() not in out:
            out.append(str(value).strip())
    return out or ["/"]


def _promql_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def label_matcher(values, name):
    """A PromQL label matcher for one value (``name="v"``) or several (``name=~"a|b"``, regex-escaped)."""
    values = list(dict.fromkeys(str(v) for v in values if str(v)))
    if not values:
        raise MonitoringError(f"label_matcher: no value for label {name}")
    if len(values) == 1:
        return f"{name}={_promql_string(values[0])}"
    return f"{name}=~{_promql_string('|'.join(re.escape(v) for v in values))}"


def planned_nodes(hostvars, hosts):
    """The hosts that have an ``aic_plan`` (a node whose preflight failed has none and cannot be scraped)."""
    return [host for host in dict.fromkeys(hosts) if host in hostvars and _get(hostvars[host], "aic_plan")]


# The answers of aic.stack.docker_capability to "may a --pid=host container be created here".
PID_HOST_ALLOWED = "allowed"


def enabled_exporters(monitoring):
    """The exporters the plan enables on a node (the plan's ``monitoring`` section): none with the mode
    ``prometheus_only``, else those marked enabled (the flavour decides: the AMD exporter only on rocm)."""
    if _get(monitoring, "mode") == "prometheus_only":
        return []
    exporters = _get(monitoring, "exporters")
    if not isinstance(exporters, list):
        raise MonitoringError("monitoring_enabled_exporters: the plan's monitoring.exporters is not a list")
    for exporter in exporters:
        if not _get(exporter, "name"):
            raise MonitoringError(f"monitoring_enabled_exporters: an exporter without a name: {exporter!r}")
    return [dict(exporter) for exporter in exporters if _get(exporter, "enabled")]


def exporter_decision(monitoring, images, capability=None):
    """Which enabled exporters a node runs, from the images its engine has and its answer to the host-PID probe.

    ``images`` maps an exporter's name to its image, for the exporters whose image is on the engine (the others are
    skipped and reported by the exporter roles). ``capability`` is what ``aic.stack.docker_capability`` returned:
    None (or a skipped task's result) when the engine was not asked. Returns:

    - ``probe_image``: the image to ask the engine with (the first host-PID exporter's that is there), when it was
      not asked yet and one is needed; else ``""``.
    - ``pid_host``: the engine's answer (``allowed`` when it was not asked) and ``message``, the daemon's words.
    - ``planned``: the exporters that run (their plan entries): all those with an image when host PID is allowed,
      else those that need no host PID. ``refused``: names of the host-PID exporters the engine refused.
    """
    if not isinstance(images, dict):
        raise MonitoringError(f"monitoring_exporter_decision: images must be a dict of name to image, got {images!r}")
    available = [e for e in enabled_exporters(monitoring) if e["name"] in images]
    host_pid = [e for e in available if _get(e, "pid_host")]
    asked = bool(_get(capability, "pid_host"))
    answer = str(_get(capability, "pid_host")) if asked else PID_HOST_ALLOWED
    allowed = answer == PID_HOST_ALLOWED
    return {
        "probe_image": images[host_pid[0]["name"]] if host_pid and capability is None else "",
        "pid_host": answer,
        "message": str(_get(capability, "message") or "") if asked else "",
        "planned": available if allowed else [e for e in available if not _get(e, "pid_host")],
        "refused": [] if allowed else [e["name"] for e in host_pid],
    }
