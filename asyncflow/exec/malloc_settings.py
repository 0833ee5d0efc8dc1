"""glibc's malloc kept from giving a step's memory back between steps (issue 37).

A step's large arrays (``np.zeros``: glibc's ``calloc``) come from the malloc arena of the
thread that runs the step. With glibc's defaults, a process could land, by chance and for its
whole life, in a state where the step's peak did not fit the arena's heap: each step glibc
mapped a fresh 64 MiB heap for it and, when the step's arrays were freed, deleted that heap
again (``heap_trim``: a secondary heap that became empty goes unless the room left in the
heap before it is under ``M_TOP_PAD``), so every step faulted its arrays' pages in anew
(6-8k minor faults a convnet step, 1.2-1.6x its step time; bench/RESULTS.md 2026-12-08). The
same happens where a heap's freed top is trimmed (above the trim threshold, keeping
``M_TOP_PAD``).

``claim()``, called when a process first makes an asyncflow CPU device (``exec/devices.py``,
beside ``intra_op.claim_blas``; never at ``import asyncflow``), sets with ``mallopt``:

* ``M_TOP_PAD`` 64 MiB, a secondary heap's whole size: an emptied heap is kept (the heap
  before it never has more than that free) and no heap's top is trimmed; a heap or ``brk``
  grows by that much more at a time (address space; pages count only once touched);
* ``M_MMAP_THRESHOLD`` 32 MiB: setting any of these fixes glibc's mmap threshold, which
  otherwise rises by itself up to 32 MiB as large blocks are freed; fixed at that maximum,
  blocks under 32 MiB come from the arenas (as they would once risen), larger ones are
  mmapped (and faulted in) each time, as before.

The cost is memory: a thread's arena no longer deletes or trims its heaps (a heap is at
most 64 MiB, so its free top never exceeds the pad), so it keeps resident what its largest
step touched; the main arena (``brk``) keeps up to 64 MiB free at its top. The models'
servers read 350 MiB resident after their steps against 330-450 MiB as glibc is
(bench/bench_malloc.py, bench/RESULTS.md 2026-12-08 c50malloc). The settings are the whole
process's: every arena keeps its peak until the process ends (glibc makes up to 8 per core,
one for each thread at once, an embedding program's own threads included): 8 threads that ran
a 200 MiB step each at once leave 1.6 GiB resident, against 1 MiB as glibc is once any thread
frees again; ``malloc_trim(0)`` returns all but each arena's last heap's top (88 MiB left)
(bench/bench_malloc_rss.py, bench/RESULTS.md 2026-12-08 r50malloc). A service with many
threads that allocate large blocks may want ``as-is``. Only glibc
(``platform.libc_ver()``); elsewhere nothing is done. ``ASYNCFLOW_MALLOC=as-is`` (or
``CHOICE = "as-is"`` before the first device) leaves malloc as it is; a knob the user set
themselves (``MALLOC_TOP_PAD_``, ``MALLOC_MMAP_THRESHOLD_``, or the same glibc tunable in
``GLIBC_TUNABLES``) is left as they set it. ``APPLIED`` records what was set (glibc's values
cannot be read back), ``SKIPPED`` why a knob was not.
"""
from __future__ import annotations

import ctypes
import os
import platform
import threading

CHOICE = os.environ.get("ASYNCFLOW_MALLOC", "steady")
CHOICES = ("steady", "as-is")
# (name, mallopt's parameter number, glibc's environment variable, its tunable, value)
KNOBS = (
    ("M_TOP_PAD", -2, "MALLOC_TOP_PAD_", "glibc.malloc.top_pad", 64 << 20),
    ("M_MMAP_THRESHOLD", -3, "MALLOC_MMAP_THRESHOLD_", "glibc.malloc.mmap_threshold",
     32 << 20),
)

APPLIED = None  # {knob: value} once claimed (empty where nothing was set)
SKIPPED = {}    # {knob or "all": why it was not set}
_lock = threading.Lock()


def libc_is_glibc():
    return platform.libc_ver()[0] == "glibc"


def _mallopt():
    try:
        return ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None


def user_tunables(text):
    """The tunable names set in ``GLIBC_TUNABLES`` as glibc reads it: ``name=value`` items
    separated by colons, a name matched whole (``" glibc.malloc.top_pad"`` or
    ``"xglibc.malloc.top_pad"`` set nothing glibc knows, so they leave the knob to us)."""
    return {name for name, sep, _ in (item.partition("=") for item in text.split(":")) if sep}


def claim():
    """Set the knobs once per process (the first call; later calls do nothing). Returns
    ``APPLIED``."""
    global APPLIED
    with _lock:
        if APPLIED is not None:
            return APPLIED
        if CHOICE not in CHOICES:
            raise ValueError(f"ASYNCFLOW_MALLOC={CHOICE!r}: expected one of "
                             f"{', '.join(CHOICES)}")
        applied, skipped = {}, {}
        mallopt = _mallopt() if CHOICE == "steady" and libc_is_glibc() else None
        if CHOICE != "steady":
            skipped["all"] = f"ASYNCFLOW_MALLOC={CHOICE}"
        elif mallopt is None:
            skipped["all"] = "not glibc's malloc"
        else:
            tunables = user_tunables(os.environ.get("GLIBC_TUNABLES", ""))
            for name, param, variable, tunable, value in KNOBS:
                if variable in os.environ or tunable in tunables:
                    skipped[name] = f"set by the user ({variable} or {tunable})"
                elif mallopt(ctypes.c_int(param), ctypes.c_int(value)) == 1:
                    applied[name] = value
                else:
                    skipped[name] = "mallopt refused it"
        SKIPPED.clear()
        SKIPPED.update(skipped)
        APPLIED = applied
        return APPLIED
