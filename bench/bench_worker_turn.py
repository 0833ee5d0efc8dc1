"""The worker's turn of a trivial remote step, stage by stage, in alternated forms.

For each form (``--forms``: ``this``, or ``base`` with ``--baseline-tree DIR``, an export of
another commit), in turn and ``--pairs`` times over, ``bench_spin_policy.py --child`` (its own
tree's copy) starts a fresh one-ps, one-worker cluster and runs the trivial step (``p * 2.0``
on the worker from a fed scalar, ``bench_vs_tf1.py``'s) ``--steps`` times. In the worker
process only, a ``sitecustomize`` that this script writes into a temporary directory (put on
every process's ``PYTHONPATH``; it acts only where the process's command line says ``--job
worker`` and ``ASYNCFLOW_TURN_SPLITS`` names a directory) wraps the bare server's stages with
``perf_counter_ns`` and records, per step (the short path's steps only), the microseconds of:

* ``turn``: from the return of the wait that read the request's bytes (``read_once``) to the
  return of the reply's write: the worker's whole turn;
* ``take``: ``bare_calls.take_step`` (the frame matched to its template, its sums, ids and
  feed arrays read);
* ``answer``: ``bare_calls.answer_step`` (the call's scope and deadline, the step's admission
  and state, the plan's run, its bookkeeping); within it ``begin`` (``PlainStep.begin``, where
  the tree has it), ``run_plain`` (``StepRunning._run_plain``) and within that ``plan`` (the
  compiled runner's ``run``);
* ``reply``: the reply's frame from the values (``step_answer`` where the tree has it, else
  ``step_reply``);
* ``write``: the reply's write (``write_one`` where the tree has it, else ``write_now``);
* ``rest``: ``turn`` less ``take``, ``answer``, ``reply`` and ``write``: the call's framing and
  counters in ``_serve_call``, the ``_send`` around the write where there is one.

Each wrapper adds its own call (~0.1-0.5 us; the ``turn`` is ~4 us above an unwrapped
worker's), the same in every form. Printed: per form and run, the median of each stage over
each window of ``--window`` steps (the first window, the cluster's warm-up, is left out of the
summary), then each stage's median over the form's windows and this/base.

Run: ``.venv/bin/python bench/bench_worker_turn.py [--forms this,base,this,base] [--pairs 1]
[--steps 6000] [--window 2000] [--baseline-tree <before>]``.
"""
from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
STAGES = ("turn", "take", "answer", "begin", "run_plain", "plan", "reply", "write")

_SITE = r'''
import os
try:
    _cmd = open("/proc/self/cmdline", "rb").read().split(b"\0")
except OSError:
    _cmd = []
_dir = os.environ.get("ASYNCFLOW_TURN_SPLITS")
if _dir and b"--job" in _cmd and _cmd[_cmd.index(b"--job") + 1] == b"worker":
    import statistics
    from time import perf_counter_ns as _ns
    import transports.http.bare as bare
    from asyncflow.cluster import worker_step as ws
    _out = os.path.join(_dir, "w%%d.txt" %% os.getpid())
    _window = int(os.environ.get("ASYNCFLOW_TURN_WINDOW", "2000"))
    S = {k: [] for k in %(stages)r}
    cur = {}

    def _timed(key, fn):
        def timed(*a, **k):
            t = _ns(); r = fn(*a, **k); cur[key] = _ns() - t; return r
        return timed

    def _timed_async(key, fn):
        async def timed(*a, **k):
            t = _ns(); r = await fn(*a, **k); cur[key] = _ns() - t; return r
        return timed

    _read0 = bare._read

    async def _read(*a, **k):
        data = await _read0(*a, **k)
        cur.clear(); cur["t0"] = _ns()
        return data
    bare._read = _read
    bare._take_step = _timed("take", bare._take_step)
    bare._answer_step = _timed_async("answer", bare._answer_step)
    bare._step_reply = _timed("reply", bare._step_reply)
    if hasattr(bare, "_step_answer"):
        bare._step_answer = _timed("reply", bare._step_answer)
    if hasattr(ws, "PlainStep") and hasattr(ws.PlainStep, "begin"):
        ws.PlainStep.begin = _timed("begin", ws.PlainStep.begin)
    _plain0 = ws.StepRunning._run_plain

    async def _run_plain(self, *a):
        cls = type(a[1].compiled.runner)
        if not cls.__dict__.get("_turn_timed"):
            cls.run = _timed_async("plan", cls.run); cls._turn_timed = True
        t = _ns(); r = await _plain0(self, *a); cur["run_plain"] = _ns() - t; return r
    ws.StepRunning._run_plain = _run_plain
    _count = [0]

    def _written(fn):
        def write(*a):
            t = _ns(); r = fn(*a); e = _ns()
            if "answer" in cur and "t0" in cur:
                cur["write"] = e - t; cur["turn"] = e - cur["t0"]
                for k in S:
                    S[k].append(cur.get(k, 0))
                _count[0] += 1
                if _count[0] %% _window == 0:
                    with open(_out, "a") as f:
                        f.write(" ".join("%%s %%.2f" %% (k, statistics.median(v) / 1000)
                                         for k, v in S.items()) + "\n")
                    for v in S.values():
                        v.clear()
            cur.clear()
            return r
        return write
    bare._write_now = _written(bare._write_now)
    if hasattr(bare, "_write_one"):
        bare._write_one = _written(bare._write_one)
''' % {"stages": STAGES}


def _run(form, tree, steps, window, site):
    """The per-window stage medians of one fresh cluster of ``form`` (dicts, us)."""
    env = dict(os.environ)
    out = tempfile.mkdtemp(prefix="turn-")
    env["ASYNCFLOW_TURN_SPLITS"], env["ASYNCFLOW_TURN_WINDOW"] = out, str(window)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [
        site, tree if form == "base" else "", os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, os.path.join(tree, "bench", "bench_spin_policy.py"),
                             "--child", "--trivial-steps", str(steps), "--mlp-steps", "2",
                             "--pin", ""], capture_output=True, text=True, env=env, cwd=tree)
    if result.returncode:
        print(f"form {form} failed: {result.stderr[-2000:]}")
        return []
    windows = []
    for name in glob.glob(os.path.join(out, "w*.txt")):
        with open(name) as handle:
            for line in handle:
                words = line.split()
                windows.append({k: float(v) for k, v in zip(words[::2], words[1::2])})
        os.unlink(name)
    os.rmdir(out)
    return windows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--forms", default="this,base,this,base")
    parser.add_argument("--pairs", type=int, default=1, help="times over the forms")
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--window", type=int, default=2000)
    parser.add_argument("--baseline-tree", default="", help="the tree of the form 'base'")
    args = parser.parse_args()
    this_tree = os.path.dirname(HERE)
    forms = args.forms.split(",")
    if "base" in forms and not args.baseline_tree:
        parser.error("the form 'base' needs --baseline-tree")
    summary = {form: [] for form in forms}
    with tempfile.TemporaryDirectory(prefix="turn-site-") as site:
        with open(os.path.join(site, "sitecustomize.py"), "w") as handle:
            handle.write(_SITE)
        for turn in range(args.pairs):
            for form in forms:
                tree = os.path.abspath(args.baseline_tree) if form == "base" else this_tree
                with open("/proc/loadavg") as handle:
                    load = handle.read().split()[0]
                windows = _run(form, tree, args.steps, args.window, site)
                for i, window in enumerate(windows):
                    window["rest"] = window["turn"] - sum(
                        window.get(k, 0.0) for k in ("take", "answer", "reply", "write"))
                    print(f"turn {turn + 1} {form:<4} (load {load}) window {i + 1}: " + ", ".join(
                        f"{k} {window.get(k, 0.0):.2f}" for k in (*STAGES, "rest")), flush=True)
                summary[form].extend(windows[1:])
                if windows[1:]:
                    print(f"turn {turn + 1} {form:<4} run median: " + ", ".join(
                        f"{k} {statistics.median(w.get(k, 0.0) for w in windows[1:]):.2f}"
                        for k in (*STAGES, "rest")), flush=True)
    print("\nmedian over the windows after each cluster's first (us):")
    medians = {}
    for form, windows in summary.items():
        if windows:
            medians[form] = {k: statistics.median(w.get(k, 0.0) for w in windows)
                             for k in (*STAGES, "rest")}
            print(f"{form:<4} ({len(windows)} windows): " + ", ".join(
                f"{k} {v:.2f}" for k, v in medians[form].items()))
    if "this" in medians and "base" in medians:
        print("this - base: " + ", ".join(
            f"{k} {medians['this'][k] - medians['base'][k]:+.2f}" for k in medians["this"]))


if __name__ == "__main__":
    main()
