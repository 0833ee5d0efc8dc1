"""The Session: compile a request once, then run steps on the runtime.

Data flow of ``await sess.run(fetches, feed_dict)``:
1. ``_FetchStructure`` flattens any nesting of lists/tuples/namedtuples/dicts of tensors,
   ops, names and variables into unique fetch tensors and target ops, and rebuilds the
   caller's structure around the results.
2. Feeds are resolved and validated (dtype, shape) before anything runs.
3. The signature (feeds, fetches, targets) maps to a compiled ``_Compiled`` run, built once:
   prune to what the fetches need (feeds cut edges), place every op on a device, partition
   per device (Send/Recv on crossing edges), compile each partition to an ExecutionPlan.
4. A fresh step id; every partition's executor runs in one nursery; the first failure
   cancels the rest and is raised alone (root cause, never a bare ExceptionGroup).

A local session owns a fresh ResourceManager, so variables start uninitialized in each new
session. Many runs may be in flight at once; they share variables.
"""
from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import itertools
import secrets

import numpy as np
import trio

from asyncflow import dtypes, errors
from asyncflow.graph import prune as _prune
from asyncflow.graph.graph import Operation, Tensor, get_default_graph
from asyncflow.ops.control_flow import is_loop_back_edge
from asyncflow.runtime import compiler as _compiler
from asyncflow.runtime import device as _device
from asyncflow.runtime import executor
from asyncflow.runtime import timeslice
from asyncflow.runtime.options import RunOptions, SessionConfig
from asyncflow.runtime.plan import compile_plan
from asyncflow.runtime.resources import ResourceManager, process_resources



class DeviceName(str):
    """A device name that also answers ``.name`` and ``.device_type`` (TF1's attributes)."""

    @property
    def name(self):
        return str(self)

    @property
    def device_type(self):
        return self.rsplit("/device:", 1)[-1].split(":")[0]


def _message(exc):
    """An exception's text; a KeyError's ``str()`` would quote and escape its message."""
    return exc.args[0] if isinstance(exc, KeyError) and len(exc.args) == 1 else str(exc)


class _FetchStructure:
    """Flattens a nested fetch into unique elements and rebuilds results in its shape."""

    def __init__(self, graph, fetches):
        self._graph = graph
        self.tensors = []
        self.targets = []
        self._tensor_index = {}
        self._target_set = set()
        self._template = self._flatten(fetches)

    def _flatten(self, fetch):
        if fetch is None:
            raise TypeError("Fetch argument None has invalid type <class 'NoneType'>")
        if isinstance(fetch, (list, tuple)) and not hasattr(fetch, "_fields"):
            return (type(fetch), [self._flatten(f) for f in fetch])
        if isinstance(fetch, tuple):  # namedtuple
            return ("namedtuple", type(fetch), [self._flatten(f) for f in fetch])
        if isinstance(fetch, collections.abc.Mapping):
            return ("mapping", type(fetch), [(k, self._flatten(v)) for k, v in fetch.items()])
        try:
            element = self._graph.as_graph_element(fetch)
        except (TypeError, ValueError, KeyError) as exc:
            # TF1's _FetchMapper: a name that matches nothing is a ValueError, a wrong type a
            # TypeError (the KeyError of the lookup is its cause, not the error the caller gets).
            kind = TypeError if isinstance(exc, TypeError) else ValueError
            raise kind(f"Fetch argument {fetch!r} cannot be interpreted as a Tensor or "
                       f"Operation: {_message(exc)}") from None
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
        return self._build(self._template, values)

    def _build(self, node, values):
        kind = node[0]
        if kind == "tensor":
            return values[node[1]]
        if kind == "op":
            return None
        if kind == "namedtuple":
            return node[1](*[self._build(n, values) for n in node[2]])
        if kind == "mapping":
            items = [(k, self._build(n, values)) for k, n in node[2]]
            try:
                return node[1](items)
            except TypeError:
                return dict(items)
        seq = [self._build(n, values) for n in node[1]]
        return seq if kind is list else kind(seq)


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


def _to_feed_array(tensor, value):
    """Validate and convert one fed value.

    Raises:
        InvalidArgumentError: on a dtype or shape the tensor cannot take.
    """
    dtype = tensor.dtype
    if isinstance(value, np.ndarray) and value.dtype == dtype.np \
            and _fits(tensor.shape.dims, value.shape):
        return value  # the common case, checked without building shapes
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


class _Compiled:
    """One signature's compiled run: the partitions' plans and where feeds/fetches go."""

    __slots__ = ("plans", "feed_routes", "fetch_routes")

    def __init__(self, plans, feed_routes, fetch_routes):
        self.plans = plans                  # list of ExecutionPlan
        self.feed_routes = feed_routes      # per plan: indices into the feed list
        self.fetch_routes = fetch_routes    # per fetch: (plan index, position in its fetches)


class _Request:
    """One run, prepared: what to feed, what to compute, and how to return it."""

    __slots__ = ("structure", "feed_values", "fed_positions", "to_compute", "compiled", "trace")

    def __init__(self, structure, feed_values, fed_positions, to_compute, compiled, trace):
        self.structure = structure
        self.feed_values = feed_values
        self.fed_positions = fed_positions
        self.to_compute = to_compute
        self.compiled = compiled
        self.trace = trace


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


class Session:
    """``async with af.Session(graph=None, config=None, cluster=None) as sess:``.

    Args:
        graph: the graph to run (default: the context's default graph).
        config: a SessionConfig.
        cluster: a ClusterSpec (or dict) to run as the master of a cluster: ops run on the
            workers their devices name (``asyncflow.distributed.master``).
        target: ``"host:port"`` (``grpc://`` or ``http://`` prefixes accepted) of one worker,
            used as a one-task cluster whose job and task come from its Health.
    """

    _step_ids = itertools.count(secrets.randbits(40) << 8)
    _device_state = None  # incarnations and pinned placements, made by the first compile

    def __init__(self, target="", graph=None, config=None, cluster=None):
        if isinstance(target, SessionConfig) and config is None:
            target, config = "", target
        self.graph = graph if graph is not None else get_default_graph()
        self.config = config or SessionConfig()
        self._resources = ResourceManager(local=True)
        self._devices = _device.make_local_devices(self.config.device_count)
        self._cache = {}
        self._closed = False
        self._cluster = cluster
        self._in_flight = 0
        self._run_scopes = set()  # one per run in flight: close() cancels them (queue waits)
        self._owned_tasks = []  # stop callbacks of background tasks this session owns
        self._master = None
        if cluster is not None or target:
            from asyncflow.distributed import master as _master
            self._master = _master.Master.for_cluster_or_target(cluster, target, self.config)

    # -- lifecycle ----------------------------------------------------------------------
    async def __aenter__(self):
        _require_trio("async with af.Session()")
        if self._master is not None:
            await self._master.open()
        return self

    async def __aexit__(self, *exc_info):
        await self.close()

    async def close(self):
        """Release the session's resources; later runs fail."""
        if not self._closed:
            self._closed = True
            for scope in self._run_scopes:  # waiting runs fail with CancelledError
                scope.cancel()
            for stop in self._owned_tasks:  # e.g. TF1-style start_queue_runners(sess=...)
                stop()
            self._resources.reset()
            self._cache.clear()
            if self._master is not None:
                with trio.CancelScope(shield=True):
                    await self._master.close()

    @property
    def closed(self):
        return self._closed

    def list_devices(self):
        """Full names of this session's devices (a cluster's once the session is open)."""
        if self._master is not None:
            return [DeviceName(d) for d in self._master.device_names()]
        return [DeviceName(d.name) for d in self._devices]

    @staticmethod
    async def reset(target=None, containers=None):
        """Clear resource containers (all when None) of a local process or a cluster."""
        if target not in (None, "", "local"):
            from asyncflow.distributed import master as _master
            await _master.reset(target, containers)
            return
        process_resources().reset(containers)

    # -- running --------------------------------------------------------------------------
    async def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        """Run the ops needed for ``fetches`` and return their values in the same structure.

        Raises:
            OpError: the failing op's error (InvalidArgumentError for bad feeds,
                DeadlineExceededError past ``options.timeout_in_ms``, ...).
            RuntimeError: if the session is closed.
        """
        _require_trio("Session.run")
        request = self._prepare(fetches, feed_dict, options)
        return await self._run_prepared(request, options, run_metadata)

    def _prepare(self, fetches, feed_dict, options):
        """Everything of a run before any op runs: fetches, validated feeds, compiled plans."""
        if self._closed:
            raise RuntimeError("Attempted to use a closed Session.")
        structure = _FetchStructure(self.graph, fetches)
        feed_tensors, feed_values = self._resolve_feeds(feed_dict)
        fed_positions = {t: i for i, t in enumerate(feed_tensors)}
        to_compute = [t for t in structure.tensors if t not in fed_positions]
        compiled = self._compiled(tuple(feed_tensors), tuple(to_compute), tuple(structure.targets))
        trace = [] if options is not None and options.trace_level else None
        return _Request(structure, feed_values, fed_positions, to_compute, compiled, trace)

    async def _run_prepared(self, request, options, run_metadata):
        await trio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller never starts a step
        plan = self._inline_plan(request, options, static_only=False)
        if plan is not None:  # one local CPU partition: none of the machinery below applies
            result = await self._run_inline(request, plan)
        else:
            computed = await self._run_compiled(request.compiled, request.feed_values, options,
                                                request.trace)
            result = self._finish(request, computed, run_metadata)
        await self._share_the_loop()
        return result

    def _finish(self, request, computed, run_metadata):
        """The caller's fetch structure holding host values of what the step computed."""
        if run_metadata is not None and request.trace is not None:
            run_metadata.step_stats = request.trace
        by_tensor = dict(zip(request.to_compute, computed))
        feed_values, fed_positions = request.feed_values, request.fed_positions
        values = [_host_value(by_tensor[t]) if t in by_tensor else
                  _host_value(feed_values[fed_positions[t]]) for t in request.structure.tensors]
        return request.structure.rebuild(values)

    def _inline_plan(self, request, options, static_only=True):
        """The plan of a run that needs no step machinery around its one plan, else None.

        That is one plan on a CPU device of this process, without control flow, untraced and
        without a deadline: no rendezvous, no deadline scope, no partition runner. A static
        plan awaits nothing but the offload of a large kernel and the caller's checkpoint once
        per time slice (``Step.pause``), so any event loop may await it
        (``asyncflow.aio`` runs such steps on the asyncio loop without crossing into its trio
        guest); with ``static_only=False`` (trio callers) a ready-queue plan qualifies too,
        entering the session's close-cancellable scope only if it waits (``Step.park``).
        """
        if self._master is not None or request.trace is not None:
            return None
        plans = request.compiled.plans
        if len(plans) != 1:
            return None
        plan = plans[0]
        if plan.device.kind != "CPU" or plan.control_flow or (
                static_only and (not plan.static or plan.waits)):
            return None
        if (options is not None and options.timeout_in_ms) or self.config.operation_timeout_in_ms:
            return None
        return plan

    async def _run_inline(self, request, plan, offload=None, pause=None):
        """Run ``request`` (see ``_inline_plan``) under whatever loop awaits this.

        ``offload(node, args)`` runs a large kernel on that loop's worker threads (default:
        trio's, under the device's limiter); ``pause()`` is that loop's checkpoint, awaited
        once per time slice (default: trio's).
        """
        step = executor.Step(next(self._step_ids), offload=offload, pause=pause,
                             park=self._parked if plan.waits or not plan.static else None)
        self._in_flight += 1
        try:
            values = await executor.run_plan(plan, request.feed_values, step)
        except errors.OpError as exc:
            _compiler._original_op(exc, self.graph)
            raise
        finally:
            self._in_flight -= 1
        return self._finish(request, [values[position] for _, position
                                      in request.compiled.fetch_routes], None)

    @contextlib.contextmanager
    def _parked(self):
        """A cancel scope ``close()`` cancels, entered by the executor while a step waits."""
        scope = trio.CancelScope()
        self._run_scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._run_scopes.discard(scope)

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
        if not feed_dict:
            return [], []
        tensors, values, seen = [], [], set()
        for key, value in feed_dict.items():
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
            tensors.append(tensor)
            values.append(_to_feed_array(tensor, value))
        return tensors, values

    def _compiled(self, feeds, fetches, targets):
        key = (feeds, fetches, targets)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._cache[key] = self._compile(feeds, fetches, targets)
        return compiled

    def _compile(self, feeds, fetches, targets):
        if self._master is not None:
            return self._master.compile(self.graph, feeds, fetches, targets)
        try:
            ops = _prune.prune(fetches, targets, feeds, skip_edge=is_loop_back_edge)
        except ValueError as exc:
            raise errors.InvalidArgumentError(None, None, str(exc)) from None
        if self._device_state is None:
            self._device_state = _compiler.DeviceState(self._devices)
        return _compiler.compile_run(self.graph, ops, feeds, fetches, targets,
                                     self._device_state, self.config, self._resources)

    async def _run_compiled(self, compiled, feed_values, options, trace):
        timeout_ms = (options.timeout_in_ms if options is not None else 0) \
            or self.config.operation_timeout_in_ms
        step = executor.Step(next(self._step_ids), trace=trace)
        step.extras["timeout_ms"] = timeout_ms
        # Closing the session must cancel a step that waits (on a queue, a Recv, a py_func).
        # The local executor enters ``_parked`` only when the step really waits, so steps that
        # finish inline, nearly all of them, pay for no cancel scope (~10 us of a small run);
        # frame-aware and distributed steps are covered whole.
        lazily = self._master is None and not any(plan.control_flow for plan in compiled.plans)
        if lazily:
            step.park = self._parked
        self._in_flight += 1
        try:
            with contextlib.nullcontext() if lazily else self._parked():
                return await self._run_within_deadline(compiled, feed_values, step, timeout_ms)
            raise errors.CancelledError(None, None, "The session was closed while this step "
                                        "was running (e.g. waiting on a queue)")
        finally:
            self._in_flight -= 1

    async def _run_within_deadline(self, compiled, feed_values, step, timeout_ms):
        if not timeout_ms:
            return await self._run_partitions(compiled, feed_values, step)
        with trio.move_on_after(timeout_ms / 1000) as scope:
            results = await self._run_partitions(compiled, feed_values, step)
        if scope.cancelled_caught:
            raise errors.DeadlineExceededError(
                None, None, f"Timed out after {timeout_ms} ms waiting for the step to finish "
                "(RunOptions.timeout_in_ms)")
        return results

    async def _run_partitions(self, compiled, feed_values, step):
        if self._master is not None:
            if not self._master.opened:
                await self._master.open()
            if not await self._master.refresh(compiled):  # a worker restarted: recompile
                compiled = self._cache[compiled.signature] = self._compile(*compiled.signature)
            return await self._master.run_step(self.graph, compiled, feed_values,
                                               step.extras.get("timeout_ms", 0), step.trace)
        return await _compiler.run_partitions(self.graph, compiled, feed_values, step)

    def statistics(self):
        """A SessionStatistics snapshot."""
        return SessionStatistics(cached_plans=len(self._cache), runs_in_flight=self._in_flight,
                                 devices=tuple(d.name for d in self._devices))


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
