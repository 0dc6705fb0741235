"""The teardown role on its own: the stack's containers and network are gone, its images stay; a second run (the
idempotence step) found nothing to do."""

from __future__ import annotations

import os

import docker


def test_no_container_of_the_stack_is_left():
    client = docker.from_env()
    left = client.containers.list(all=True, filters={"label": "ai.aic.stack=aicmoltd"})
    assert [c.name for c in left] == []


def test_the_stack_network_is_gone():
    assert docker.from_env().networks.list(names=["aicmoltd"]) == []


def test_the_images_are_kept():
    docker.from_env().images.get(os.environ["AIC_STACK_IMAGE"])
