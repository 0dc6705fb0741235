"""Shared pytest configuration for aic.stack tests."""

from __future__ import annotations

import os
import sys

# Make the collection importable as ``ansible_collections.aic.stack`` (``make setup`` links the
# repository as .collections/ansible_collections/aic/stack).
_COLLECTIONS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".collections")
if _COLLECTIONS not in sys.path:
    sys.path.insert(0, _COLLECTIONS)
