"""``af.train.Saver``: checkpoints of variables, written atomically, with TF1's bookkeeping.

Theory of operation:
- Building a Saver adds ops to the graph (under ``save/``): a string placeholder for the
  file name, an int64 ``global_step`` placeholder (default -1), one ``Save`` op reading every
  variable, an Identity of the file name ordered after Save (the "save tensor"), one
  ``Restore`` op and an ``Assign`` per variable grouped into ``restore_all``. Restoring only
  assigns, so a fresh session needs no initializer.
- ``await saver.save(sess, prefix, global_step)`` runs the save tensor: the Save kernel
  writes ``<prefix>-<step>.safetensors`` atomically (temp file, fsync, rename, fsync dir).
  Only then is the ``checkpoint`` state file in the same directory rewritten, atomically
  the same way, to point at it. Old checkpoints beyond ``max_to_keep`` are deleted after the
  state file no longer lists them (the state file's rename and the directory are fsynced
  first). So at every instant the state file names only complete files: a crash mid-save
  leaves the previous checkpoint as the latest. The temporaries a killed save leaves
  (``.<file>.<random>.tmp``) are deleted by a later save into the directory once they are
  ``STALE_TEMPORARY_S`` (60 s) old; younger ones may belong to a live writer.
- ``Saver(sharded=True)`` (TF1's sharded saving) groups the variables by the task their
  device names and builds, per task, a ``Save`` of that group's variables on that task's
  CPU writing its own shard (``<prefix>-0000i-of-0000n.safetensors``) and a ``Restore`` of
  the group there; then one ``MergeCheckpointShards`` op, ordered after every Save, writes
  the index (``<prefix>.safetensors.index.json``) that commits them as one checkpoint. A task
  only ever writes and reads the files of its own variables' values, nothing crosses the
  network, and either kind of checkpoint restores with either kind of Saver on any layout
  (the Restore kernel finds each tensor's shard through the index).
- On a cluster (a session with a ``cluster`` or a worker target) every file of a checkpoint
  lands where its data does, as in TF1: the Save op runs on the CPU of the task of the first
  variable (a sharded Saver's index on the first shard's task), and the path the caller gave
  is resolved there, relative to that worker's data directory (``asyncflow worker
  --data-dir``) and confined to it; the folder is created as a local save creates it. Then
  ``CommitCheckpoint``, colocated with Save, writes the ``.meta`` and the ``checkpoint``
  state file beside the data and deletes what ``max_to_keep`` drops
  (``kernels/checkpoint_files.py``), so nothing lands in the client's directory.
  ``await saver.latest_checkpoint(sess, dir)`` (and, inside a ``tf.Session`` block,
  ``asyncflow.compat.v1``'s ``tf.train.latest_checkpoint(dir)``) reads the state file there,
  and a second client restores from it, whatever its working directory. A sharded Saver
  over several tasks writes each shard on its own task and the index where the first shard
  is, whose merge reads every shard: as in TF1, the tasks' data directories must then be one
  shared folder (a volume every task mounts at the same path, as ``deploy/`` does).
- The state file is TF's text format (``model_checkpoint_path: "..."`` then
  ``all_model_checkpoint_paths: "..."`` lines); paths inside the directory are relative.
- All file work runs on worker threads (``trio.to_thread.run_sync``), never on the loop.
  Given an ``asyncflow.aio.Session``, ``save`` runs in that session's trio guest.
- A partitioned variable (``get_variable(partitioner=...)``) is saved under its one logical
  name with TF1's slice information: each part is written as the slice ``"<name>|<spec>"``
  (``spec``: the full shape, then ``offset,length`` per dimension, as TF1's
  ``save_slice_info``), by the Save of the task where the part lives when ``sharded=True``
  (no part crosses the network; with one file, as in TF1, every variable goes to the one
  Save). Each part restores its own region of the logical tensor with a ``Restore`` whose
  ``shape_and_slices`` names it, reading only the saved slices (or the whole tensor) that
  overlap it, so a checkpoint restores into any number of parts, or into an unpartitioned
  variable of the full shape, and the other way round; a different full shape fails naming
  the variable and both shapes (``asyncflow.kernels.checkpoint_slices``).
- ``saver.as_saver_def()`` names the ops, so ``import_meta_graph`` rebuilds a Saver around
  an imported graph without the code that built it.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import time

import numpy as np
import trio

from asyncflow.device_names import DeviceSpec
from asyncflow.graph.graph import GraphKeys, Tensor, get_default_graph
from asyncflow.kernels.checkpoint_files import (
    STATE_FILENAME, commit_state, committed_file as _committed_file, data_path, parse_state,
    write_state,
)
from asyncflow.kernels.checkpoint_slices import slice_key
from asyncflow.ops import checkpoint as _ops
from asyncflow.ops import checkpoint_files as _file_ops
from asyncflow.ops.array import identity
from asyncflow.ops.control import control_dependencies, group
from asyncflow.ops.partitioned_variables import PartitionedVariable
from asyncflow.ops.sources import placeholder, placeholder_with_default
from asyncflow.ops.state import Variable, assign
from asyncflow.exec.local_target import LocalTarget
from asyncflow.train import meta_graph

SAVER_DEF_VERSION = 1


@dataclasses.dataclass
class CheckpointState:
    """The content of a ``checkpoint`` state file (absolute or directory-joined paths)."""

    model_checkpoint_path: str
    all_model_checkpoint_paths: list


def checkpoint_exists(checkpoint_path):
    """True if the checkpoint's data file (or, for a sharded one, its index) exists."""
    return _committed_file(checkpoint_path) is not None


_write_state = write_state


def get_checkpoint_state(checkpoint_dir, latest_filename=None):
    """The ``checkpoint`` state of a directory, or None if absent or unreadable.

    Returns:
        A CheckpointState with paths joined to ``checkpoint_dir`` when relative.
    """
    path = os.path.join(checkpoint_dir, latest_filename or STATE_FILENAME)
    try:
        with open(path, encoding="utf-8") as fileobj:
            text = fileobj.read()
    except OSError:
        return None
    parsed = parse_state(text, checkpoint_dir, path)
    if parsed is None:
        return None
    latest, all_paths = parsed
    return CheckpointState(latest, all_paths)


def latest_checkpoint(checkpoint_dir, latest_filename=None):
    """The prefix of the most recent complete checkpoint in ``checkpoint_dir``, or None."""
    state = get_checkpoint_state(checkpoint_dir, latest_filename)
    if state is not None and checkpoint_exists(state.model_checkpoint_path):
        return state.model_checkpoint_path
    return None


# -- the Saver ---------------------------------------------------------------------------------
def _save_device(variable_device):
    """Where a shard of variables on ``variable_device`` is saved: that task's CPU (TF1)."""
    spec = DeviceSpec.from_string(variable_device or "")
    if spec.job is None and spec.task is None:
        return ""  # no task named: the placer's choice, as for the variable
    return DeviceSpec(spec.job, spec.replica, spec.task, "CPU", 0).to_string()


def _named_saveables(var_list):
    """``[(name, Variable or ref Tensor)]`` from None, a list or a dict."""
    if var_list is None:
        var_list = get_default_graph().get_collection(GraphKeys.GLOBAL_VARIABLES)
    if isinstance(var_list, dict):
        items = list(var_list.items())
    else:
        items, logical = [], {}
        for var in var_list:
            info = getattr(var, "_save_slice_info", None)
            if isinstance(var, PartitionedVariable):
                items.append((var.name, var))
            elif isinstance(var, Variable) and info is not None:
                # A part of a partitioned variable: saved under the logical name.
                if info.full_name not in logical:
                    logical[info.full_name] = []
                    items.append((info.full_name, logical[info.full_name]))
                logical[info.full_name].append(var)
            elif isinstance(var, Variable):
                items.append((var.op.name, var))
            elif isinstance(var, Tensor) and var.is_ref:
                items.append((var.op.name, var))
            else:
                raise TypeError(f"Saver: var_list entries must be Variables or variable "
                                f"references, got {var!r}")
    seen = {}
    for name, var in items if isinstance(var_list, dict) else ():
        key = id(var._ref() if isinstance(var, Variable) else var)  # one variable, two names
        if key in seen:
            raise ValueError(f"The same saveable will be restored with two names: {seen[key]}")
        seen[key] = name
    items = [(name, _logical(name, var) if isinstance(var, list) else var)
             for name, var in items]
    names = [name for name, _ in items]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"At least two variables have the same name: {', '.join(duplicates)}")
    return items


def _logical(name, parts):
    """The parts met in a variable list as one PartitionedVariable, in offset order."""
    parts = sorted(parts, key=lambda v: v._save_slice_info.var_offset)
    info = parts[0]._save_slice_info
    axis = next((i for i, (p, f) in enumerate(zip(info.var_shape, info.full_shape)) if p != f), 0)
    partitions = [1] * len(info.full_shape)
    partitions[axis] = len(parts)
    return PartitionedVariable(name, info.full_shape, parts[0].dtype, parts, partitions)


@dataclasses.dataclass
class _Saved:
    """One tensor a Saver writes: its key in the file, the variable's reference, the logical
    name it restores from and the slice of that name it is (``""``: the whole)."""

    key: str
    ref: Tensor
    name: str
    spec: str


def _saved_entries(items):
    """The tensors to write for ``[(name, var)]``: a partitioned variable's parts each as a
    slice of its logical name (TF1's ``save_slice_info``)."""
    out = []
    for name, var in items:
        if isinstance(var, PartitionedVariable):
            for part in var:
                spec = part._save_slice_info.spec
                out.append(_Saved(slice_key(name, spec), part._ref(), name, spec))
        else:
            out.append(_Saved(name, var._ref() if isinstance(var, Variable) else var, name, ""))
    return out


def _byte_strings(texts):
    """A string vector feed (bytes items, as the wire carries them)."""
    out = np.empty(len(texts), dtype=object)
    out[:] = [os.fsencode(text) for text in texts]
    return out


class Saver:
    """Saves and restores variables (TF1 ``tf.train.Saver``).

    Args:
        var_list: None (all global variables), a list of Variables, or a dict
            ``{name in the checkpoint: Variable}``.
        max_to_keep: how many recent checkpoints to keep (None or 0: all).
        keep_checkpoint_every_n_hours: additionally keep one checkpoint per this many hours.
        sharded: each task saves and restores its own variables (one shard file per task
            plus an index); otherwise one Save op writes every variable into one file.
        name: the name scope of the Saver's ops (default ``save``).
        saver_def: rebuild around existing ops named by ``as_saver_def()`` instead.
        allow_empty: build even when there is nothing to save.

    Raises:
        ValueError: if there are no variables (and not ``allow_empty``) or names collide.
    """

    def __init__(self, var_list=None, max_to_keep=5, keep_checkpoint_every_n_hours=10000.0,
                 sharded=False, name=None, saver_def=None, allow_empty=False, graph=None):
        self._max_to_keep = max_to_keep
        self._keep_every_seconds = keep_checkpoint_every_n_hours * 3600.0
        self._next_keep_time = time.time() + self._keep_every_seconds
        self._sharded = bool(sharded)
        self._last_checkpoints = []     # [(prefix, time)], oldest first
        self._lock = trio.Lock()
        if saver_def is not None:
            self._from_saver_def(saver_def, graph or get_default_graph())
            return
        items = _named_saveables(var_list)
        if not items:
            if not allow_empty:
                raise ValueError("No variables to save")
            self._graph = graph or get_default_graph()
        else:
            first = items[0][1]
            self._graph = (first._ref() if isinstance(first, Variable) else first).graph
        self._build(items, name or "save")
        self._graph.add_to_collection(GraphKeys.SAVERS, self)

    def _build(self, items, name):
        graph = self._graph
        entries = _saved_entries(items)
        names = [n for n, _ in items]
        with graph.as_default(), graph.name_scope(name):
            self._filename = placeholder("string", shape=[], name="filename")
            self._step = placeholder_with_default(np.int64(-1), shape=[], name="global_step")
            if self._sharded and entries:
                save_op, assigns = self._build_shards(entries)
            else:
                # On the CPU of the first variable's task (when it names one): the worker that
                # owns the variables holds the checkpoint, for this client and the next.
                first = entries[0].ref.op.device if entries else None
                with graph.device(_save_device(first) if entries else ""):
                    save_op = _ops.save(self._filename, self._step, [e.key for e in entries],
                                        [e.ref for e in entries], name="Save")
                assigns = self._restore_group(entries, "Restore", save_op)
            with control_dependencies([save_op]):
                self._save_tensor = identity(self._filename, name="control_dependency")
            self._restore_op = group(*assigns, name="restore_all")
            self._build_bookkeeping(save_op)
        self._names = names

    def _build_bookkeeping(self, save_op):
        """The ops that write the meta graph and state file, and find the latest checkpoint,
        where ``save_op`` writes the data (used by sessions on a cluster)."""
        graph = self._graph
        with graph.colocate_with(save_op):
            def text(name, shape=()):
                value = np.array(b"", dtype=object) if shape == () else np.array([], dtype=object)
                return placeholder_with_default(value, shape=list(shape), name=name)
            self._commit_feeds = {k: text(k, s) for k, s in (
                ("meta_graph", ()), ("kept", (None,)), ("doomed", (None,)),
                ("latest_filename", ()), ("meta_graph_suffix", ()), ("checkpoint_dir", ()))}
            feeds = self._commit_feeds
            with control_dependencies([save_op]):  # one step saves, then commits
                self._commit_op = _file_ops.commit_checkpoint(
                    self._filename, feeds["meta_graph"], feeds["kept"], feeds["doomed"],
                    feeds["latest_filename"], feeds["meta_graph_suffix"],
                    name="CommitCheckpoint")
            self._latest = _file_ops.latest_checkpoint(
                feeds["checkpoint_dir"], feeds["latest_filename"], name="LatestCheckpoint")

    def _restore_group(self, entries, name, save_op=None):
        """One Restore of ``entries`` (a part: its region of the logical tensor) and their
        Assigns, beside ``save_op`` when given (None: placed by the scope)."""
        refs = [e.ref for e in entries]
        with self._graph.colocate_with(save_op):
            restored = _ops.restore(self._filename, [e.name for e in entries],
                                    [r.dtype for r in refs], [r.shape for r in refs],
                                    [e.spec for e in entries], name=name)
        return [assign(ref, value, validate_shape=ref.shape.is_fully_defined())
                for ref, value in zip(refs, restored)]

    def _build_shards(self, entries):
        """Per task a Save of its variables (and parts) into its shard and their Restore,
        then the merge."""
        shards = {}
        for entry in entries:
            shards.setdefault(_save_device(entry.ref.op.device), []).append(entry)
        saves, assigns, count = [], [], len(shards)
        for shard, (where, members) in enumerate(shards.items()):
            with self._graph.device(where):
                shard_file = _ops.sharded_filename(self._filename, shard, count,
                                                   name=f"sharded_filename_{shard}")
                saves.append(_ops.save(shard_file, self._step, [e.key for e in members],
                                       [e.ref for e in members], name=f"Save_{shard}"))
                assigns += self._restore_group(members, f"Restore_{shard}")
        with self._graph.device(next(iter(shards))), control_dependencies(saves):
            merge = _ops.merge_checkpoint_shards(
                self._filename, self._step, [[e.key for e in m] for m in shards.values()],
                name="MergeCheckpointShards")
        return merge, assigns

    def _from_saver_def(self, saver_def, graph):
        self._graph = graph
        self._filename = graph.get_tensor_by_name(saver_def["filename_tensor_name"])
        self._step = graph.get_tensor_by_name(saver_def["step_tensor_name"])
        self._save_tensor = graph.get_tensor_by_name(saver_def["save_tensor_name"])
        self._restore_op = graph.get_operation_by_name(saver_def["restore_op_name"])
        self._names = list(saver_def.get("tensor_names", ()))
        self._max_to_keep = saver_def.get("max_to_keep", self._max_to_keep)
        hours = saver_def.get("keep_checkpoint_every_n_hours")
        if hours is not None:
            self._keep_every_seconds = hours * 3600.0
            self._next_keep_time = time.time() + self._keep_every_seconds
        self._sharded = bool(saver_def.get("sharded", False))
        self._commit_op = self._latest = None  # a meta graph of before the bookkeeping ops
        if "commit_op_name" in saver_def:
            self._commit_op = graph.get_operation_by_name(saver_def["commit_op_name"])
            self._latest = graph.get_tensor_by_name(saver_def["latest_tensor_name"])
            self._commit_feeds = {key: graph.get_tensor_by_name(name)
                                  for key, name in saver_def["commit_feed_names"].items()}

    def as_saver_def(self):
        """The names of this Saver's ops and its settings, as plain data."""
        return {"version": SAVER_DEF_VERSION,
                "filename_tensor_name": self._filename.name,
                "step_tensor_name": self._step.name,
                "save_tensor_name": self._save_tensor.name,
                "restore_op_name": self._restore_op.name,
                "tensor_names": list(self._names),
                "max_to_keep": self._max_to_keep,
                "keep_checkpoint_every_n_hours": self._keep_every_seconds / 3600.0,
                "sharded": self._sharded,
                **({} if self._commit_op is None else {
                    "commit_op_name": self._commit_op.name,
                    "latest_tensor_name": self._latest.name,
                    "commit_feed_names": {k: t.name for k, t in self._commit_feeds.items()}})}

    @property
    def last_checkpoints(self):
        """Prefixes of the checkpoints this Saver keeps, oldest first."""
        return [path for path, _ in self._last_checkpoints]

    def set_last_checkpoints(self, last_checkpoints):
        """Replace the list of kept checkpoints (TF1's deprecated ``set_last_checkpoints``).

        Raises:
            TypeError: if ``last_checkpoints`` is not a list.
        """
        if not isinstance(last_checkpoints, list):
            raise TypeError(f"last_checkpoints must be a list, got {type(last_checkpoints).__name__}")
        # TF1 gives them an infinite time: they leave the list but are never deleted.
        self._last_checkpoints = [(path, float("inf")) for path in last_checkpoints]

    def set_last_checkpoints_with_time(self, last_checkpoints_with_time):
        """Replace the kept checkpoints with ``[(path, timestamp), ...]``."""
        self._last_checkpoints = [(path, when) for path, when in last_checkpoints_with_time]

    def recover_last_checkpoints(self, checkpoint_paths):
        """Adopt existing checkpoints (e.g. after a restart) so ``max_to_keep`` covers them."""
        found = [(p, os.path.getmtime(_committed_file(p))) for p in checkpoint_paths
                 if checkpoint_exists(p)]
        self._last_checkpoints = sorted(found, key=lambda item: item[1])

    async def save(self, sess, save_path, global_step=None, latest_filename=None,
                   meta_graph_suffix="meta", write_meta_graph=True, write_state=True):
        """Write a checkpoint of the variables' current values.

        Args:
            sess: an open Session on this Saver's graph.
            save_path: the checkpoint prefix, e.g. ``"ckpt/model"``.
            global_step: an int, or a Variable/Tensor whose value is used; appended as
                ``-<step>`` to the prefix and stored in the file's metadata.
            latest_filename: name of the state file (default ``checkpoint``).
            meta_graph_suffix: suffix of the meta graph file.
            write_meta_graph: also export the meta graph to ``<path>.<suffix>`` (on by
                default, as in TF1, so ``import_meta_graph`` can rebuild the model).
            write_state: update the state file (and apply ``max_to_keep``).

        Returns:
            The checkpoint path (prefix with the step), usable with ``restore``.

        Raises:
            OpError: from the Save op (FailedPreconditionError for uninitialized variables).
        """
        in_trio = getattr(sess, "in_trio", None)
        if in_trio is not None:  # an asyncio session (asyncflow.aio): file work runs in trio
            return await in_trio(self.save, sess.trio_session, save_path, global_step,
                                 latest_filename, meta_graph_suffix, write_meta_graph,
                                 write_state)
        step = None
        if global_step is not None:
            step = global_step if isinstance(global_step, (int, np.integer)) else \
                await sess.run(global_step)
            step = int(step)
        path = save_path if step is None else f"{save_path}-{step}"
        if self._on_cluster(sess):
            return await self._save_on_cluster(sess, path, step, latest_filename,
                                               meta_graph_suffix, write_meta_graph, write_state)
        directory = os.path.dirname(os.path.abspath(path))
        await trio.to_thread.run_sync(lambda: os.makedirs(directory, exist_ok=True))
        async with self._lock:
            await sess.run(self._save_tensor, feed_dict={
                self._filename: data_path(path), self._step: -1 if step is None else step})
            if write_meta_graph:
                await self._write_meta_graph(f"{path}.{meta_graph_suffix}")
            if write_state:
                doomed = self._record(path)
                kept = self.last_checkpoints
                await trio.to_thread.run_sync(self._commit_state, directory, path, kept,
                                              doomed, latest_filename, meta_graph_suffix)
        return path

    def _on_cluster(self, sess):
        """Whether ``sess`` runs on a cluster's workers, where this Saver keeps all of a
        checkpoint's files on the worker its Save op runs on (a Saver rebuilt from an old
        meta graph without the bookkeeping ops keeps the client-side files)."""
        return self._commit_op is not None and not isinstance(
            getattr(sess, "_target", None), LocalTarget)

    async def _save_on_cluster(self, sess, path, step, latest_filename, meta_graph_suffix,
                               write_meta_graph, write_state):
        """``save`` on a cluster, in one step: the Save op writes the data (creating its
        folder), then ``CommitCheckpoint`` (ordered after it) writes the meta graph and the
        state file beside it, on the same worker, relative to that worker's data directory."""
        async with self._lock:
            feeds = self._commit_feeds
            feed = {self._filename: data_path(path), self._step: -1 if step is None else step,
                    feeds["meta_graph_suffix"]: meta_graph_suffix,
                    feeds["latest_filename"]: latest_filename or ""}
            if write_meta_graph:
                feed[feeds["meta_graph"]] = self._meta_graph_bytes(f"{path}.{meta_graph_suffix}")
            kept_before = (list(self._last_checkpoints), self._next_keep_time)
            if write_state:
                doomed = self._record(path)
                feed[feeds["kept"]] = _byte_strings(self.last_checkpoints)
                feed[feeds["doomed"]] = _byte_strings(doomed)
            try:
                await sess.run(self._commit_op, feed_dict=feed)
            except BaseException:  # nothing was committed: the kept list stays as it was
                self._last_checkpoints, self._next_keep_time = kept_before
                raise
        return path

    def _export_meta_graph(self, filename):
        """This Saver's meta graph, or None (logged) when the graph cannot be serialized (a
        py_func's Python callable): the checkpoint itself stands without it."""
        try:
            return meta_graph.export_meta_graph(graph=self._graph, saver_def=self.as_saver_def())
        except (TypeError, ValueError) as exc:
            logging.getLogger(__name__).warning(
                "Saver.save: no meta graph written to %s: %s (pass write_meta_graph=False to "
                "skip it)", filename, exc)
            return None

    def _meta_graph_bytes(self, filename):
        meta = self._export_meta_graph(filename)
        return b"" if meta is None else meta_graph.encode_file(meta)

    async def latest_checkpoint(self, sess, checkpoint_dir, latest_filename=None):
        """``af.train.latest_checkpoint`` read where this Saver writes with ``sess``.

        On a cluster, the state file is read by the worker that runs this Saver's Save op,
        relative to its data directory (where ``save`` wrote it); in a local session this is
        ``af.train.latest_checkpoint(checkpoint_dir)``.

        Returns:
            The latest complete checkpoint's prefix, or None.
        """
        in_trio = getattr(sess, "in_trio", None)
        if in_trio is not None:
            return await in_trio(self.latest_checkpoint, sess.trio_session, checkpoint_dir,
                                 latest_filename)
        if not self._on_cluster(sess):
            return latest_checkpoint(checkpoint_dir, latest_filename)
        feeds = self._commit_feeds
        found = await sess.run(self._latest, feed_dict={
            feeds["checkpoint_dir"]: checkpoint_dir,
            feeds["latest_filename"]: latest_filename or ""})
        found = found.decode() if isinstance(found, bytes) else str(found)
        return found or None

    async def _write_meta_graph(self, filename):
        """Export the meta graph next to the checkpoint (skipped, logged, where it cannot be
        serialized)."""
        meta = self._export_meta_graph(filename)
        if meta is None:
            return
        await trio.to_thread.run_sync(meta_graph.write_meta_graph_file, filename, meta)

    def _record(self, path):
        """Add ``path`` to the kept list; return the prefixes to delete."""
        now = time.time()
        self._last_checkpoints = [item for item in self._last_checkpoints if item[0] != path]
        self._last_checkpoints.append((path, now))
        doomed = []
        if not self._max_to_keep or self._max_to_keep <= 0:
            return doomed
        while len(self._last_checkpoints) > self._max_to_keep:
            old, stamp = self._last_checkpoints.pop(0)
            if stamp > self._next_keep_time:
                self._next_keep_time += self._keep_every_seconds
            else:
                doomed.append(old)
        return doomed

    _commit_state = staticmethod(commit_state)

    async def restore(self, sess, save_path):
        """Assign the variables their values in checkpoint ``save_path``.

        Raises:
            ValueError: if ``save_path`` is None.
            NotFoundError: if the file or some variables are missing (all listed).
            InvalidArgumentError: if dtypes or shapes differ (all mismatches listed).
            DataLossError: if the file is corrupt.
        """
        if save_path is None:
            raise ValueError("Can't load save_path when it is None.")
        await sess.run(self._restore_op, feed_dict={self._filename: data_path(save_path)})

    def export_meta_graph(self, filename=None, collection_list=None, as_text=False):
        """Export the graph, its collections and this Saver (see ``af.train.export_meta_graph``)."""
        return meta_graph.export_meta_graph(filename, graph=self._graph,
                                            collection_list=collection_list,
                                            saver_def=self.as_saver_def(), as_text=as_text)


def _saver_from_def(saver_def, graph):
    return Saver(saver_def=saver_def, graph=graph)


def import_meta_graph(meta_graph_or_file, clear_devices=False, import_scope=None):
    """Import a meta graph into the default graph and rebuild its collections and Saver.

    Args:
        meta_graph_or_file: a path, or the data ``export_meta_graph`` returned.
        clear_devices: ignore the devices recorded in the graph.
        import_scope: a name prefix for the imported ops (default: none, names unchanged).

    Returns:
        A Saver for the imported variables, or None when there is nothing to save.

    Raises:
        ValueError: for a malformed file or a name clash with the default graph.
    """
    graph, saver_def = meta_graph.import_scoped_meta_graph(
        meta_graph_or_file, _saver_from_def, clear_devices=clear_devices,
        import_scope=import_scope)
    if saver_def is not None:
        for saver in graph.get_collection(GraphKeys.SAVERS):
            if saver.as_saver_def()["save_tensor_name"] == saver_def["save_tensor_name"]:
                return saver
        return Saver(saver_def=saver_def, graph=graph)
    if graph.get_collection(GraphKeys.GLOBAL_VARIABLES):
        return Saver()
    return None


def default_saver(graph=None):
    """The graph's Saver (its one SAVERS entry), else a new sharded Saver over the global
    variables.

    Raises:
        RuntimeError: if the SAVERS collection holds more than one Saver.
    """
    graph = graph or get_default_graph()
    savers = graph.get_collection(GraphKeys.SAVERS)
    if len(savers) > 1:
        raise RuntimeError(f"More than one item in collection {GraphKeys.SAVERS!r}: pass the "
                           "Saver to use in a Scaffold")
    if savers:
        return savers[0]
    with graph.as_default():  # sharded, as TF1's Scaffold: each task saves its own variables
        return Saver(sharded=True, allow_empty=True)
