"""``import cupy`` finds this package when ``tests/fake_gpu`` is on ``PYTHONPATH`` (``make
test-gpu``): it replaces itself with the strict fake of ``tests/exec/fake_cupy.py`` with one
visible device, so the whole suite, worker processes and demos included, runs as on a machine
with a GPU where default placement chooses it.

The fake module is registered as ``fake_cupy`` too, so tests that import it directly share its
classes with what ``import cupy`` returns.
"""
import importlib.util
import os
import sys

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "exec",
                     "fake_cupy.py")


def _fake_module():
    module = sys.modules.get("fake_cupy")
    if module is None:
        spec = importlib.util.spec_from_file_location("fake_cupy", _PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules["fake_cupy"] = module
        spec.loader.exec_module(module)
    return module


_fake = _fake_module()
sys.modules["cupy"] = _fake.MODULE
sys.modules["cupyx"] = _fake.CUPYX
