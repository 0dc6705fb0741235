"""playbooks/monitoring.yml and the roles it drives: one Prometheus for the job, exporters on every node."""

from __future__ import annotations

import pathlib

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "monitoring.yml"
ROLE = REPO / "roles" / "monitoring"


def plays():
    return yaml.safe_load(PLAYBOOK.read_text())


def includes(play):
    return [
        (t["ansible.builtin.include_role"]["name"], t["ansible.builtin.include_role"].get("tasks_from", "main"))
        for t in play["tasks"]
        if "ansible.builtin.include_role" in t
    ]


def test_exporters_on_every_node_then_prometheus_on_the_monitoring_host_then_the_full_mode_report():
    nodes, server, report = plays()
    assert nodes["hosts"] == "aic_nodes"
    assert includes(nodes) == [("preflight", "main"), ("release", "main"), ("monitoring", "exporters")]
    assert server["hosts"] == "aic_monitoring"
    assert includes(server) == [("preflight", "main"), ("release", "main"), ("monitoring", "server")]
    assert report["hosts"] == "aic_nodes"
    assert includes(report) == [("monitoring", "report")]


def test_every_node_is_planned_without_a_gpu_allocation():
    for play in plays()[:2]:
        # First the end of deploy.yml's no-op fast path, then the preflight: once per run (no plan yet: the playbook
        # runs alone), without the runtime checks.
        first, preflight = play["tasks"][:2]
        assert first["ansible.builtin.meta"] == "end_play"
        assert first["when"] == "aic_deploy_unchanged | default(false)"
        assert preflight["ansible.builtin.include_role"]["name"] == "preflight"
        assert preflight["vars"]["preflight_runtime"] is False
        assert preflight["when"] == "aic_plan is not defined"


def test_the_monitoring_host_is_named_by_the_filter_and_scrapes_every_planned_node():
    nodes = plays()[0]
    add = nodes["tasks"][-1]["ansible.builtin.add_host"]  # last: add_host joins the play's hosts
    assert "aic.stack.job_monitoring_host(ansible_play_hosts_all, groups['aic_nodes'] | first)" in add["name"]
    assert add["groups"] == "aic_monitoring"
    assert "aic.stack.monitoring_planned_nodes(ansible_play_hosts_all)" in add["monitoring_scrape_nodes"]


def test_the_base_image_is_resolved_only_where_a_monitoring_image_is_built_from_it():
    nodes, server, _dummy = plays()
    for play, part in ((nodes, "exporters"), (server, "server")):
        resolve = next(t for t in play["tasks"] if t.get("ansible.builtin.include_role", {}).get("name") == "release")
        assert f"aic_plan | aic.stack.monitoring_local_builds('{part}') | length > 0" in resolve["when"]


def test_the_role_entry_points_have_argument_specs():
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    assert set(specs) == {"main", "exporters", "server", "report"}
    for name in specs:
        assert (ROLE / "tasks" / f"{name}.yml").is_file()
    assert not specs["main"]["options"]["release_base_ref"].get("required", False)


def test_an_exporter_without_its_image_is_skipped_by_name_not_failed():
    image = yaml.safe_load((REPO / "roles" / "exporter" / "tasks" / "image.yml").read_text())
    (block,) = image
    assert block["rescue"], "a missing exporter image must be rescued (skipped), never fail the node"
    names = [t["name"] for t in block["block"]]
    # A given image is looked up first and pulled only when the engine lacks it.
    look, refuse, pull = (names.index(n) for n in names if "given image" in n or "Refuse" in n or "Pull" in n)
    assert look < refuse < pull
    pull_task = block["block"][pull]
    assert "_exporter_image_info.images | length == 0" in pull_task["when"]
    decide = yaml.safe_load((ROLE / "tasks" / "decide.yml").read_text())
    line = next(t for t in decide if t["name"].startswith("Say which exporters this node skips"))
    assert (
        "skipping {{ _monitoring_unavailable | map(attribute='name') | join(', ') }}"
        in line["ansible.builtin.debug"]["msg"]
    )
    # What the exporter roles' helper records is what the monitoring role reads.
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert role_vars["_monitoring_unavailable"] == "{{ exporter_unavailable | default([]) }}"
    assert role_vars["_monitoring_images"] == "{{ exporter_images | default({}) }}"


def test_each_exporter_role_is_included_with_its_inputs_and_only_where_planned():
    decide = yaml.safe_load((ROLE / "tasks" / "decide.yml").read_text())
    run = yaml.safe_load((ROLE / "tasks" / "run_exporters.yml").read_text())
    for tasks, entry, listed in ((decide, "install", "_monitoring_enabled"), (run, "run", "_monitoring_planned")):
        included = [t for t in tasks if "ansible.builtin.include_role" in t]
        assert [t["ansible.builtin.include_role"]["name"] for t in included] == [
            "node_exporter",
            "amd_metrics_exporter",
        ]
        for task in included:
            name = task["ansible.builtin.include_role"]["name"]
            assert task["ansible.builtin.include_role"]["tasks_from"] == entry
            assert task["when"] == f"'{name}' in {listed} | map(attribute='name')"
            assert task["vars"][f"{name}_docker_host"] == "{{ _monitoring_docker_host }}"
            if entry == "install":
                assert task["vars"][f"{name}_image_pull"] == "{{ monitoring_image_pull }}"


def test_one_rescue_serves_every_exporter_container():
    """The exporter roles give only what differs (host PID, command, devices, mounts); the container boilerplate and
    the rescue (recorded, said, never failing the node) are the internal exporter role's, written once."""
    (helper,) = yaml.safe_load((REPO / "roles" / "exporter" / "tasks" / "run.yml").read_text())
    (container,) = helper["block"]
    assert container["community.docker.docker_container"]["labels"]["ai.aic.service"] == "{{ _exporter_service }}"
    record, say = helper["rescue"]
    assert "exporter_failed" in record["ansible.builtin.set_fact"]
    assert say["name"] == "Say that the exporter did not start"
    assert "Prometheus keeps running without it" in say["ansible.builtin.debug"]["msg"]
    for role, service in (("node_exporter", "node-exporter"), ("amd_metrics_exporter", "amd-metrics-exporter")):
        tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "run.yml").read_text())
        (include,) = [t for t in tasks if "ansible.builtin.include_role" in t]
        assert include["ansible.builtin.include_role"]["name"] == "exporter"
        assert include["ansible.builtin.include_role"]["tasks_from"] == "run"
        assert include["vars"]["_exporter_name"] == role and include["vars"]["_exporter_service"] == service
        assert not any("rescue" in t for t in tasks), f"{role}: the rescue is the exporter role's"


def test_given_images_are_not_pulled_where_the_site_distributes_them():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert "aic_plan.images.distribute_monitoring" in defaults["monitoring_image_pull"]
