# Copyright: aic.stack contributors
# Apache-2.0
"""The job's one vllm-router: which node runs it, its workers, its command and its container spec.

Pure functions over the per-host plans (``aic_plan``, section ``router``); Ansible's ``hostvars`` is read as a plain
mapping of host name to variables, so unit tests pass dicts. The router host and the reachability of the other nodes
are decided exactly as for the job's Prometheus (module_utils/cluster_monitoring.py): on the router host's own node
the router runs on the stack's bridge network and reaches the vLLM containers by name on their own ports; every other
node is reached at ``<aic_advertise_address>:<published port>``.

The flags are those of vllm-router 0.1.17 (``vllm-router --help``), the plan's default ``aic_router_version``.
"""

from __future__ import annotations

from ansible_collections.aic.stack.plugins.module_utils import cluster_monitoring as cm

# Where the router image installs vllm-router (a virtual environment of aic_router_version).
ROUTER_BIN = "/opt/aic-router/bin/vllm-router"
# The container's healthcheck: GET /readiness answers 200 while at least one worker is healthy and 503 when none is.
# Not /health: it answers 503 as soon as any one worker is down, and one vLLM of the job restarting would mark the
# router unhealthy. Standard library only, no site packages (-S). Arguments: URL, timeout in seconds.
ROUTER_HEALTHCHECK_PROBE = (
    "import sys,urllib.request as r;sys.exit(0 if r.urlopen(sys.argv[1],timeout=float(sys.argv[2])).status==200 else 1)"
)
ROUTER_HEALTHCHECK = {"interval": 5, "timeout": 3, "retries": 3, "start_period": 600}
ROUTER_ENV = {"RUST_LOG": "info"}


class RouterError(ValueError):
    """Inconsistent router inputs; the message names the host and the variable."""


def _checked(func, *args, **kwargs):
    """``func``'s result; the errors of the shared cluster helpers are the router's errors here."""
    try:
        return func(*args, **kwargs)
    except cm.MonitoringError as exc:
        raise RouterError(str(exc)) from exc


def job_router_host(hostvars, nodes, default=""):
    """The node of the job that runs the router: the nodes' ``aic_router_host`` (all that set it must agree), else
    ``default`` (the playbook passes ``groups['aic_nodes'] | first``), else the first node (``localhost`` with the
    local inventory). It must be one of ``nodes``."""
    return _checked(cm.job_host, hostvars, nodes, "router", default, within_job=True)


def router_workers(hostvars, nodes, router_host):
    """The worker URLs of the router on ``router_host``: every vLLM instance of every node of ``nodes``, in node and
    instance order. The router host's own instances by container name (``http://<stack>-vllm-1:8001``), every other
    node's at its advertise address and published port (``http://<aic_advertise_address>:8001``)."""
    workers = {}
    for host in dict.fromkeys(nodes):
        plan = _checked(cm.node_plan, hostvars, host)
        if cm.is_local(host, router_host):
            address = None
        else:
            address = _checked(cm.published_address, host, plan, router_host, "router host")
        for instance in plan["vllm_instances"]:
            url = f"http://{address or instance['name']}:{instance['port']}"
            if url in workers:
                raise RouterError(
                    f"{host}: aic_advertise_address: its vLLM instance {instance['name']} would be the router's worker "
                    f"{url}, which is already {workers[url]}'s (two nodes advertise the same address)"
                )
            workers[url] = host
    return list(workers)


def router_command(router, workers):
    """The vllm-router argv for the plan's ``router`` section and ``workers`` (router_workers): listening on every
    address of its container (the API and the metrics), probing every worker by itself."""
    workers = [str(url) for url in workers]
    if not workers:
        raise RouterError("aic_router_enabled: the router has no worker (no node of the job has a vLLM instance)")
    health = router["health"]
    return [
        ROUTER_BIN,
        "--host",
        "0.0.0.0",
        "--port",
        str(router["port"]),
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        str(router["metrics_port"]),
        "--policy",
        router["policy"],
        "--worker-urls",
        *workers,
        "--health-check-interval-secs",
        str(health["interval_s"]),
        "--health-check-timeout-secs",
        str(health["timeout_s"]),
        "--health-failure-threshold",
        str(health["failure_threshold"]),
        "--health-success-threshold",
        str(health["success_threshold"]),
        "--retry-max-retries",
        str(router["retry_max_retries"]),
    ]


def router_healthcheck(port):
    """docker_container's healthcheck of the router listening on ``port``: ready while it has a healthy worker. The
    start period is vllm-router's own wait for its workers at start (--worker-startup-timeout-secs, 600 s), during
    which it does not listen yet."""
    check = ROUTER_HEALTHCHECK
    url = f"http://127.0.0.1:{int(port)}/readiness"
    probe = ["python3", "-S", "-c", ROUTER_HEALTHCHECK_PROBE, url, str(check["timeout"])]
    return {
        "test": ["CMD", *probe],
        "interval": f"{check['interval']}s",
        "timeout": f"{check['timeout']}s",
        "retries": check["retries"],
        "start_period": f"{check['start_period']}s",
    }


def router_spec(plan, workers, image=""):
    """docker_container parameters of the job's router on the router host, from that host's ``plan`` and the
    ``workers`` (router_workers): on the stack network (it reaches its own node's vLLM containers by name), its API
    and metrics ports published on aic_bind_address. ``image``: the router image to run; empty: the plan's
    ``<aic_router_image_name>:<aic_router_version>``."""
    router = plan["router"]
    if not router["enabled"]:
        raise RouterError("aic_router_enabled: false, the plan has no router to run")
    port, metrics_port = int(router["port"]), int(router["metrics_port"])
    publish = plan["publish_address"]
    return {
        "name": router["container"],
        "image": image or f"{router['image']}:{router['version']}",
        "port": port,
        "metrics_port": metrics_port,
        "command": router_command(router, workers),
        "env": dict(ROUTER_ENV),
        "network": plan["network"],
        "published_ports": [f"{publish}:{port}:{port}", f"{publish}:{metrics_port}:{metrics_port}"],
        "restart_policy": "unless-stopped",
        "labels": {"ai.aic.stack": plan["stack_name"], "ai.aic.service": "router"},
        # SIGTERM: vllm-router stops accepting and finishes its in-flight requests (graceful shutdown); docker stop
        # waits aic_router_drain_timeout_s for that before SIGKILL.
        "stop_signal": "SIGTERM",
        "stop_timeout": int(router["drain_timeout_s"]),
        "healthcheck": router_healthcheck(port),
    }
