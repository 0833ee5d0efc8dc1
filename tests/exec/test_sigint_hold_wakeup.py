"""A Ctrl-C held by an apply (``kernels/sigint_hold.py``) reaches a loop that watches SIGINT
through a wakeup fd (asyncio's ``add_signal_handler``; trio's wake-up) once, as it would have
without the hold: the signal's byte is written when it arrives, and ``give_back`` runs only
the Python handler it deferred. Raising the signal again wrote a second byte, and asyncio ran
its handler twice for one Ctrl-C (a "press twice to force quit" handler quit at once)."""
from __future__ import annotations

import asyncio
import signal
import socket


from asyncflow.kernels import sigint_hold


@sigint_hold.whole
def interrupted_apply():
    """An apply kernel whose compute is hit by a Ctrl-C (delivered at once: held)."""
    signal.raise_signal(signal.SIGINT)
    return "applied"


def test_one_held_ctrl_c_is_one_byte_on_the_wakeup_fd(main_thread):
    seen = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        assert interrupted_apply() == "applied"
        assert seen == [signal.SIGINT]  # the handler ran once, after the apply
        assert reader.recv(64) == bytes([signal.SIGINT])  # one byte, one signal
    finally:
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGINT, previous)
        reader.close()
        writer.close()


def test_asyncio_s_signal_handler_runs_once_for_one_held_ctrl_c(main_thread):
    loop = asyncio.new_event_loop()
    calls = []
    previous = signal.getsignal(signal.SIGINT)
    loop.add_signal_handler(signal.SIGINT, calls.append, "ctrl-c")

    async def step():
        assert interrupted_apply() == "applied"
        for _ in range(3):  # (the self-pipe's bytes are there: read on the next turns)
            await asyncio.sleep(0)
    try:
        loop.run_until_complete(step())
        assert calls == ["ctrl-c"]
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        loop.close()
        signal.signal(signal.SIGINT, previous)
