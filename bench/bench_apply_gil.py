"""Two threads each running numpy passes: what an optimizer apply gets from running beside
another apply or beside a GEMM (issue 37, ``exec/pairs.py``).

The main thread runs RMSProp's eleven passes over a [784, 256] float32 variable (the MLP's
first layer; the arithmetic and order of ``kernels/training.py``'s blocked update, one block),
timing every call; a partner thread, woken by a semaphore just before, runs one of: nothing,
four [128, 256] @ [256, 256] GEMMs (BLAS, the GIL released for each whole call), the same
passes over a [256, 256] variable (the MLP's second layer), the four small whole-array
RMSProp updates of the MLP's biases and last layer (arrays of under 500 elements do not
release the GIL at all), or the [784, 256] passes again (the autoencoder's pair). Per
partner, medians over ``--repeats`` runs: the main apply's time, how long its first call took
(the wait for the GIL shows there), the partner's time, and both against the sum of the two
alone. With ``--show`` the last run's call times of both threads, in microseconds from the
start.

    python bench/bench_apply_gil.py --repeats 200 [--show]

Each numpy call releases the GIL while it computes and takes it back after; a thread that
finds it taken sleeps until the holder releases it, and on this VM a sleeping thread takes
longer to wake (tens of microseconds) than a [256, 256] pass takes: once the main thread
sleeps, the partner, whose calls are short, takes the GIL back before it wakes, every time.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import numpy as np

clock = time.perf_counter
RHO, LR, MOMENTUM, EPSILON = (np.float32(v) for v in (0.9, 0.001, 0.0, 1e-10))
ONE = np.float32(1)


def arrays(count, seed=0):
    """x, ms, mom, grad (positive: no NaN from the square root) and five outputs/scratch."""
    rng = np.random.default_rng(seed)
    inputs = [np.abs(rng.standard_normal(count)).astype(np.float32) for _ in range(4)]
    return inputs + [np.empty(count, np.float32) for _ in range(5)]


def passes(x, ms0, mom0, g, x1, ms1, mom1, t, u, times):
    """RMSProp in place, as ``kernels/training.py``'s block update; ``times``: each call's end."""
    mark = times.append
    mark(clock())
    np.square(g, out=t)
    mark(clock())
    t -= ms0
    mark(clock())
    t *= ONE - RHO
    mark(clock())
    np.add(ms0, t, out=ms1)
    mark(clock())
    np.add(ms1, EPSILON, out=t)
    mark(clock())
    np.sqrt(t, out=t)
    mark(clock())
    np.multiply(g, LR, out=u)
    mark(clock())
    u /= t
    mark(clock())
    np.multiply(mom0, MOMENTUM, out=mom1)
    mark(clock())
    mom1 += u
    mark(clock())
    np.subtract(x, mom1, out=x1)
    mark(clock())


def small_update(count):
    """The whole-array form ``kernels/training.py`` takes for applies of at most 64 KiB."""
    x, ms0, mom0, g = arrays(count, seed=count)[:4]

    def run():
        t = np.square(g)
        t -= ms0
        t *= ONE - RHO
        ms1 = np.add(ms0, t)
        np.add(ms1, EPSILON, out=t)
        np.sqrt(t, out=t)
        u = np.multiply(g, LR)
        u /= t
        mom1 = np.multiply(mom0, MOMENTUM)
        mom1 += u
        return np.subtract(x, mom1)
    return run


def partners():
    layer2, big = arrays(256 * 256, 1), arrays(784 * 256, 2)
    a = np.ones((128, 256), np.float32)
    w = np.ones((256, 256), np.float32)
    smalls = [small_update(n) for n in (256, 256, 2560, 10)]

    def gemms(times):
        for _ in range(4):
            np.matmul(a, w)
            times.append(clock())

    def small(times):
        for update in smalls:
            update()
            times.append(clock())
    return {
        "nothing": None,
        "4 GEMMs [128,256]x[256,256]": gemms,
        "[256, 256] apply": lambda times: passes(*layer2, times),
        "4 small applies": small,
        "[256, 256] + small applies": lambda times: (passes(*layer2, times), small(times)),
        "[784, 256] apply": lambda times: passes(*big, times),
    }


def alone(fn, repeats):
    spans = []
    for _ in range(repeats):
        times = []
        start = clock()
        fn(times)
        spans.append(clock() - start)
    return float(np.median(spans)) * 1e6


def beside(main, partner, repeats):
    """Median main time, main's first call, partner time, pair time (us); the last run's times."""
    go, done, stop = threading.Semaphore(0), threading.Semaphore(0), [False]
    partner_times = []

    def loop():
        while True:
            go.acquire()
            if stop[0]:
                return
            partner_times.clear()
            partner_times.append(clock())
            partner(partner_times)
            done.release()
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    rows, last = [], None
    try:
        for _ in range(repeats):
            times = []
            start = clock()
            go.release()
            main(times)
            end = clock()
            done.acquire()
            both = clock()
            rows.append((end - start, times[1] - times[0], partner_times[-1] - partner_times[0],
                         both - start))
            last = (start, list(times), list(partner_times))
    finally:
        stop[0] = True
        go.release()
        thread.join(10)
    return [float(v) * 1e6 for v in np.median(rows, axis=0)], last


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--show", action="store_true")
    args = parser.parse_args(argv)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1, user_api="blas")  # (as asyncflow's pool holds BLAS)
    except ImportError:
        pass
    print(f"load average at start: {os.getloadavg()}; switch interval "
          f"{sys.getswitchinterval() * 1e3:.1f} ms; numpy {np.__version__}")
    first = arrays(784 * 256, 3)

    def main_apply(times):
        passes(*first, times)
    for fn in [main_apply] + [p for p in partners().values() if p is not None]:
        alone(fn, 20)  # warm
    main_alone = alone(main_apply, args.repeats)
    print(f"[784, 256] apply alone: {main_alone:.0f} us")
    for name, partner in partners().items():
        if partner is None:
            continue
        partner_alone = alone(partner, args.repeats)
        (mine, first_call, theirs, pair), last = beside(main_apply, partner, args.repeats)
        print(f"beside {name:>28}: apply {mine:4.0f} us (first call {first_call:4.0f}), "
              f"partner {theirs:4.0f} (alone {partner_alone:4.0f}), both {pair:4.0f} against "
              f"{main_alone + partner_alone:4.0f} one after the other")
        if args.show:
            start, mine_times, their_times = last
            print("    apply:  ", " ".join(f"{(t - start) * 1e6:.0f}" for t in mine_times))
            print("    partner:", " ".join(f"{(t - start) * 1e6:.0f}" for t in their_times))
    print(f"load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
