"""Test configuration: hypothesis profiles, the ``--runslow`` switch for long forms, a SIGINT
that reaches the processes the tests start, and the second pass ``make test-gpu``
(``ASYNCFLOW_FAKE_GPU=1``: a fake GPU visible, see ``tests/fake_gpu``), which leaves out the
files that never create a device."""
import atexit
import os
import shutil
import signal
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# Loopback ports a test reserved are given back when its teardown ends (a module fixture's
# when the module ends), not held by the pytest process until it exits.
from port_release import (  # noqa: F401 (hooks)
    pytest_fixture_setup, pytest_runtest_call, pytest_runtest_teardown)

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

# Each test process keeps its servers' same-host sockets in a directory of its own, which the
# processes its tests start inherit: every server's start sweeps its directory
# (``transports.http.same_host._sweep``), which probes a socket bound without a lock file (a
# connection made and closed at once: fake peers, an older checkout's servers), and a probe from
# another test run on this host (another xdist worker, another checkout's suite) would reach this
# run's fake peers at any moment: a connection counted at a connection limit, an idle one evicted
# for it, a fake peer's handshake answer written to a peer already gone (EPIPE).
_SOCKETS = tempfile.mkdtemp(prefix="asyncflow-sockets-")  # (mode 0700: private)
os.environ["ASYNCFLOW_SAME_HOST_DIR"] = _SOCKETS
atexit.register(shutil.rmtree, _SOCKETS, True)


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="run the long forms of soak and chaos tests")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long form of a soak or chaos test")


# Files whose tests create no device (codecs, the import layers, CLI help, resolvers' pure
# parsing, placement as data over listed names): under ``make test-gpu`` they would run exactly
# as in ``make test``, so the second pass leaves them out to stay inside CI's time.
DEVICE_FREE = ("tests/transports/", "tests/test_layers.py", "tests/test_cli_help.py",
               "tests/distribute/test_cluster_resolver.py", "tests/compile/test_placement.py",
               "tests/test_loopback_ports.py")


def fake_gpu_pass():
    """True under ``make test-gpu``."""
    return os.environ.get("ASYNCFLOW_FAKE_GPU") == "1"


def pytest_collection_modifyitems(config, items):
    if fake_gpu_pass():
        same = pytest.mark.skip(reason="creates no device: runs the same in make test")
        for item in items:
            path = item.nodeid.replace(os.sep, "/")
            if path.startswith(DEVICE_FREE) or ("tests/" + path).startswith(DEVICE_FREE):
                item.add_marker(same)
    if config.getoption("--runslow"):
        return
    skip = pytest.mark.skip(reason="long form: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def nothing_kept():
    """Each test starts with no frame kept by the codec (``repeat_frames.forget_kept``): its
    caches are the process's and each is cleared whole when it fills, so a test that counts
    the repeated frames' path (their decodes, a ready step's scopes) would see one cleared
    midway after enough earlier tests in its process (a CI flake: a ready step's reply decoded
    in full, in a scope, once the templates filled)."""
    from transports.repeat_frames import forget_kept
    forget_kept()


@pytest.fixture
def main_thread():
    """Skip unless a SIGINT here reaches a Python handler: on the main thread (the only one
    where Python runs signal handlers), SIGINT neither ignored nor left to the default (the
    Ctrl-C hold's tests: ``kernels/sigint_hold.py``)."""
    import signal
    import threading
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python runs signal handlers on the main thread only")
    if not callable(signal.getsignal(signal.SIGINT)):
        pytest.skip("SIGINT is ignored or default here: no KeyboardInterrupt to hold")


@pytest.fixture
def autojump_clock(cpu_only):
    """pytest-trio's clock that jumps to the next deadline whenever every task waits, here
    with no GPU: a GPU stream's completion arrives from the driver's callback thread (the fake
    GPU's too), a wait outside trio the clock jumps over (under ``make test-gpu`` a step's 20 s
    deadline passed while its fetch waited milliseconds for the callback). A part of a test
    whose waits are not all inside trio (a thread, a subprocess) runs inside
    ``with still(autojump_clock):`` (``tests/autojump.py``)."""
    import trio.testing
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
def cpu_only(monkeypatch):
    """Sessions see no GPU, even under ``make test-gpu``: for tests of the CPU executor's own
    paths (inline starts, the static path, time slices, splits across CPU devices), which a
    GPU taking their ops would bypass. Everything else runs with the GPU there."""
    monkeypatch.setattr("asyncflow.exec.devices.cuda_device_count", lambda: 0)
