"""The benchmarks' loopback ports: ``transports/loopback_ports.py`` of the tree this folder
belongs to (the tests draw theirs there too), so a benchmark run beside the suite (``make bench``
on a CI machine, a developer's runs beside CI's) never takes a port a test wrote into its
ClusterSpec and has yet to bind, nor the other way round.

Loaded by its path, not as ``transports``: a benchmark's process may import another tree's
``transports`` (``PYTHONPATH=<an earlier export>``) or none (TensorFlow's Python).

    from reserved_ports import free_ports  # (bench/ is on sys.path: the script's folder)
    spec = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
"""
from __future__ import annotations

import importlib.util
import os
import sys

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "transports", "loopback_ports.py")


def _helper():
    loaded = sys.modules.get("transports.loopback_ports")
    if loaded is not None and os.path.samefile(loaded.__file__, _PATH):
        return loaded  # (this tree's, already imported: one state per process)
    spec = importlib.util.spec_from_file_location("_bench_loopback_ports", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


free_ports = _helper().free_ports
