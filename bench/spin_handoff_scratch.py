"""A measuring patch, not a product path: the intra-op pool's split worker waits for its next
hand-off inside a ctypes call that spins without the GIL (glibc's ``pthread_spin_lock`` on a
lock the poster releases), bounded by a one-shot POSIX timer whose expiry releases the same
lock from C (``SIGEV_THREAD`` calling ``pthread_spin_unlock``), after which the worker sleeps
on the pool's queue as today. Issue 37: a sleeping worker's vCPU halts on this KVM guest (no
guest halt polling) and its wake costs 50-110 us a split; a spinning one takes the hand-off at
once, but must then take the GIL back from the poster (``UNLOCK_KEEPS_GIL``: the poster keeps
the GIL through the release, the worker waits for it; else the release runs with the GIL
released, the worker takes it and the poster waits).

Importing this module replaces ``asyncflow.exec.intra_op._Workers`` (before any pool starts its
workers: ``bench_ab_setting.py --set spin_handoff_scratch:ON=True`` imports it first); ``ON`` is
read at each hand-off and after each job, so A (False) is the tree as it is, but for a worker
still spinning when a round of A starts (its first hand-off then waits up to ``SPIN_US``).
The lane thread (``submit``) never spins. No Ctrl-C, fork or close handling beyond what the
measurement needs: it only measures.

    .venv/bin/python bench/spin_handoff_scratch.py [--repeat 300]   # the split alone
"""
from __future__ import annotations

import argparse
import atexit
import ctypes
import os
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from asyncflow.exec import intra_op  # noqa: E402

ON = False
SPIN_US = 300.0
UNLOCK_KEEPS_GIL = True

_libc = ctypes.CDLL("libc.so.6", use_errno=True)   # calls release the GIL
_libc_gil = ctypes.PyDLL("libc.so.6")              # calls keep it
_spin_lock = _libc.pthread_spin_lock
_spin_lock.argtypes = [ctypes.c_void_p]
_unlock_free = _libc.pthread_spin_unlock
_unlock_free.argtypes = [ctypes.c_void_p]
_unlock_keep = _libc_gil.pthread_spin_unlock
_unlock_keep.argtypes = [ctypes.c_void_p]
_spin_init = _libc.pthread_spin_init
_spin_init.argtypes = [ctypes.c_void_p, ctypes.c_int]
_timer_create = _libc.timer_create
_timer_create.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_timer_settime = _libc_gil.timer_settime
_timer_settime.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
CLOCK_MONOTONIC, SIGEV_THREAD = 1, 2
_UNLOCK_ADDRESS = ctypes.cast(_unlock_free, ctypes.c_void_p).value


class _SigEvent(ctypes.Structure):  # glibc's x86-64 ``struct sigevent`` (64 bytes)
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("function", ctypes.c_void_p), ("attribute", ctypes.c_void_p),
                ("pad", ctypes.c_int * 8)]


class _ITimerSpec(ctypes.Structure):
    _fields_ = [("interval_s", ctypes.c_long), ("interval_ns", ctypes.c_long),
                ("value_s", ctypes.c_long), ("value_ns", ctypes.c_long)]


stats = {"warm": 0, "cold": 0, "expired": 0, "spurious": 0}
_Base = intra_op._Workers


class _SpinWorkers(_Base):
    def __init__(self, count, name):
        self._spins = not name.endswith("-lane")
        self._locks = [ctypes.c_int(0) for _ in range(count)]
        self._addresses = [ctypes.addressof(lock) for lock in self._locks]
        self._timers = []
        for address in self._addresses:
            _spin_init(address, 0)
            _spin_lock(address)  # held: a spinning worker waits for its release
            event = _SigEvent(value=address, notify=SIGEV_THREAD, function=_UNLOCK_ADDRESS)
            timer = ctypes.c_void_p()
            if _timer_create(CLOCK_MONOTONIC, ctypes.byref(event), ctypes.byref(timer)):
                raise OSError(ctypes.get_errno(), "timer_create")
            self._timers.append(timer)
        self.spinning = [False] * count
        self._slots = [None] * count
        self._stopping = False
        super().__init__(count, name)

    def _arm(self, index):
        spec = _ITimerSpec(0, 0, 0, max(1000, int(SPIN_US * 1000)))
        _timer_settime(self._timers[index], 0, ctypes.byref(spec), None)

    def _spin(self, index):
        """A hand-off taken spinning, or None once ``SPIN_US`` passed without one."""
        address, slots, spinning = self._addresses[index], self._slots, self.spinning
        deadline = time.perf_counter() + SPIN_US * 1e-6
        self._arm(index)
        while True:
            spinning[index] = True
            _spin_lock(address)  # (the GIL released: a poster's or the timer's release)
            spinning[index] = False
            item, slots[index] = slots[index], None
            if item is not None:
                stats["warm"] += 1
                return item
            if self._stopping or not ON or time.perf_counter() >= deadline:
                stats["expired"] += 1
                return None
            stats["spurious"] += 1  # (the last spin's timer, fired during a job)

    def _loop(self, index):
        get, busy = self._queue.get, self.busy
        while True:
            item = self._spin(index) if ON and self._spins and not self._stopping else None
            if item is None:
                item = get()
                if item is None:
                    return
            busy[index] = True
            try:
                item()
            finally:
                busy[index] = False

    def post(self, item, count):
        for _ in range(count):
            if ON and self._spins:
                for index, spins in enumerate(self.spinning):
                    if spins and self._slots[index] is None:
                        self._slots[index] = item
                        self.spinning[index] = False
                        (_unlock_keep if UNLOCK_KEEPS_GIL else _unlock_free)(
                            self._addresses[index])
                        break
                else:
                    stats["cold"] += 1
                    self._queue.put(item)
            else:
                self._queue.put(item)

    def calm(self):
        """Spinning workers stop spinning now (they go to sleep on the queue: ``ON`` False)."""
        for index, spins in enumerate(self.spinning):
            if spins:
                _unlock_keep(self._addresses[index])

    def shutdown(self, timeout=None):
        self._stopping = True
        for address in self._addresses:
            _unlock_keep(address)
        super().shutdown(timeout)


intra_op._Workers = _SpinWorkers


def _report():
    if any(stats.values()):
        print(f"spin_handoff_scratch: {stats}")


atexit.register(_report)


def _split_once(pool, a, b, out, marks):
    t0 = time.perf_counter()
    half = a.shape[0] // 2

    def chunk(start, stop):
        marks.append((start, time.perf_counter() - t0))
        np.matmul(a[start:stop], b, out=out[start:stop])
    pool.run(chunk, [(0, half), (half, a.shape[0])])
    return time.perf_counter() - t0


def main(argv=None):
    global ON, UNLOCK_KEEPS_GIL
    parser = argparse.ArgumentParser(description="the split alone, forms alternated")
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--gap-us", type=float, default=100.0,
                        help="the caller's own work between two splits (the worker warm)")
    args = parser.parse_args(argv)
    intra_op.claim_blas()
    pool = intra_op.IntraOpPool(2, "scratch")
    rng = np.random.default_rng(0)
    shapes = {"8.4M [256,256]@[256,128]": (256, 256, 128),
              "51M [256,784]@[784,256]": (256, 784, 256)}
    forms = {"one": (False, True), "sleep": (False, True), "spin_keep": (True, True),
             "spin_free": (True, False)}
    gap = np.ones((64, 64), np.float32)
    print(f"load average at start: {os.getloadavg()}")
    for label, (m, k, n) in shapes.items():
        a = rng.standard_normal((m, k), np.float32)
        b = rng.standard_normal((k, n), np.float32)
        one = a @ b
        out = np.empty_like(one)
        results = {form: [] for form in forms}
        for rep in range(args.repeat):
            for form in (list(forms) if rep % 2 else list(forms)[::-1]):
                ON, UNLOCK_KEEPS_GIL = forms[form]
                if ON:  # a split before: the worker spins after its job
                    _split_once(pool, a, b, out, [])
                else:   # the worker asleep, its vCPU idle a while
                    pool._workers().calm()
                    time.sleep(0.002)
                marks = []
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < args.gap_us * 1e-6:
                    gap @ gap
                if form == "one":
                    t1 = time.perf_counter()
                    np.matmul(a, b, out=out)
                    total = time.perf_counter() - t1
                    marks = [(0, 0.0)]
                else:
                    total = _split_once(pool, a, b, out, marks)
                starts = dict(marks)
                results[form].append((total, starts.get(0, np.nan),
                                      starts.get(m // 2, np.nan)))
                assert out.tobytes() == one.tobytes(), form
        t_one = []
        for _ in range(50):
            t0 = time.perf_counter()
            np.matmul(a, b, out=out)
            t_one.append(time.perf_counter() - t0)
        print(f"{label}: one thread {np.median(t_one) * 1e6:.0f} us")
        for form, rows in results.items():
            r = np.array(rows[10:]) * 1e6
            print(f"  {form:10s} split median {np.median(r[:, 0]):6.0f} us "
                  f"(p25 {np.percentile(r[:, 0], 25):.0f}, p75 {np.percentile(r[:, 0], 75):.0f});"
                  f" first chunk start {np.median(r[:, 1]):5.1f}, second {np.median(r[:, 2]):5.1f}")
    ON = False
    print(f"taken: {stats}; load average at end: {os.getloadavg()}")
    pool.close(5)


if __name__ == "__main__":
    main()
