"""A hunt for tests that depend on the order they run in: run orders and a report of the
process-wide state each test left behind.

As a script, it prints one chunk of an order of the tests under the given paths, one node id a
line, for pytest's ``@file`` argument (the files, or each file's tests too, reversed or
shuffled by a seed; ``chunks`` pieces, this one ``index``)::

    .venv/bin/python tests/order_hunt.py tests-shuf 1 2 0 tests/cluster > orders.txt
    PYTHONPATH=tests .venv/bin/python -m pytest -q -n 0 -p order_hunt @orders.txt

As a pytest plugin (``-p order_hunt``, ``tests`` on ``PYTHONPATH``), it looks at the process's
state before each test's setup and after its teardown, and lists at the end of the run the
tests after which something differed: environment variables, signal handlers, the cycle GC's
switch and thresholds, the warnings filters, numpy's error state, print options and global
random state, the working directory, the same-host spin's window, clock and calls in flight
(``transports.http.bare_io``), the checksum switch, the intra-op pool's BLAS holds and the
event loop thread's ``whole`` flags (``asyncflow.exec.intra_op``), the Ctrl-C hold, and the
default graph's op count, finalized flag, seed and collections' sizes (a module the test
loaded first is not compared; a module-scoped fixture's state shows at its module's first and
last test; a default graph the test replaced is listed only when it is left finalized).
Expected once per process: ``blas holds: 0 -> 1`` (the first device's claim), and
``KMP_DUPLICATE_LIB_OK``, ``KMP_INIT_AT_FORK`` and ``CRC32C_SW_MODE`` (threadpoolctl's,
joblib's, tensorboardX's imports). The caches that a test may leave full (the codec's
templates) are reset by ``tests/conftest.py``'s ``nothing_kept``, not listed here.
"""
import gc
import os
import random
import signal
import subprocess
import sys
import threading
import warnings
from collections import defaultdict

_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGPIPE", "SIGHUP")


def _loaded(name):
    return sys.modules.get(name)


def snapshot():
    """The process-wide state a test could leave behind, by name."""
    state = {"cwd": os.getcwd(), "gc": (gc.isenabled(), gc.get_threshold(), gc.get_debug()),
             "switch interval": sys.getswitchinterval(),
             "signals": {name: repr(signal.getsignal(getattr(signal, name)))
                         for name in _SIGNALS if hasattr(signal, name)}}
    state["warnings filters"] = len(warnings.filters)
    if (np := _loaded("numpy")) is not None:
        state["numpy errors"] = np.geterr()
        state["numpy print options"] = repr(sorted(np.get_printoptions().items()))
        kind, keys, position, *_ = np.random.get_state()
        state["numpy global random"] = (kind, hash(keys.tobytes()), position)
    if (bare_io := _loaded("transports.http.bare_io")) is not None:
        state["bare_io"] = (bare_io.CALLS.flying, list(bare_io._spin), repr(bare_io._clock),
                            repr(bare_io.machine_busy), repr(bare_io.Calls.alone))
    if (checksum := _loaded("transports.checksum")) is not None:
        state["checksums"] = checksum.enabled()
    if (intra_op := _loaded("asyncflow.exec.intra_op")) is not None:
        state["blas holds"] = intra_op._blas_users
        if threading.current_thread() is threading.main_thread():
            state["whole (main thread)"] = sorted(
                (key, repr(value)) for key, value in vars(intra_op.whole).items()
                if value not in (None, False))
    if (hold := _loaded("asyncflow.kernels.sigint_hold")) is not None:
        state["ctrl-c hold"] = (list(hold._held), hold._holding)
    if _loaded("asyncflow.graph.graph") is not None:
        from asyncflow.graph.graph import get_default_graph
        graph = get_default_graph()
        state["default graph"] = (id(graph), len(graph.get_operations()))
        state["default graph finalized, seed, collections"] = (
            id(graph), graph.finalized, graph.seed, sorted((name, len(graph.get_collection(name)))
                                          for name in graph.get_all_collection_keys()))
    return state


def _differences(before, after, environ_before):
    found = [f"{key}: {before[key]!r} -> {after[key]!r}" for key in after
             if not key.startswith("default graph") and key in before
             and before[key] != after[key]]
    if before.get("default graph") and after["default graph"][0] == before["default graph"][0] \
            and after["default graph"][1] != before["default graph"][1]:
        found.append(f"default graph: {before['default graph'][1]} -> "
                     f"{after['default graph'][1]} ops")
    seeds_before, seeds_after = (before.get("default graph finalized, seed, collections"),
                                 after.get("default graph finalized, seed, collections"))
    if seeds_before and seeds_after[0] == seeds_before[0] and seeds_after != seeds_before:
        found.append(f"default graph finalized, seed, collections: {seeds_before[1:]!r} -> "
                     f"{seeds_after[1:]!r}")
    if seeds_before and seeds_after[1] and not seeds_before[1] \
            and seeds_after[0] != seeds_before[0]:  # a graph of the test's own, left default
        found.append("default graph: another one, left finalized")
    environ = dict(os.environ)
    found += [f"environment {name}: {environ_before.get(name)!r} -> {environ.get(name)!r}"
              for name in sorted(set(environ) | set(environ_before))
              if environ.get(name) != environ_before.get(name)]
    return found


_LEFT = {}


def pytest_runtest_protocol(item, nextitem):  # noqa: ARG001 (pytest's hook signature)
    item.order_hunt = (snapshot(), dict(os.environ))


def pytest_runtest_makereport(item, call):
    if call.when == "teardown" and hasattr(item, "order_hunt"):
        before, environ = item.order_hunt
        found = _differences(before, snapshot(), environ)
        if found:
            _LEFT[item.nodeid] = found


def pytest_terminal_summary(terminalreporter):
    if not _LEFT:
        terminalreporter.write_line("order_hunt: no test left process-wide state changed")
        return
    terminalreporter.section("order_hunt: state left behind")
    for nodeid, found in _LEFT.items():
        terminalreporter.write_line(nodeid)
        for line in found:
            terminalreporter.write_line(f"    {line}")


def order(mode, seed, chunks, index, paths, python=sys.executable):
    """Node ids (``tests-*``) or files (``files-*``) of chunk ``index`` of ``chunks``: the test
    files under ``paths`` reversed (``*-rev``) or shuffled by ``seed`` (``*-shuf``), each
    file's tests too for ``tests-*``, a file's tests kept together."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            files += sorted(os.path.join(path, name) for name in os.listdir(path)
                            if name.startswith("test_") and name.endswith(".py"))
        else:
            files.append(path)
    rng = random.Random(seed)
    files.reverse() if mode.endswith("-rev") else rng.shuffle(files)
    files = files[index::chunks]
    if mode.startswith("files-"):
        return files
    listed = subprocess.run([python, "-m", "pytest", "--collect-only", "-q", "-p",
                             "no:cacheprovider", *files], capture_output=True, text=True,
                            check=False).stdout
    by_file = defaultdict(list)
    for line in listed.splitlines():
        if "::" in line:
            by_file[line.split("::")[0]].append(line)
    ids = []
    for name in files:
        tests = by_file[name]
        tests.reverse() if mode.endswith("-rev") else rng.shuffle(tests)
        ids += tests
    return ids


if __name__ == "__main__":
    if len(sys.argv) < 6 or sys.argv[1] not in ("files-rev", "files-shuf", "tests-rev",
                                                "tests-shuf"):
        sys.exit("usage: order_hunt.py {files,tests}-{rev,shuf} SEED CHUNKS INDEX PATH...")
    print("\n".join(order(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]),
                          sys.argv[5:])))
