"""``transports.allocation.keep_freed_memory``: a freed 64 MiB array's memory serves the next
one (glibc's heap instead of a fresh ``mmap``), and where there is no glibc nothing changes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from transports import allocation

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_PROBE = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    from transports.allocation import keep_freed_memory
    print(keep_freed_memory(int(sys.argv[2])))
    first = np.full(64 << 20, 7, np.uint8)
    address = first.ctypes.data
    del first
    second = np.empty(64 << 20, np.uint8)  # not written: it shows what the memory held
    print(second.ctypes.data == address, int(second[::4096].min()), int(second[::4096].max()))
""")


def _probe(max_bytes: int) -> list[str]:
    """In a process of its own (the setting is process-wide): what was set, and whether a new
    64 MiB array got the freed one's memory, bytes included."""
    result = subprocess.run([sys.executable, "-c", _PROBE, ROOT, str(max_bytes)],
                            capture_output=True, text=True, timeout=60, check=True)
    return result.stdout.split()


@pytest.mark.skipif(allocation._mallopt() is None, reason="no glibc mallopt here")
def test_a_freed_large_array_serves_the_next_one():
    assert _probe(256 << 20) == [str(256 << 20), "True", "7", "7"]  # reused, not zeroed
    set_, _, low, high = _probe(0)  # off: a fresh mapping, zero pages from the kernel
    assert (set_, low, high) == ("0", "0", "0")


def test_without_glibc_nothing_is_set(monkeypatch):
    monkeypatch.setattr(allocation.sys, "platform", "darwin")
    assert allocation._mallopt() is None
    assert allocation.keep_freed_memory(64 << 20) == 0


def test_the_environment_sets_or_refuses_the_size(monkeypatch):
    monkeypatch.setenv("ASYNCFLOW_KEEP_FREED_MIB", "0")  # (allocation.ENV)
    assert allocation.keep_freed_memory() == 0
    monkeypatch.setenv(allocation.ENV, "lots")
    with pytest.raises(ValueError, match=allocation.ENV):
        allocation.keep_freed_memory()
    with pytest.raises(ValueError, match="max_bytes"):
        allocation.keep_freed_memory(-1)
