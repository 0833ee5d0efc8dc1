"""TCP ports on 127.0.0.1, reserved for this process, for tests that must know a worker's
address before it starts: ``transports/loopback_ports.py`` (the benchmarks draw theirs there
too, so a benchmark run beside the suite cannot take a test's port), re-exported here.

Import from tests as ``from loopback_ports import free_ports`` (pytest puts the tests directory on
``sys.path``); ``tests/cluster/killable_workers.py`` and ``tests/distribute/cli_workers.py``
re-export it for their tests.
"""
from transports.loopback_ports import (  # noqa: F401 (re-exported for the tests)
    bindable, consecutive_ports, free_ports, lock_path, release, reserve, scope)
