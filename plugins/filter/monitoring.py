# Copyright: aic.stack contributors
# Apache-2.0
"""Filters for the job's one Prometheus (the logic lives in module_utils/cluster_monitoring.py)."""

from __future__ import annotations

from ansible_collections.aic.stack.plugins.module_utils import cluster_monitoring as cm
from ansible_collections.aic.stack.plugins.plugin_utils.filters import as_filter


def cluster_scrape_jobs(hostvars, hosts, monitoring_host):
    """Scrape jobs (for prometheus_config) of every node's targets, with node/gpu labels."""
    return cm.cluster_scrape_jobs(hostvars, hosts, monitoring_host)


def cluster_expected_targets(hostvars, hosts, monitoring_host=None, exporters=True):
    """Label matchers (prometheus_targets expected_targets) of every required target of ``hosts``."""
    return cm.cluster_expected_targets(hostvars, hosts, monitoring_host, exporters=exporters)


def node_expected_targets(plan, node):
    """Label matchers of one node's stack targets (vLLM per GPU, LMCache) plus Prometheus itself."""
    return cm.node_expected_targets(plan, node)


def job_monitoring_host(hostvars, nodes, default=""):
    """The inventory host of the job's Prometheus (aic_monitoring_host, else ``default``, else the first node)."""
    return cm.job_monitoring_host(hostvars, nodes, default)


def job_prometheus_url(hostvars, monitoring_host):
    """Base URL of the job's Prometheus (the monitoring host's published endpoint)."""
    return cm.job_prometheus_url(hostvars, monitoring_host)


def monitoring_local_builds(plan, part):
    """Monitoring images built on the base image here (``server``: Prometheus; ``exporters``: node-exporter)."""
    return cm.local_builds(plan, part)


def cluster_slab_mountpoints(hostvars, hosts):
    """The distinct mount points of the nodes' L2 slab filesystems (for the slab-disk alert)."""
    return cm.cluster_slab_mountpoints(hostvars, hosts)


def prometheus_label_matcher(values, name):
    """``name="v"`` for one value, ``name=~"a|b"`` for several (PromQL)."""
    return cm.label_matcher(values, name)


def monitoring_planned_nodes(hostvars, hosts):
    """The hosts that have an aic_plan (the nodes the job's Prometheus can scrape)."""
    return cm.planned_nodes(hostvars, hosts)


def monitoring_enabled_exporters(monitoring):
    """The exporters the plan's monitoring section enables on a node (none in prometheus_only mode)."""
    return cm.enabled_exporters(monitoring)


def monitoring_exporter_decision(monitoring, images, capability=None):
    """Which exporters a node runs (images on its engine, its host-PID answer), and the image to probe with."""
    return cm.exporter_decision(monitoring, images, capability)


class FilterModule:
    def filters(self):
        return {
            func.__name__: as_filter(func, cm.MonitoringError)
            for func in (
                cluster_scrape_jobs,
                cluster_expected_targets,
                node_expected_targets,
                job_monitoring_host,
                job_prometheus_url,
                monitoring_local_builds,
                cluster_slab_mountpoints,
                prometheus_label_matcher,
                monitoring_planned_nodes,
                monitoring_enabled_exporters,
                monitoring_exporter_decision,
            )
        }
