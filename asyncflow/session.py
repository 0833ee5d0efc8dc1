"""The Session: prepare a request, then run steps through the session's target.

Data flow of ``await sess.run(fetches, feed_dict)``:
1. ``_FetchStructure`` flattens any nesting of lists/tuples/namedtuples/dicts of tensors,
   ops, names and variables into unique fetch tensors and target ops, and rebuilds the
   caller's structure around the results.
2. Feeds are resolved and validated (dtype, shape) before anything runs.
3. The signature (feeds, fetches, targets) maps to a compiled run, built once by the
   session's *target* (``exec/local_target.py``): a ``LocalTarget`` (this process's devices)
   or a ``ClusterTarget`` (``cluster/cluster_target.py``: workers, through the master). Both
   compile through the same pipeline (``compiled_run.partition_run``) and answer the same
   interface, so nothing here asks which one it holds.
4. A run whose compiled form has an ``inline`` plan runs it in the calling task
   (``target.run_inline``); any other gets the step machinery (``target.run``) under the
   run's deadline. The first failure is raised alone (root cause, never an ExceptionGroup).

``prepare`` and ``run_prepared`` (with ``PreparedRun.loop_free`` and ``run_loop_free``)
are the seam other event loops use: ``asyncflow.aio`` awaits loop-free steps on asyncio and
hands the rest to its trio guest.

A local session owns a fresh ResourceManager, so variables start uninitialized in each new
session. Many runs may be in flight at once; they share variables.
"""
from __future__ import annotations

import collections.abc
import dataclasses
import sys
import threading

import numpy as np
import trio

from asyncflow import dtypes, errors
from asyncflow.device_names import device_type_of
from asyncflow.graph.graph import Operation, Tensor, get_default_graph
from asyncflow.graph.indexed_slices import IndexedSlices
from asyncflow.ops.control_flow import check_feedable, check_fetchable
from asyncflow.ops.sparse_ops import SparseTensor, SparseTensorValue, sparse_feeds
from asyncflow.exec import timeslice
from asyncflow.exec.closing import CancelledOnEntry as _CancelledOnEntry, Closing
from asyncflow.exec.closing import Lent as _Lent, Parked as _Parked
from asyncflow.exec.options import SessionConfig
from asyncflow.exec.resources import process_resources
from asyncflow.exec.local_target import LocalTarget
from asyncflow.pending import PendingCall


class DeviceName(str):
    """A device name that also answers ``.name`` and ``.device_type`` (TF1's attributes)."""

    @property
    def name(self):
        return str(self)

    @property
    def device_type(self):
        return device_type_of(self)


def _message(exc):
    """An exception's text; a KeyError's ``str()`` would quote and escape its message."""
    return exc.args[0] if isinstance(exc, KeyError) and len(exc.args) == 1 else str(exc)


_SINGLE_FETCHES_KEPT = 4096  # lone fetches (and flat lists of them) whose structure is kept
_SIGNATURES_KEPT = 64  # feed signatures a structure keeps the fetch routes of


class _FetchStructure:
    """Flattens a nested fetch into unique elements and rebuilds results in its shape."""

    def __init__(self, graph, fetches):
        self._graph = graph
        self.tensors = []
        self.targets = []
        self._tensor_index = {}
        self._target_set = set()
        self._template = self._flatten(fetches)
        self.target_ops = tuple(self.targets)
        self._signatures = {}  # feed tensors -> (to_compute, sources), see ``signature``
        # A flat list or tuple of tensors and ops (a training loop's ``[loss, train_op]``)
        # rebuilds without recursion: each element's value index, None for an op.
        template = self._template
        self._flat = None
        self._single = template[1] if template[0] == "tensor" else None  # a lone tensor's index
        if template[0] in (list, tuple) and all(n[0] in ("tensor", "op") for n in template[1]):
            self._flat = [n[1] if n[0] == "tensor" else None for n in template[1]]

    def signature(self, feed_tensors):
        """``(to_compute, sources)`` of this fetch fed ``feed_tensors`` (a tuple), worked out
        once per feed signature: the tensors the step computes, and where each fetched
        tensor's value comes from (``sources[i]``: its position in the computed values, or
        ``~p`` for feed ``p``, a fed and fetched tensor returns the fed value)."""
        signature = self._signatures.get(feed_tensors)
        if signature is None:
            fed = {t: i for i, t in enumerate(feed_tensors)}
            to_compute = tuple(t for t in self.tensors if t not in fed)
            computed = {t: i for i, t in enumerate(to_compute)}
            sources = tuple(computed[t] if t in computed else ~fed[t] for t in self.tensors)
            signature = (to_compute, sources)
            if len(self._signatures) < _SIGNATURES_KEPT:
                self._signatures[feed_tensors] = signature
        return signature

    def _flatten(self, fetch):
        if fetch is None:
            raise TypeError("Fetch argument None has invalid type <class 'NoneType'>")
        if isinstance(fetch, (list, tuple)) and not hasattr(fetch, "_fields"):
            return (type(fetch), [self._flatten(f) for f in fetch])
        if isinstance(fetch, tuple):  # namedtuple
            return ("namedtuple", type(fetch), [self._flatten(f) for f in fetch])
        if isinstance(fetch, collections.abc.Mapping):
            return ("mapping", type(fetch), [(k, self._flatten(v)) for k, v in fetch.items()])
        if isinstance(fetch, (SparseTensor, IndexedSlices)):  # a value of three tensors
            parts = [fetch.indices, fetch.values, fetch.dense_shape]
            if isinstance(fetch, IndexedSlices):
                parts = [fetch.values, fetch.indices, fetch.dense_shape]
            kind = SparseTensorValue if isinstance(fetch, SparseTensor) else IndexedSlicesValue
            return ("namedtuple", kind, [None if p is None else self._flatten(p) for p in parts])
        try:
            element = self._graph.as_graph_element(fetch)
        except (TypeError, ValueError, KeyError) as exc:
            # TF1's _FetchMapper: a name that matches nothing is a ValueError, a wrong type a
            # TypeError (the KeyError of the lookup is its cause, not the error the caller gets).
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            raise kind(f"Fetch argument {fetch!r} cannot be interpreted as a Tensor or "
                       f"Operation: {_message(exc)}") from None
        op = element if isinstance(element, Operation) else element.op
        check_fetchable(op)
        if op.type == "Enter" and element is not op and \
                op.inputs[0].op.control_flow_context is None:
            element = op.inputs[0]  # the value entering a top-level loop (TF1 fetches it)
        if isinstance(element, Operation):
            if element not in self._target_set:
                self._target_set.add(element)
                self.targets.append(element)
            return ("op",)
        index = self._tensor_index.get(element)
        if index is None:
            index = self._tensor_index[element] = len(self.tensors)
            self.tensors.append(element)
        return ("tensor", index)

    def rebuild(self, values):
        if self._single is not None:
            return values[self._single]
        flat = self._flat
        if flat is not None:
            seq = [None if i is None else values[i] for i in flat]
            return seq if self._template[0] is list else tuple(seq)
        return self._build(self._template, values)

    def _build(self, node, values):
        kind = node[0]
        if kind == "tensor":
            return values[node[1]]
        if kind == "op":
            return None
        if kind == "namedtuple":
            return node[1](*[None if n is None else self._build(n, values) for n in node[2]])
        if kind == "mapping":
            items = [(k, self._build(n, values)) for k, n in node[2]]
            try:
                return node[1](items)
            except TypeError:
                return dict(items)
        seq = [self._build(n, values) for n in node[1]]
        return seq if kind is list else kind(seq)


class IndexedSlicesValue(collections.namedtuple("IndexedSlicesValue",
                                                ["values", "indices", "dense_shape"])):
    """A fetched IndexedSlices: its values, indices and dense shape as arrays."""


def _fits(dims, shape):
    """Whether an array of ``shape`` fits static ``dims`` (a tuple with None, or None)."""
    if dims is None:
        return True
    if len(dims) != len(shape):
        return False
    for want, have in zip(dims, shape):
        if want is not None and want != have:
            return False
    return True


def _float_scalar(tensor):
    """The numpy dtype a Python float fed to ``tensor`` becomes as it is (``_to_feed_array``'s
    own case: a float dtype, a scalar), where its shape is known to be a scalar (no later
    ``set_shape`` can change that), else None: decided once per tensor (``_resolve_feeds``)."""
    dtype = tensor.dtype.np
    return dtype if dtype.kind == "f" and tensor.shape.dims == () else None


def _to_feed_array(tensor, value):
    """Validate and convert one fed value.

    Raises:
        InvalidArgumentError: on a dtype or shape the tensor cannot take.
    """
    dtype = tensor.dtype
    if isinstance(value, np.ndarray) and value.dtype == dtype.np \
            and _fits(tensor.shape.dims, value.shape):
        return value  # the common case, checked without building shapes
    if type(value) is float and dtype.np.kind == "f" and not tensor.shape.dims:
        return np.asarray(value, dtype.np)  # a Python float for a scalar: as astype below
    if hasattr(value, "op") and isinstance(getattr(value, "op"), Operation):
        raise TypeError(f"The value of a feed cannot be an af.Tensor ({value.name}); "
                        "feed numpy arrays or Python values")
    if dtype.is_string:
        arr = np.asarray(value, dtype=object)
        arr = np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(arr) \
            if arr.size else arr
    else:
        arr = np.asarray(value)
        if arr.dtype != dtype.np:
            if arr.dtype.kind in "OSU" or not (
                    np.can_cast(arr.dtype, dtype.np, "same_kind")
                    or (arr.dtype.kind in "iub" and dtype.is_floating)
                    or (arr.dtype.kind == "f" and dtype is dtypes.bfloat16)):
                raise errors.InvalidArgumentError(
                    None, tensor.op, f"Cannot feed value of dtype {arr.dtype} for Tensor "
                    f"'{tensor.name}', which has dtype {dtype.name}")
            arr = arr.astype(dtype.np)
    if not tensor.shape.is_compatible_with(arr.shape):
        raise errors.InvalidArgumentError(
            None, tensor.op, f"Cannot feed value of shape {arr.shape} for Tensor "
            f"'{tensor.name}', which has shape {tensor.shape}")
    return arr


_CLOSE_CLAIM = threading.Lock()  # held for a few instructions: who begins a session's close
_UNAWAITED = ("Session.run(...) returns something to await: write `await sess.run(...)` in an "
              "async function, or use `import asyncflow.compat.v1 as tf` and `tf.Session()` "
              "for a synchronous run")


class RunHandle(PendingCall):
    """What ``Session.run`` returns: an awaitable for the step's results.

    It is a coroutine by protocol (``send``/``throw``/``close``/``__await__``), so
    ``nursery.start_soon(sess.run, op)`` and ``asyncio.create_task`` take it. Used as a value
    (truth, iteration, indexing, ``float()``, ``np.asarray``) it raises a TypeError that says
    to ``await`` it; dropped without being awaited, it warns with the line that called ``run``
    (Python's own warning would name neither the line nor the fix).
    """

    __slots__ = ()

    def never_awaited(self):
        return (f"Session.run(...) at {self._filename}:{self._lineno} was never awaited. "
                f"{_UNAWAITED}")

    def __repr__(self):
        return f"<RunHandle of Session.run at {self._filename}:{self._lineno}: not a value; " \
               "write `await sess.run(...)`>"

    def _used_as_value(self, *args, **kwargs):
        raise TypeError(f"the result of Session.run(...) at {self._filename}:{self._lineno} "
                        f"was used without `await`. {_UNAWAITED}")

    __bool__ = __iter__ = __len__ = __getitem__ = __float__ = __int__ = __index__ = \
        __array__ = _used_as_value


class PreparedRun:
    """One run, prepared (``Session.prepare``): what to feed, what to compute, how to return it.

    ``loop_free`` says whether the step needs no trio scheduling at all (one static plan on
    a CPU device that never waits, untraced, without a deadline): then any event loop may
    await it with ``Session.run_loop_free``.
    """

    __slots__ = ("structure", "feed_values", "sources", "to_compute", "compiled",
                 "trace", "timeout_ms", "run_metadata", "inline", "loop_free")

    def __init__(self, structure, feed_values, sources, to_compute, compiled, trace,
                 timeout_ms, run_metadata):
        self.structure = structure
        self.feed_values = feed_values
        self.sources = sources  # ``_FetchStructure.signature``
        self.to_compute = to_compute
        self.compiled = compiled
        self.trace = trace
        self.timeout_ms = timeout_ms
        self.run_metadata = run_metadata
        # Runs straight in the caller's task (``target.run_inline``), or takes ``target.run``.
        self.inline = trace is None and not timeout_ms and compiled.runner.inline
        self.loop_free = self.inline and compiled.runner.loop_free

    def result(self, computed):
        """The caller's fetch structure holding host values of what the step computed."""
        if self.run_metadata is not None and self.trace is not None:
            self.run_metadata.step_stats = self.trace
        feed_values = self.feed_values
        values = [_host_value(computed[s] if s >= 0 else feed_values[~s])
                  for s in self.sources]
        return self.structure.rebuild(values)


def _host_value(value):
    """A fetched value as the caller sees it: a numpy array or scalar they may mutate."""
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return value[()]
        if not value.flags.writeable:
            return value.copy()
        return value
    to_numpy = getattr(value, "get", None)  # cupy
    if to_numpy is not None:
        return _host_value(to_numpy())
    return value


def _require_trio(what):
    """Raise a RuntimeError naming ``asyncflow.aio.Session`` unless trio is running here."""
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        raise RuntimeError(
            f"{what} must run under trio (trio.run, pytest-trio, or a trio nursery). From "
            "asyncio code (asyncio.run, aiohttp, FastAPI) use asyncflow.aio.Session, which "
            "takes the same arguments and runs the steps in a trio guest of your loop") from None


def closed_session_error(session):  # TF1's RuntimeError for a use after the close, naming it
    return errors.closed_session(session._target.name)


class Session:
    """``async with af.Session(graph=None, config=None, cluster=None) as sess:``.

    Args:
        graph: the graph to run (default: the context's default graph).
        config: a SessionConfig.
        cluster: a ClusterSpec (or dict) to run as the master of a cluster: ops run on the
            workers their devices name (``asyncflow.cluster.master``).
        target: ``"host:port"`` (``grpc://`` or ``http://`` prefixes accepted) of one worker,
            used as a one-task cluster whose job and task come from its Health.
    """

    def __init__(self, target="", graph=None, config=None, cluster=None):
        if isinstance(target, SessionConfig) and config is None:
            target, config = "", target
        self.graph = graph if graph is not None else get_default_graph()
        self.config = config or SessionConfig()
        if cluster is not None or target:
            from asyncflow.cluster.cluster_target import ClusterTarget
            self._target = ClusterTarget(self.graph, cluster, target, self.config)
        else:
            self._target = LocalTarget(self.graph, self.config)
        self._cache = self._target.cache  # signature -> compiled run (tests look inside)
        self._closed, self._closing = False, None  # (closing: an exec.closing.Closing)
        self._in_flight = 0
        self._run_scopes = set()  # one per run in flight: close() cancels them (queue waits)
        self._owned_tasks = []  # stop callbacks of background tasks this session owns
        self._single_fetches = {}  # a lone Tensor/Operation fetch -> its _FetchStructure
        self._flat_fetches = {}  # (list or tuple, *its Tensors/Operations) -> the same
        # Tensors of this graph fed before (resolved and feedable) -> ``_float_scalar``'s dtype
        self._feedable = {}

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self):
        raise TypeError(
            "af.Session is asynchronous: open it with `async with af.Session() as sess:` in an "
            "async function and `await sess.run(...)`; for a synchronous TF1-style program, "
            "`import asyncflow.compat.v1 as tf` and use `with tf.Session() as sess:`")

    def __exit__(self, *exc_info):
        return False

    async def __aenter__(self):
        _require_trio("async with af.Session()")
        if self._closed:  # (its channels are gone: opening again would say "unavailable")
            raise closed_session_error(self)
        await self._target.open()
        return self

    async def __aexit__(self, *exc_info):
        await self.close()

    async def close(self):
        """Release the session's resources; later runs fail. A close while another is under
        way, from any trio run or thread, returns once that one has finished (bounded)."""
        with _CLOSE_CLAIM:  # closes from two threads' runs: exactly one is the first
            closing, first = self._closing, self._closing is None
            if first:
                self._closing = closing = Closing()
                self._closed = True
        if not first:  # a second close (any trio run) returns once the first has closed
            await closing.wait()
            return
        scopes, self._run_scopes = self._run_scopes, _CancelledOnEntry()
        try:  # (a KeyboardInterrupt here still closes the channels; the target bounds its close)
            for scope in scopes:  # waiting runs fail with CancelledError
                scope.cancel()
            for stop in self._owned_tasks:  # e.g. TF1-style start_queue_runners(sess=...)
                stop()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self._target.close()
                finally:
                    closing.finished()

    @property
    def closed(self):
        return self._closed

    def list_devices(self):
        """Full names of this session's devices (a cluster's once the session is open)."""
        return [DeviceName(d) for d in self._target.device_names()]

    @staticmethod
    async def reset(target=None, containers=None):
        """Clear resource containers (all when None) of a local process or a cluster."""
        if target not in (None, "", "local"):
            from asyncflow.cluster import channels
            return await channels.reset(target, containers)
        process_resources().reset(containers)

    # -- running --------------------------------------------------------------------------
    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run the ops needed for ``fetches`` and return their values in the same structure.

        Returns a ``RunHandle`` to ``await`` (``await sess.run(...)``); one dropped without
        being awaited warns, naming the line that called ``run``.

        Raises:
            OpError: the failing op's error (InvalidArgumentError for bad feeds,
                DeadlineExceededError past ``options.timeout_in_ms``, ...).
            RuntimeError: if the session is closed.
        """
        caller = sys._getframe(1)
        return RunHandle(self._run(fetches, feed_dict, options, run_metadata),
                         caller.f_code.co_filename, caller.f_lineno)

    async def _run(self, fetches, feed_dict, options, run_metadata):
        _require_trio("Session.run")
        return await self.run_prepared(self.prepare(fetches, feed_dict, options, run_metadata))

    def prepare(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Everything of a run before any op runs: fetches, validated feeds, the compiled run.

        A plain call that needs no event loop (``asyncflow.aio`` prepares on asyncio).

        Returns:
            A PreparedRun for ``run_prepared`` (or ``run_loop_free``).

        Raises:
            InvalidArgumentError: a bad feed; TypeError/ValueError: a bad fetch or feed key.
            RuntimeError: if the session is closed.
        """
        if self._closed:
            raise closed_session_error(self)
        structure = self._fetch_structure(fetches)
        feed_tensors, feed_values = self._resolve_feeds(feed_dict)
        feed_tensors = tuple(feed_tensors)
        to_compute, sources = structure.signature(feed_tensors)
        compiled = self._target.prepare(feed_tensors, to_compute, structure.target_ops)
        trace = [] if options is not None and options.trace_level else None
        timeout_ms = (options.timeout_in_ms if options is not None else 0) \
            or self.config.operation_timeout_in_ms
        return PreparedRun(structure, feed_values, sources, to_compute, compiled, trace,
                           timeout_ms, run_metadata)

    def _fetch_structure(self, fetches):
        """The flattened fetch; for a lone Tensor or Operation, or a flat list or tuple of
        them, flattened once per session.

        What flattening decides of one graph element never changes (its graph, whether it may
        be fetched, the Enter it stands for), and a structure is only read after it is built
        (its feed signatures are worked out whole before they are kept), so a repeated fetch
        of those, the common case of a training loop, reuses its structure.
        """
        kind = type(fetches)
        if kind is Tensor or kind is Operation:
            kept, key = self._single_fetches, fetches
        elif kind is list or kind is tuple:
            for fetch in fetches:
                if type(fetch) is not Tensor and type(fetch) is not Operation:
                    return _FetchStructure(self.graph, fetches)
            kept, key = self._flat_fetches, (kind, *fetches)
        else:
            return _FetchStructure(self.graph, fetches)
        structure = kept.get(key)
        if structure is None:
            structure = _FetchStructure(self.graph, fetches)  # raises for a bad fetch: not kept
            if len(kept) < _SINGLE_FETCHES_KEPT:
                kept[key] = structure
        return structure

    async def run_prepared(self, request):
        """Run a PreparedRun in this trio task; returns the fetches in the caller's structure.

        Raises:
            OpError: as ``run``.
        """
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller never starts a step
        self._in_flight += 1
        try:
            if request.inline:  # one local CPU plan: none of the step machinery applies
                computed = await self._target.run_inline(request.compiled, request.feed_values,
                                                         park=self._parked)
            elif not request.timeout_ms:  # (no deadline: one coroutine level fewer)
                computed = await self._target.run(request.compiled, request.feed_values,
                                                  request.trace, 0, self._parked)
            else:
                computed = await self._run_within_deadline(request)
        finally:
            self._in_flight -= 1
        result = request.result(computed)
        if timeslice.due():  # ``_share_the_loop``, without a coroutine per run
            await trio.lowlevel.cancel_shielded_checkpoint()
            timeslice.restart()
        return result

    async def run_loop_free(self, request, offload, pause):
        """Run a ``loop_free`` PreparedRun under whatever event loop awaits this.

        ``offload(node, args)`` runs a large kernel on that loop's worker threads; ``pause()``
        is that loop's checkpoint, awaited once per time slice. The caller yields to its loop
        once per time slice of runs (``timeslice.due()``), as ``run`` does for trio.
        """
        assert request.loop_free, "run_loop_free needs a PreparedRun whose loop_free is true"
        self._in_flight += 1
        try:
            computed = await self._target.run_inline(request.compiled, request.feed_values,
                                                     offload, pause)
        finally:
            self._in_flight -= 1
        return request.result(computed)

    async def _run_within_deadline(self, request):
        timeout_ms = request.timeout_ms  # (a run without one: ``run_prepared`` awaits it)
        with trio.move_on_after(timeout_ms / 1000):
            return await self._target.run(request.compiled, request.feed_values,
                                          request.trace, timeout_ms, self._parked)
        raise errors.DeadlineExceededError(
            None, None, f"Timed out after {timeout_ms} ms waiting for the step to finish "
            "(RunOptions.timeout_in_ms)")

    def _parked(self, cancel=None):
        """A cancel scope ``close()`` cancels, entered by a target while a step waits; with
        ``cancel`` (the target's own, ``cancel()`` ending the step's wait), that instead."""
        return _Parked(self._run_scopes) if cancel is None else _Lent(self._run_scopes, cancel)

    async def _share_the_loop(self):
        """Yield to other tasks once per time slice of runs that finished without waiting.

        A step that completes inline never reaches a trio checkpoint, so a loop of them would
        starve the queue runners and servers in the same nursery. Yielding after every run
        costs ~5-10 us, a large share of a small run, so runs yield once per time slice
        (``timeslice.TIME_SLICE_S``, counted with the kernels the runs ran) instead: tasks
        beside a busy loop wait at most about that long. Shielded: the result is not lost.
        """
        if timeslice.due():
            await trio.lowlevel.cancel_shielded_checkpoint()
            timeslice.restart()

    def _resolve_feeds(self, feed_dict):
        """(tensors, values) of a feed_dict, each key resolved and checked feedable, each
        value converted; a Tensor key fed before (what resolving and the feedable check decide
        of a graph's tensor never changes) skips both."""
        if not feed_dict:
            return [], []
        known = self._feedable
        tensors, values = [], []
        for key, value in feed_dict.items():
            if type(key) is not Tensor:
                break
            scalar = known.get(key, False)
            if scalar is False:
                break
            tensors.append(key)
            values.append(np.asarray(value, scalar) if type(value) is float and scalar
                          is not None else _to_feed_array(key, value))
        else:
            return tensors, values
        tensors, values, seen = [], [], set()
        items = []
        for key, value in feed_dict.items():  # a SparseTensor is fed as its three tensors
            items += sparse_feeds(key, value) if isinstance(key, SparseTensor) else [(key, value)]
        for key, value in items:
            if hasattr(key, "_as_tensor") and not isinstance(key, Tensor):
                key = key._as_tensor()
            try:
                tensor = self.graph.as_graph_element(key, allow_operation=False)
            except (TypeError, ValueError, KeyError) as exc:
                raise TypeError(f"Cannot interpret feed_dict key {key!r} as a Tensor: "
                                f"{_message(exc)}") from None
            if tensor in seen:
                raise errors.InvalidArgumentError(None, tensor.op, f"Tensor {tensor.name} is fed twice")
            seen.add(tensor)
            check_feedable(tensor)
            if type(tensor) is Tensor and len(known) < _SINGLE_FETCHES_KEPT:
                known[tensor] = _float_scalar(tensor)
            tensors.append(tensor)
            values.append(_to_feed_array(tensor, value))
        return tensors, values

    def statistics(self):
        """A SessionStatistics snapshot."""
        return SessionStatistics(cached_plans=len(self._cache), runs_in_flight=self._in_flight,
                                 devices=tuple(self._target.device_names()))


@dataclasses.dataclass(frozen=True, slots=True)
class SessionStatistics:
    """What ``Session.statistics()`` returns (a frozen record, as trio's ``statistics()``).

    Attributes:
        cached_plans: compiled runs kept, one per (feeds, fetches, targets) signature.
        runs_in_flight: ``run`` calls that have not returned yet.
        devices: the full names of the session's devices.
    """

    cached_plans: int
    runs_in_flight: int
    devices: tuple[str, ...]
