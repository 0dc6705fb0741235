"""Load the streamer script shipped by the log_stream role (roles/log_stream/files/aic_log_stream.py) as a module."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest


@pytest.fixture(scope="session")
def streamer_path():
    return pathlib.Path(__file__).resolve().parents[3] / "roles" / "log_stream" / "files" / "aic_log_stream.py"


@pytest.fixture(scope="session")
def streamer(streamer_path):
    spec = importlib.util.spec_from_file_location("aic_log_stream", streamer_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
