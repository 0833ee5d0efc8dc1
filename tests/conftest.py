"""Test configuration: hypothesis profiles, the ``--runslow`` switch for long forms, and a
SIGINT that reaches the processes the tests start."""
import os
import signal

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", max_examples=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile(
    "thorough", max_examples=300, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# A shell that starts a command in the background without job control (``make test &`` in a
# script, a CI runner) starts it with SIGINT ignored, and every child inherits that: Python then
# installs no KeyboardInterrupt handler, and a test that sends Ctrl-C to a worker or a demo waits
# out its deadline on a process that never hears it. Giving this process a SIGINT handler makes
# its children start with SIGINT at its default (exec resets a handled signal, not an ignored one),
# as they would from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
