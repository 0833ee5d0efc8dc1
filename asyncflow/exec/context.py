"""What a kernel sees: ``NodeContext`` (one per node of a compiled plan), and a waiting
kernel ``StepContext`` (its node's context plus the running step).

The context is built once per plan, so the hot loop passes it without allocating. It holds
the op's attrs and identity, the device's array module, the resource manager, and per-node
state that outlives steps (a random generator, as TF1's stateful random kernels keep one), and
``prepared``: what the kernel's prepare hook (``kernels/registry.py``) computed for this node
when the context was built, once per plan node (None without a hook).
"""
from __future__ import annotations

import weakref

import numpy as np

from asyncflow import errors
from asyncflow.kernels.registry import get_kernel
from asyncflow.exec import queues, readers
from asyncflow.exec.resources import VariableResource, process_resources


class NodeContext:
    __slots__ = ("name", "type", "attrs", "xp", "device", "output_dtypes", "resources",
                 "_rng", "_constant", "op", "prepared", "_variable", "session")

    def __init__(self, op, device, resources, kernel=None, session=None):
        """``op``: the plan node's compile-time ``Node`` (``compile/node_graph.py``). ``kernel``:
        the node's KernelDef (looked up in the registry when not given), whose
        prepare hook runs here. ``session``: on a worker, the master session that registered
        the graph (its stateful random ops' generators are the session's).

        Raises:
            InvalidArgumentError: the prepare hook rejected the op's attrs, naming the op.
        """
        self.op = op
        self.name = op.name
        self.type = op.type
        self.attrs = op.attrs
        self.device = device
        self.xp = device.xp
        self.output_dtypes = tuple(None if dtype.is_string else dtype.np
                                   for dtype, _, _ in op.out_specs)
        self.resources = resources
        self.session = session
        self._rng = None
        self._constant = None
        self.prepared = None
        self._variable = None  # (manager, its epoch, weakref to the resource) of a VariableV2
        if kernel is None:
            kernel = get_kernel(op.type, device.kind)
        if kernel is not None and kernel.prepare is not None:
            try:
                self.prepared = kernel.prepare(self)
            except (KeyError, ValueError, TypeError) as exc:
                raise errors.InvalidArgumentError(
                    None, op, f"{op.type} '{op.name}': invalid attrs for its kernel: "
                    f"{type(exc).__name__}: {exc}") from exc

    def random_generator(self):
        """A numpy Generator seeded from the op's (seed, seed2), or from OS entropy: in a local
        session, the op's one generator for the session (``ResourceManager.random_generator``),
        so a run of other fetches continues its sequence as TF1's does, never restarts it; on
        a worker, the op's one generator for the master session, shared by every graph the
        session registers there, as TF1's worker keeps the kernel in the session's
        OpSegment (``docs/porting.md``)."""
        if self._rng is None:
            seed, seed2 = self.attrs.get("seed"), self.attrs.get("seed2")
            entropy = None if seed is None and seed2 is None else [int(seed or 0), int(seed2 or 0)]

            def create():
                return np.random.default_rng(entropy)
            resources = self.resources
            self._rng = (
                resources.random_generator((self.name, seed, seed2), create, self.session)
                if resources is not None and (resources.local or self.session is not None)
                else create())
        return self._rng

    def device_constant(self, value):
        """``value`` on this device, transferred once per plan (on the host for a node a GPU
        runs on the host, whose ``xp`` is numpy: see ``exec/gpu.py``)."""
        if self._constant is None:
            self._constant = value if self.xp is np else self.device.constant(value)
        return self._constant

    def resolve_path(self, path):
        """The path a file op may open: confined to a worker's data directory (see
        ``exec/files.py``), as given in a local session.

        Raises:
            PermissionDeniedError: the path leaves the worker's data directory.
        """
        directory = self.resources.data_directory
        return path if directory is None else directory.resolve(path, self.name)

    def to_device(self, array):
        return self.device.put(array)

    def variable_resource(self):
        """The VariableResource this VariableV2 node names (created on first use).

        Looked up once per manager epoch (a ``reset`` is the only way a resource leaves its
        manager) and kept by weak reference, so a reset variable's buffer is not held here.
        """
        kept = self._variable
        if kept is not None and kept[0].epoch == kept[1]:
            resource = kept[2]()
            if resource is not None:
                return resource
        attrs = self.attrs
        shared = attrs.get("shared_name") or ""
        manager = process_resources() if shared and self.resources.local else self.resources
        name = shared or self.name
        shape = attrs["shape"]
        dims = None if shape.dims is None else tuple(shape.dims)
        dtype = attrs["dtype"]

        def create():
            return VariableResource(name, dtype, dims)
        epoch = manager.epoch
        resource = manager.lookup_or_create(attrs.get("container", ""), name, create)
        self._variable = (manager, epoch, weakref.ref(resource))
        return resource

    def variable_binding(self):
        """``(resource, (manager, epoch, weak reference))``: ``variable_resource`` and what
        it was looked up under, valid while the manager's epoch is that one (a static form's
        line reads it back without a call: ``codegen.Generator.read``)."""
        resource = self.variable_resource()
        return resource, self._variable

    def queue_spec(self):
        """This queue node's spec (capacity, dtypes, shapes, min_after_dequeue) from its attrs:
        computed once per plan node by the queue kernels' prepare hook."""
        return queues.spec_of(self.attrs, self.type)

    def queue_resource(self):
        """The queue resource this queue node names (see ``exec/queues.py``)."""
        return queues.lookup_or_create(self)

    def reader_resource(self):
        """The reader resource this reader node names (see ``exec/readers.py``)."""
        return readers.lookup_or_create(self)


class StepContext:
    """The context a waiting kernel receives: its node's context plus the running step and,
    inside a loop, ``frame_iter`` ("frame id:iteration", for rendezvous keys)."""

    __slots__ = ("node", "step", "name", "type", "attrs", "xp", "device", "output_dtypes",
                 "resources", "frame_iter")

    def __init__(self, node_ctx, step, frame_iter=None):
        self.node = node_ctx
        self.step = step
        self.name = node_ctx.name
        self.type = node_ctx.type
        self.attrs = node_ctx.attrs
        self.xp = node_ctx.xp
        self.device = node_ctx.device
        self.output_dtypes = node_ctx.output_dtypes
        self.resources = node_ctx.resources
        self.frame_iter = frame_iter

    def __getattr__(self, item):
        return getattr(self.node, item)
