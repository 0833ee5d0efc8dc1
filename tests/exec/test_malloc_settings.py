"""glibc's malloc settings (``exec/malloc_settings.py``, issue 37): set once, when a process
first makes an asyncflow CPU device, never at import; ``ASYNCFLOW_MALLOC=as-is`` and a knob
the user set themselves are left alone; nothing where the C library is not glibc. The effect
is checked for real: a thread whose arena's first heap is nearly full allocates, writes and
frees 24 MiB over and over; as glibc is by default, each cycle maps a fresh heap and faults
its pages in again (the convnet's state), with the settings it faults them in once."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from asyncflow.exec import malloc_settings

glibc_only = pytest.mark.skipif(not malloc_settings.libc_is_glibc(), reason="glibc's malloc")
SETTINGS = {"M_TOP_PAD": 64 << 20, "M_MMAP_THRESHOLD": 32 << 20}

# mallopt's calls counted through the module's seam, before anything claims
COUNTING = """
import asyncflow
from asyncflow.exec import malloc_settings as m
calls = []
real = m._mallopt
def counting():
    mallopt = real()
    def call(param, value):
        calls.append((param.value, value.value))
        return mallopt(param, value)
    return call
m._mallopt = counting
"""

CYCLES = """
import ctypes, resource, threading
libc = ctypes.CDLL(None)
# no transparent huge pages for this process (PR_SET_THP_DISABLE): the faults counted are 4 KiB
# pages whatever the kernel's THP mode (under "always" a fresh heap's range could fault in
# 2 MiB at a time, far fewer faults than the bound below)
assert libc.prctl(41, 1, 0, 0, 0) == 0
from asyncflow.exec import devices
devices.make_local_devices()
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
MIB = 1 << 20
out = []
def cycles():
    libc.free(libc.malloc(2 * MIB))  # mmapped, then freed: glibc's threshold rises past 1 MiB
    kept = [libc.malloc(MIB) for _ in range(60)]  # most of the thread arena's first heap
    faults = []
    for cycle in range(8):
        before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        blocks = [libc.malloc(MIB) for _ in range(24)]
        for block in blocks:
            ctypes.memset(block, 1, MIB)
        for block in blocks:
            libc.free(block)
        faults.append(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)
    out.append(faults)
thread = threading.Thread(target=cycles)
thread.start()
thread.join()
print(max(out[0][1:]))
"""


def run(code, **env):
    environ = {key: value for key, value in os.environ.items()
               if not key.startswith("MALLOC_")
               and key not in ("GLIBC_TUNABLES", "ASYNCFLOW_MALLOC")}
    environ.update(env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


@glibc_only
def test_applied_once_when_a_device_is_made_not_at_import():
    lines = run(COUNTING + """
print(m.APPLIED, calls)
from asyncflow.exec import devices
devices.make_local_devices()
devices.make_local_devices()
print(m.APPLIED, sorted(calls), m.SKIPPED)
""")
    assert lines[0] == "None []"
    assert lines[1] == f"{SETTINGS} {sorted([(-3, 32 << 20), (-2, 64 << 20)])} {{}}"


@glibc_only
def test_as_is_switch_leaves_malloc_alone():
    lines = run(COUNTING + """
from asyncflow.exec import devices
devices.make_local_devices()
print(m.APPLIED, calls, m.SKIPPED)
""", ASYNCFLOW_MALLOC="as-is")
    assert lines == ["{} [] {'all': 'ASYNCFLOW_MALLOC=as-is'}"]


@glibc_only
@pytest.mark.parametrize("env, kept", [
    ({"MALLOC_TOP_PAD_": str(1 << 20)}, "M_MMAP_THRESHOLD"),
    ({"MALLOC_MMAP_THRESHOLD_": str(1 << 20)}, "M_TOP_PAD"),
    ({"GLIBC_TUNABLES": "glibc.malloc.top_pad=1048576"}, "M_MMAP_THRESHOLD"),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=1048576"},
     "M_TOP_PAD"),
])
def test_a_knob_the_user_set_is_left_as_set(env, kept):
    lines = run(COUNTING + """
from asyncflow.exec import devices
devices.make_local_devices()
print(sorted(m.APPLIED), len(calls), sorted(m.SKIPPED))
""", **env)
    other = ({"M_TOP_PAD", "M_MMAP_THRESHOLD"} - {kept}).pop()
    assert lines == [f"{[kept]} 1 {[other]}"]


@pytest.mark.parametrize("text, names", [
    ("glibc.malloc.top_pad=1048576", {"glibc.malloc.top_pad"}),
    ("glibc.malloc.arena_max=2:glibc.malloc.top_pad=1", {"glibc.malloc.arena_max",
                                                         "glibc.malloc.top_pad"}),
    # glibc matches a name whole: these set no knob, so the settings still apply
    ("glibc.malloc.arena_max=2: glibc.malloc.top_pad=1", {"glibc.malloc.arena_max",
                                                          " glibc.malloc.top_pad"}),
    ("xglibc.malloc.top_pad=1", {"xglibc.malloc.top_pad"}),
    ("", set()),
])
def test_glibc_tunables_read_as_glibc_reads_them(text, names):
    assert malloc_settings.user_tunables(text) == names


@glibc_only
def test_a_tunable_glibc_ignores_leaves_the_knob_to_the_settings():
    lines = run(COUNTING + """
from asyncflow.exec import devices
devices.make_local_devices()
print(sorted(m.APPLIED), sorted(m.SKIPPED))
""", GLIBC_TUNABLES="glibc.malloc.arena_max=8: glibc.malloc.top_pad=1048576")
    assert lines == ["['M_MMAP_THRESHOLD', 'M_TOP_PAD'] []"]


@glibc_only
def test_settings_keep_a_threads_freed_heap_from_faulting_again():
    off = int(run(CYCLES, ASYNCFLOW_MALLOC="as-is")[-1])
    on = int(run(CYCLES)[-1])
    assert off > 4000  # 21 MiB of a fresh heap faulted in each cycle: the state is reproduced
    assert on < 100    # the same cycles reuse the heap's pages


def test_no_op_where_the_c_library_is_not_glibc(monkeypatch):
    monkeypatch.setattr(malloc_settings, "APPLIED", None)
    monkeypatch.setattr(malloc_settings, "SKIPPED", {})
    monkeypatch.setattr(malloc_settings, "CHOICE", "steady")
    monkeypatch.setattr(malloc_settings.platform, "libc_ver", lambda *a, **k: ("", ""))

    def no_mallopt():
        raise AssertionError("mallopt looked up where the C library is not glibc")
    monkeypatch.setattr(malloc_settings, "_mallopt", no_mallopt)
    assert malloc_settings.claim() == {}
    assert malloc_settings.SKIPPED == {"all": "not glibc's malloc"}
    assert malloc_settings.claim() == {}  # once


def test_a_bad_switch_value_names_the_variable(monkeypatch):
    monkeypatch.setattr(malloc_settings, "APPLIED", None)
    monkeypatch.setattr(malloc_settings, "CHOICE", "fast")
    with pytest.raises(ValueError, match="ASYNCFLOW_MALLOC='fast'.*steady, as-is"):
        malloc_settings.claim()
    assert malloc_settings.APPLIED is None
