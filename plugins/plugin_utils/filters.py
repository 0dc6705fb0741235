# Copyright: aic.stack contributors
# Apache-2.0
"""What the collection's filter plugins share: a filter whose logic raises its own error type (a ValueError of
module_utils naming the field) fails the task as an Ansible filter error with the same message."""

from __future__ import annotations

import functools

from ansible.errors import AnsibleFilterError


def as_filter(func, errors, prefix=""):
    """``func`` as a filter: ``errors`` (an exception type or a tuple) become AnsibleFilterError(prefix + message)."""

    @functools.wraps(func)
    def filter_(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except errors as exc:
            raise AnsibleFilterError(f"{prefix}{exc}") from exc

    return filter_
