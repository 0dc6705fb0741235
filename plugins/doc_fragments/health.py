# Copyright: aic.stack developers
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Documentation shared by the read-only health modules (vllm_health, lmcache_health, prometheus_targets).

Only what reads the same in each of them: their options (url, wait_timeout, request_timeout...) differ in
description or default from module to module, so each module documents its own.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    details:
      - The module never changes anything (it always returns RV(ignore:changed=false)); its checks run in check
        mode as well.
"""
