# Copyright: aic.stack contributors
# Apache-2.0
"""Documentation stub: the work is done on the controller by the action plugin of the same name."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: plan
short_description: Validate aic_* inputs and publish the normalized deployment plan
version_added: "0.1.0"
description:
  - Reads every C(aic_*) variable visible to the host, applies defaults (an empty string means "use the default"),
    validates types and cross-field rules (unique ports, known flavour, non-empty model name, absolute paths) and
    sets the fact C(aic_plan) that every other role reads.
  - Runs on the controller only; no host is contacted, so bad input fails before any host is touched.
  - Errors name the offending variable.
options:
  overrides:
    description: Extra C(aic_*) values that take precedence over inventory variables (used by tests).
    type: dict
    default: {}
extends_documentation_fragment:
  - aic.stack.attributes
  - aic.stack.attributes.action
author:
  - aic.stack developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Build the deployment plan
  aic.stack.plan:

- name: Show the vLLM endpoint
  ansible.builtin.debug:
    msg: "{{ aic_plan.endpoints.vllm }}"
"""

RETURN = r"""
plan:
  description: The normalized plan (also set as the fact C(aic_plan)).
  returned: success
  type: dict
  sample:
    flavour: cpu
    ports: {vllm: 8000, lmcache: 5555, lmcache_http: 8080, prometheus: 9090}
    containers: {vllm: aic-vllm, lmcache: aic-lmcache, prometheus: aic-prometheus}
"""
