"""Test configuration: hypothesis profiles and the ``--runslow`` switch for long forms."""
import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile(
    "thorough", max_examples=300, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="run the long forms of soak and chaos tests")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long form of a soak or chaos test")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="long form: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def cpu_only(monkeypatch):
    """Sessions see no GPU, even under ``make test-gpu``: for tests of the CPU executor's own
    paths (inline starts, the static path, time slices, splits across CPU devices), which a
    GPU taking their ops would bypass. Everything else runs with the GPU there."""
    monkeypatch.setattr("asyncflow.runtime.device.cuda_device_count", lambda: 0)
