"""One update with respect to a Ctrl-C: SIGINT held while a kernel writes a variable's stored
arrays, so a KeyboardInterrupt never leaves a variable and its slots half updated.

An optimizer's apply writes in several passes (the numpy form: ``ms`` then ``mom`` then the
variable; a compiled loop's copies assigned back one after the other; a split's chunks), and
Python raises a KeyboardInterrupt at the next bytecode of the main thread: between two passes
it would leave the slots stepped and the variable not. TF1 never interrupts inside a kernel
(its handler runs once ``sess.run`` returned). Here, on the main thread (the only one where
Python runs signal handlers) whose SIGINT has a Python handler, ``hold`` swaps SIGINT's handler
for one that only notes the signal (``_note``), and ``give_back`` puts the handler back and
calls it for each noted signal, so the handler found there (trio's during a step, Python's, the
worker's stop deadline) decides as it would have: on the same task's stack, after the update (a
wakeup fd already had the signal's byte: it is not raised again). The hold is bounded by the
kernel's own compute: it is never taken around a wait (a peer, a queue, a Recv), so a step
stays cancellable.

Users: ``whole`` (a decorator) around every in-place apply kernel (``kernels/training.py``,
``training_sparse.py``, ``training_proximal.py``, ``apply_group.py``, ``matmul_apply.py``);
``exec/intra_op.py``'s atomic splits; ``exec/pairs.py``'s group of applies (every member
applied, then the Ctrl-C). A hold inside another leaves it to the outer one (``hold``
returns None). Cost: ~0.3 us a swap with ``_signal`` (``signal``'s own functions wrap their
results in enums: 13x as much here, bench/RESULTS.md); off the main thread one ident test.
"""
from __future__ import annotations

import _signal
import functools
import os
import sys
import threading

_held = []        # SIGINTs noted while a hold is in place (``_note``)
_holding = None   # (thread id, handler held) while one is: a fork's child puts it back
_main = threading.main_thread().ident  # (signals run there only; a fork's child: its own)


def _note(signum, frame):
    """SIGINT's handler during a hold: note it (``give_back`` calls the handler put back)."""
    _held.append(signum)


def hold():
    """On the main thread whose SIGINT has a Python handler, put ``_note`` in its place;
    returns the handler to put back (None: nothing swapped: another thread, which signals
    never interrupt, SIGINT ignored or default, or a hold around this one has it already)."""
    if threading.get_ident() != _main:
        return None
    handler = _signal.getsignal(_signal.SIGINT)
    if not callable(handler) or handler is _note:
        return None
    # (A second Ctrl-C just as an earlier hold put its handler back raised there, before
    # that hold forgot what it noted: delivered, so it must not be raised again at our end.)
    global _holding
    if _held:
        _held.clear()
    _holding = (_main, handler)
    return _signal.signal(_signal.SIGINT, _note)


def give_back(handler):
    """Put ``handler`` back (``hold``'s result, not None); for each SIGINT noted meanwhile it
    is called now, as Python would have called it (each: a handler counting them, as the
    worker's stop deadline whose second one exits at once, sees every one; the first that
    raises ends it, as it would have). Only the Python handler was deferred: the signal's
    byte on a wakeup fd (asyncio's ``add_signal_handler``, trio's wake-up) was written when
    it arrived, so the signal is not raised again (a second byte: asyncio ran its handler
    twice for one Ctrl-C)."""
    global _holding
    _signal.signal(_signal.SIGINT, handler)
    _holding = None
    if _held:
        noted = len(_held)
        _held.clear()
        frame = sys._getframe()  # (the frame Python's own call would pass: trio reads it)
        for _ in range(noted):
            handler(_signal.SIGINT, frame)


def noted():
    """Whether a Ctrl-C was noted during the hold in place (``exec/pairs.py``: a group's side
    no pool thread took then runs before it goes up; otherwise it is handed back to its own
    lines, after a slice check)."""
    return bool(_held)


def whole(kernel):
    """``kernel`` as one update: its call runs inside a hold (a Ctrl-C meanwhile goes up when
    it returned or raised, the kernel's error then its context)."""
    @functools.wraps(kernel)
    def held(*args):
        handler = hold()
        if handler is None:
            return kernel(*args)
        try:
            return kernel(*args)
        finally:
            give_back(handler)
    return held


def _after_fork_in_child():
    global _main, _holding
    _main = threading.get_ident()
    if _holding is not None and _holding[0] != _main:
        # Forked by another thread while the main thread held SIGINT: the child's main
        # thread never ends that hold, so it puts the held handler back (the noter would
        # swallow every Ctrl-C the child gets).
        _signal.signal(_signal.SIGINT, _holding[1])
        _holding = None
        _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
