"""Resources: long-lived state (variables, queues) keyed by (container, name), and the
stateful random ops' generators, one per op and session.

A ``ResourceManager`` belongs to a local session (a fresh one per session, so a new session
starts uninitialized) or to a worker (shared by every session that reaches it, until reset).
Resources with a ``shared_name`` on a local session live in the process-wide manager, so
sessions in one process can share them; ``reset(containers)`` clears named containers.
"""
from __future__ import annotations

import dataclasses
import sys
import threading

import numpy as np

from asyncflow import errors

DEFAULT_CONTAINER = ""


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceStatistics:
    """What ``ResourceManager.statistics()`` returns: ``(container, resources held)`` pairs,
    sorted by container name ("" is the default container)."""

    containers: tuple[tuple[str, int], ...]

    def as_dict(self):
        """Container name -> resources held, as a plain dict."""
        return dict(self.containers)


class VariableResource:
    """The buffer behind a Variable. Values are immutable arrays (replaced, never mutated),
    so a value read by one op or fetched by a client never changes under it.

    A dense update may write the stored array in place when nothing else holds it
    (``reusable``); until its ``assign`` it is the array's ``writer`` (a thread), and a
    read from any other thread meanwhile (a step or fetch another task started while a step
    runs on a worker thread, ``exec/thread_step.py``, or a ``compat.v1`` caller's thread) gets
    a copy: possibly part old and part new values, as TF1's ``use_locking=False`` allows, but
    an array that never changes after the read returned."""

    __slots__ = ("name", "dtype", "shape", "value", "writer", "__weakref__")

    def __init__(self, name, dtype, shape):
        self.name = name
        self.dtype = dtype
        self.shape = shape
        self.value = None
        self.writer = None  # the thread updating ``value`` in place, between reusable and assign

    def read(self):
        value = self.value
        if value is None:
            raise self._uninitialized()
        # The reference is taken before the writer is looked at: a ``reusable`` after this
        # point counts it and hands out no array; one before it has set the writer.
        if self.writer is not None and self.writer != threading.get_ident():
            return value.copy()
        return value

    def _uninitialized(self):
        return errors.FailedPreconditionError(
            None, self.name, f"Attempting to use uninitialized value {self.name}: run "
            "af.global_variables_initializer() (or this variable's initializer) first, or "
            "restore a checkpoint with af.train.Saver.restore")

    def assign(self, value, validate_shape=True, fresh=False):
        """Store ``value``: copied if a caller could still mutate it, unless ``fresh`` (a new
        array the calling kernel just computed and shares with no one)."""
        if validate_shape and self.shape is not None and not _shape_fits(self.shape, value.shape):
            raise errors.InvalidArgumentError(
                None, self.name, f"Assign requires shapes of both tensors to match. lhs shape= "
                f"{list(self.shape)} rhs shape= {list(value.shape)} (variable {self.name}). If "
                "an earlier graph created this variable with another shape on workers that "
                "outlive sessions (or under a shared_name), clear the old one with "
                "`await af.Session.reset(cluster)`")
        flags = getattr(value, "flags", None)
        if flags is not None and getattr(flags, "writeable", None) is not None:  # numpy
            if flags.writeable:
                if not fresh:
                    value = value.copy()
                value.flags.writeable = False
        elif flags is not None and not fresh:
            value = value.copy()  # CuPy: no read-only flag, so keep a copy no caller holds
        self.value = value
        self.writer = None
        return value

    def writable(self):
        """The value as an array the caller may update in place and then ``assign(fresh=True)``.

        A sparse update must cost the rows it touches, not the table, so when nothing but
        this resource holds the current array (no reader, fetch, view or wire buffer: the
        reference count says so) it is handed out itself; otherwise a private copy is. Readers
        therefore still never see a value change under them.
        """
        value = self.reusable()
        return value if value is not None else self.read().copy()

    def reusable(self):
        """The stored array itself, writable, when nothing but this resource holds it (no
        reader, fetch, view or wire buffer: the reference count says so); None otherwise.
        A dense update then writes its new value into it in place and ``assign(fresh=True)``s
        it, instead of a new array of the variable's size. Call it before taking any other
        reference to the value."""
        value = self.value
        if value is None:
            raise self._uninitialized()
        if isinstance(value, np.generic):  # a numpy scalar: immutable
            return None
        # The writer is set before the count (``read``'s comment says why).
        prior, self.writer = self.writer, threading.get_ident()
        # References: self.value, the local name, getrefcount's argument.
        if sys.getrefcount(value) <= 3 and getattr(value, "base", None) is None:
            flags = getattr(value, "flags", None)
            if flags is not None and getattr(flags, "writeable", None) is not None:
                flags.writeable = True  # numpy: an array that owns its data may be reopened
            return value
        self.writer = prior
        return None

    @property
    def initialized(self):
        return self.value is not None


def _shape_fits(static, actual):
    return len(static) == len(actual) and all(s is None or s == a for s, a in zip(static, actual))


class ResourceManager:
    """``(container, name) -> resource``.

    Args:
        local: True for a local session's private manager (resources with a ``shared_name``
            then go to the process-wide manager instead).
        data_directory: a worker's ``files.DataDirectory``: its ops' file paths must resolve
            inside it. None (local sessions): paths are used as given.
    """

    def __init__(self, local=False, data_directory=None):
        self.local = local
        self.data_directory = data_directory
        self._containers = {}
        self._generators = {}  # (op name, seed, seed2) -> numpy Generator (local sessions)
        # A worker's master sessions: handle -> {(op name, seed, seed2): Generator}, and
        # handle -> its registered graphs (the session's generators go with its last graph).
        self._session_generators = {}
        self._session_graphs = {}
        # Bumped as every ``reset`` ends, the only way a resource leaves: a lookup made under
        # the same epoch still names the resource there (``NodeContext.variable_resource``).
        self.epoch = 0

    def lookup(self, container, name):
        return self._containers.get(container, {}).get(name)

    def lookup_or_create(self, container, name, factory, check=None):
        """The resource at (container, name), created by ``factory()`` when absent.

        ``check(existing)`` may raise to refuse a mismatching reuse (e.g. a queue reopened
        with another capacity). Two threads creating one resource at once get the same one:
        the second to store takes the first's (``setdefault`` stores only when absent).
        """
        bucket = self._containers.setdefault(container, {})
        resource = bucket.get(name)
        if resource is None:
            created = factory()
            resource = bucket.setdefault(name, created)
            if resource is created:
                return resource
        if check is not None:
            check(resource)
        return resource

    def random_generator(self, key, factory, session=None):
        """The random generator of the stateful random op ``key`` names (``(op name, seed,
        seed2)``), created by ``factory()`` on first use: one per op and session, as TF1's
        kernel keeps one per op and session, so every signature that runs the op continues
        one sequence (two threads creating it at once get the same one).

        A local session's manager is its own (``session`` None). On a worker ``session`` is
        the master session's handle, whose graphs share the generator while one of them is
        registered (``open_session``); a session with none gets a private one, kept nowhere.
        """
        generators = self._generators if session is None else self._session_generators.get(session)
        if generators is None:
            return factory()
        generator = generators.get(key)
        return generator if generator is not None else generators.setdefault(key, factory())

    def open_session(self, session):
        """A graph of master session ``session`` was registered on this worker: its random
        ops' generators live until the session's last graph is released."""
        self._session_graphs[session] = self._session_graphs.get(session, 0) + 1
        self._session_generators.setdefault(session, {})

    def release_session(self, session, keep=False):
        """A graph of ``session`` was dropped; the last one takes the session's generators
        unless ``keep`` (then ``forget_session`` does, if no graph came meanwhile). Returns
        whether the session still has generators here."""
        left = self._session_graphs.get(session, 0) - 1
        if left > 0:
            self._session_graphs[session] = left
        else:
            self._session_graphs.pop(session, None)
            if not keep:
                self._session_generators.pop(session, None)
        return session in self._session_generators

    def forget_session(self, session):
        """Drop the generators of ``session`` kept past its last graph, unless it has one."""
        if session not in self._session_graphs:
            self._session_generators.pop(session, None)

    def session_graphs(self, session):
        """How many registered graphs ``session`` has here."""
        return self._session_graphs.get(session, 0)

    def release_all_sessions(self):
        """Every graph was dropped (a worker's Reset): no session keeps its generators."""
        self._session_graphs.clear()
        self._session_generators.clear()

    def sessions_with_generators(self):
        """The sessions whose random generators this manager keeps (those with a graph, and
        those whose last graph expired a lease ago or less)."""
        return sorted(self._session_generators)

    def reset(self, containers=None):
        """Drop the named containers (all of them when None); close what can be closed.

        The epoch is bumped once everything named is gone (even when a close raises): a
        lookup another thread makes meanwhile may still find a resource about to be dropped,
        and must be made again after the reset.
        """
        names = list(self._containers) if containers is None else list(containers)
        try:
            for container in names:
                for resource in self._containers.pop(container, {}).values():
                    close = getattr(resource, "close_for_reset", None)
                    if close is not None:
                        close()
            if containers is None:
                self._generators.clear()
        finally:
            self.epoch += 1

    def items(self):
        """``(container, name, resource)`` of every resource, in sorted order."""
        return [(container, name, resource)
                for container, bucket in sorted(self._containers.items())
                for name, resource in sorted(bucket.items())]

    def containers(self):
        return sorted(self._containers)

    def statistics(self):
        """A ResourceStatistics snapshot."""
        return ResourceStatistics(tuple(sorted(
            (container, len(bucket)) for container, bucket in self._containers.items())))


_process_resources = ResourceManager()


def process_resources():
    """The process-wide manager holding resources created with a ``shared_name``."""
    return _process_resources

