"""The ``Restore`` kernel and slices of variables in a checkpoint (TF1's ``save_slice_info``).

A partitioned variable is saved under its one logical name: each part is a tensor of the
file (or of its task's shard) under the key ``slice_key(name, spec)``, ``"<name>|<spec>"``,
where ``spec`` is TF1's slice spec string: the full shape, then ``offset,length`` per
dimension, e.g. ``"10 4 0,4:0,4"`` for rows 0..3 of a ``[10, 4]`` table. A plain variable is
saved under its name as before. So the key says which logical variable a tensor belongs to,
its full shape and where it sits, and a sharded checkpoint's index (which lists keys) is
enough to find the shards holding any region of a variable without opening the others.

``Restore`` reads, per requested name, either the whole tensor (``shape_and_slices`` entry
``""``) or one region of it (a spec, as TF1's ``RestoreV2``), from whatever layout was saved:
the whole tensor, or any set of slices. It reads only the saved tensors that overlap the
region and copies their intersections into the answer, so a checkpoint saved with 4 parts
restores into 3 parts, into one unpartitioned variable, and the other way round; each part's
Restore (on its task with ``Saver(sharded=True)``) reads only the slices it needs.

Errors: a name with neither a whole tensor nor slices is missing (``NotFoundError``, all
listed); a saved full shape that differs from the graph's, or a different dtype, is an
``InvalidArgumentError`` naming the variable and both shapes (or dtypes); slices that do not
cover the wanted region, or that disagree about the full shape, are ``DataLossError``.
"""
from __future__ import annotations

import math
import os

import numpy as np

from asyncflow import dtypes, errors
from asyncflow.kernels.checkpoint import (
    index_path, read_checkpoint, read_index, read_safetensors_entries,
)
from asyncflow.kernels.registry import register_kernel

SLICE_SEPARATOR = "|"  # never in an op name, so never in a variable's name


def slice_key(name, spec):
    """The checkpoint key of the slice ``spec`` of variable ``name``."""
    return f"{name}{SLICE_SEPARATOR}{spec}"


def parse_spec(spec, rank=None):
    """``(full_shape, offsets, lengths)`` of a TF1 slice spec (``"-"`` is a whole dimension).

    Raises:
        ValueError: naming the spec when it is malformed or a slice leaves the full shape.
    """
    try:
        head, _, slices = spec.strip().rpartition(" ")
        full = [int(d) for d in head.split()]
        offsets, lengths = [], []
        for dim, part in zip(full, slices.split(":")):
            if part == "-":
                offsets.append(0)
                lengths.append(dim)
            else:
                start, length = (int(v) for v in part.split(","))
                offsets.append(start)
                lengths.append(length)
    except ValueError:
        raise ValueError(f"malformed slice spec {spec!r}: expected the full shape then "
                         "'offset,length' per dimension, e.g. '10 4 0,5:0,4'") from None
    if len(offsets) != len(full) or len(slices.split(":")) != len(full) or \
            (rank is not None and len(full) != rank):
        raise ValueError(f"slice spec {spec!r} does not give one slice per dimension")
    for dim, start, length in zip(full, offsets, lengths):
        if start < 0 or length < 0 or start + length > dim:
            raise ValueError(f"slice spec {spec!r} leaves the full shape {full}")
    return tuple(full), tuple(offsets), tuple(lengths)


def split_key(key):
    """``(name, (full_shape, offsets, lengths))`` of a slice key; None for a whole tensor."""
    name, separator, spec = key.rpartition(SLICE_SEPARATOR)
    if not separator:
        return None
    try:
        return name, parse_spec(spec)
    except ValueError:
        return None


def checkpoint_keys(path):
    """The tensor keys of a checkpoint (its file's header, or its sharded index)."""
    if os.path.exists(path) or not os.path.isfile(index_path(path)):
        return set(read_safetensors_entries(path)[0])
    return set(read_index(index_path(path)))


def saved_variables(path):
    """``{logical name: (dtype, full shape)}`` of a checkpoint, its slices merged (the
    headers only are read: of the file, or of every shard of a sharded checkpoint)."""
    if os.path.exists(path) or not os.path.isfile(index_path(path)):
        entries = read_safetensors_entries(path)[0]
    else:
        entries = {}
        for shard in sorted(set(read_index(index_path(path)).values())):
            entries.update(read_safetensors_entries(shard)[0])
    out = {}
    for key, (dtype, shape) in entries.items():
        parsed = split_key(key)
        out[key if parsed is None else parsed[0]] = \
            (dtype, tuple(shape) if parsed is None else parsed[1][0])
    return out


def _slices_by_name(keys):
    out = {}
    for key in keys:
        parsed = split_key(key)
        if parsed is not None:
            out.setdefault(parsed[0], []).append((key,) + parsed[1])
    return out


def _overlap(offsets, lengths, wanted_offsets, wanted_lengths):
    """Per dimension ``(start, stop)`` of the intersection, or None when it is empty."""
    out = []
    for start, length, w_start, w_length in zip(offsets, lengths, wanted_offsets, wanted_lengths):
        low, high = max(start, w_start), min(start + length, w_start + w_length)
        if high <= low:
            return None
        out.append((low, high))
    return out


class _Plan:
    """Where one requested tensor comes from: ``pieces`` = ``[(key, saved offsets)]``."""

    def __init__(self, name, dtype, full, offsets, lengths, pieces, saved_full, whole,
                 shape=None):
        self.name, self.dtype, self.full, self.shape = name, dtype, full, shape
        self.offsets, self.lengths = offsets, lengths
        self.pieces, self.saved_full, self.whole = pieces, saved_full, whole


def _plan(name, dtype, shape, spec, keys, slices, path):
    """The plan of one requested tensor, or a string saying why it cannot be restored
    (``"missing"`` or a mismatch)."""
    if spec:
        full, offsets, lengths = parse_spec(spec)
    else:
        full, offsets, lengths = None, None, None
    if name in keys:
        return _Plan(name, dtype, full, offsets, lengths, [(name, None)], None, True, shape)
    saved = slices.get(name)
    if not saved:
        return "missing"
    fulls = {s[1] for s in saved}
    if len(fulls) > 1:
        raise errors.DataLossError(None, None, f"Checkpoint {path} is corrupt: the slices of "
                                   f"{name} disagree about its full shape: {sorted(fulls)}")
    saved_full = fulls.pop()
    if full is None:  # the whole variable: its static shape must be the saved full shape
        if not shape.is_compatible_with(saved_full):
            return (f"{name}: shape {list(saved_full)} in the checkpoint (saved in "
                    f"{len(saved)} slices), {_text(shape)} in the graph")
        full, offsets, lengths = saved_full, (0,) * len(saved_full), saved_full
    elif tuple(full) != saved_full:
        return (f"{name}: shape {list(saved_full)} in the checkpoint (saved in {len(saved)} "
                f"slices), {list(full)} in the graph")
    pieces = [(key, offs) for key, _, offs, lens in saved
              if _overlap(offs, lens, offsets, lengths) is not None]
    covered = sum(math.prod(b - a for a, b in _overlap(offs, lens, offsets, lengths))
                  for _, _, offs, lens in saved if _overlap(offs, lens, offsets, lengths))
    if covered != math.prod(lengths):
        raise errors.DataLossError(None, None, f"Checkpoint {path} is corrupt: the slices of "
                                   f"{name} cover {covered} of the {math.prod(lengths)} "
                                   f"elements of slice {spec or 'all'}")
    return _Plan(name, dtype, full, offsets, lengths, sorted(pieces), saved_full, False)


def _text(shape):
    """A static shape as a list (``None`` for an unknown dimension), or ``<unknown>``."""
    return shape.as_list() if shape.ndims is not None else "<unknown>"


def _check_read(plan, entries):
    """A mismatch of the tensors read with what the graph wants, as a string, or None."""
    for key, _ in plan.pieces:
        got = entries[key][0]
        if got is not plan.dtype:
            got = got.name if isinstance(got, dtypes.DType) else got
            return f"{plan.name}: dtype {got} in the checkpoint, {plan.dtype.name} in the graph"
    if plan.whole:
        stored = tuple(entries[plan.name][1])
        if plan.full is not None and stored != tuple(plan.full):
            return f"{plan.name}: shape {list(stored)} in the checkpoint, {list(plan.full)} " \
                   "in the graph"
        if plan.full is None and not plan.shape.is_compatible_with(stored):
            return f"{plan.name}: shape {list(stored)} in the checkpoint, {_text(plan.shape)} " \
                   "in the graph"
    return None


def _assemble(plan, tensors):
    """The requested region as one read-only array of its own."""
    if plan.whole:
        array = tensors[plan.name]
        if plan.offsets is None:
            return array
        region = tuple(slice(o, o + n) for o, n in zip(plan.offsets, plan.lengths))
        out = np.ascontiguousarray(array[region])
    else:
        out = np.empty(plan.lengths, dtype=tensors[plan.pieces[0][0]].dtype)
        for key, offsets in plan.pieces:
            piece = tensors[key]
            box = _overlap(offsets, piece.shape, plan.offsets, plan.lengths)
            source = tuple(slice(a - o, b - o) for (a, b), o in zip(box, offsets))
            target = tuple(slice(a - o, b - o) for (a, b), o in zip(box, plan.offsets))
            out[target] = piece[source]
    out.flags.writeable = False  # nobody else holds it: Assign need not copy it
    return out


def restore_tensors(path, names, kinds, shapes, specs, op_name=None):
    """Read ``names`` (each whole, or the region its spec names) from checkpoint ``path``.

    Returns:
        The arrays, aligned with ``names``.

    Raises:
        NotFoundError: listing every name with nothing saved (and any mismatch besides).
        InvalidArgumentError: listing every dtype or full-shape mismatch.
        DataLossError: if the file is malformed or its slices do not cover a region.
    """
    keys = checkpoint_keys(path)
    slices = _slices_by_name(keys)
    plans, missing, wrong = [], [], []
    for name, dtype, shape, spec in zip(names, kinds, shapes, specs):
        plan = _plan(name, dtype, shape, spec, keys, slices, path)
        if plan == "missing":
            missing.append(name)
        elif isinstance(plan, str):
            wrong.append(plan)
        else:
            plans.append(plan)
    needed = sorted({key for plan in plans for key, _ in plan.pieces})
    tensors, entries = read_checkpoint(path, needed) if plans else ({}, {})
    for plan in plans:
        if any(key not in tensors and key in entries for key, _ in plan.pieces):
            continue  # a dtype asyncflow lacks: reported by _check_read
        if any(key not in entries for key, _ in plan.pieces):
            missing.append(plan.name)  # the file changed between listing and reading
    wrong += [w for w in (_check_read(p, entries) for p in plans
                          if all(k in entries for k, _ in p.pieces)) if w]
    if missing:
        raise errors.NotFoundError(
            None, op_name, f"Restoring from checkpoint {path} failed: {len(missing)} key(s) "
            f"not found in the checkpoint: {', '.join(missing)}"
            + (f"; also mismatched: {'; '.join(wrong)}" if wrong else ""))
    if wrong:
        raise errors.InvalidArgumentError(
            None, op_name, f"Restoring from checkpoint {path} failed: {len(wrong)} "
            f"mismatch(es) between the checkpoint and the graph: {'; '.join(wrong)}")
    by_name = {id(plan): _assemble(plan, tensors) for plan in plans}
    return [by_name[id(plan)] for plan in plans]


def _string(value):
    value = value.reshape(()).item() if hasattr(value, "reshape") else value
    return value.decode() if isinstance(value, bytes) else str(value)


@register_kernel("Restore", blocking_io=True, abandon=True)
def _restore(ctx, filename):
    path = ctx.resolve_path(_string(filename))
    names, kinds, shapes = (ctx.attrs[k] for k in ("tensor_names", "dtypes", "shapes"))
    specs = ctx.attrs.get("shape_and_slices") or ("",) * len(names)
    arrays = restore_tensors(path, names, kinds, shapes, specs, ctx.name)
    return tuple(ctx.to_device(array) for array in arrays)
