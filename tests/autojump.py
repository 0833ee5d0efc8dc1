"""``still(clock)``: the ``autojump_clock`` fixture's clock (``tests/conftest.py``) kept from
jumping over a part of a test whose waits are not all inside trio.

The autojump clock takes any moment when every trio task is blocked for idleness, including one
where a task waits for a worker thread (an offloaded kernel, a Preload such as MKL's first
load, a registration compiled off the loop, a file read), a GPU stream's callback or a
subprocess: in the milliseconds of real time that wait takes, it jumps from timer to timer (a
worker's lease check every 30 s, a step's deadline, the health interval), and the test sees
hundreds of virtual seconds pass where a user would see milliseconds. Inside
``with still(autojump_clock):`` it does not jump (virtual time stands still, as it does with
``MockClock``'s default rate 0), so such a part cannot race: it must need no virtual time to
pass (a wait for a trio deadline there would wait forever). Import from tests as
``from autojump import still``.
"""
import contextlib
import math


@contextlib.contextmanager
def still(clock):
    """No jumps of the ``MockClock`` ``clock`` inside; its threshold back to 0 after."""
    clock.autojump_threshold = math.inf
    try:
        yield
    finally:
        clock.autojump_threshold = 0
