"""Rendezvous keys: the one place their format is written and read.

A Send and its Recv meet in a step's rendezvous under a key both sides compute alone:
``src_device;src_incarnation_hex;dst_device;tensor_name;frame_id:iter`` (TF's
``Rendezvous::CreateKey``). ``make_key`` writes it, ``parse_key`` reads it back,
``source_device`` reads only its first field; ``frame_id``/``frame_iter`` make its last
field, the same on every process.

Why a base module: four layers use the format and none owns it. The Send/Recv kernels
(``kernels/transfer.py``) build keys, and kernels may not import the executor; the local
rendezvous (``exec/rendezvous.py``) and the executor's frames (``exec/frames.py``) name keys
and frames; the worker's rendezvous (``cluster/remote_rendezvous.py``) parses keys to pull
remote values. Like ``device_names.py`` it is pure string work, so it sits below all of them
and each imports it directly. Pure data: no trio, no devices, no graphs.
"""
from __future__ import annotations

import hashlib

ROOT_FRAME_ITER = "0:0"


def frame_iter(frame_id, iteration):
    """A key's ``"frame_id:iter_id"``: where its value lives (``ROOT_FRAME_ITER`` outside
    loops)."""
    return f"{frame_id}:{iteration}"


def frame_id(parent_id, parent_iteration, frame_name):
    """The id of a child frame, the same on every process (blake2b, never Python's salted
    hash): the frame id of ``frame_iter``."""
    digest = hashlib.blake2b(f"{parent_id}:{parent_iteration}:{frame_name}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def make_key(src_device, src_incarnation, dst_device, tensor_name, frame_iter=ROOT_FRAME_ITER):
    """The rendezvous key of one transfer, identical on every process that computes it.

    The one place the key format is written (``parse_key`` reads it back): the local and the
    distributed rendezvous, the Send/Recv kernels and the worker all go through these two.

    Args:
        src_device: full name of the sending device.
        src_incarnation: the sending device's incarnation (an int).
        dst_device: full name of the receiving device.
        tensor_name: the edge's unique name (the Send/Recv ``tensor_name`` attr).
        frame_iter: ``"frame_id:iter_id"`` of the value (``"0:0"`` outside loops).

    Returns:
        ``"src;incarnation_hex;dst;tensor_name;frame:iter"``.
    """
    return f"{src_device};{int(src_incarnation):016x};{dst_device};{tensor_name};{frame_iter}"


def parse_key(key):
    """``(src_device, incarnation, dst_device, tensor_name, frame_iter)`` of a rendezvous key.

    Raises:
        ValueError: for a malformed key, naming it and the expected form.
    """
    parts = key.split(";")
    if len(parts) != 5 or not all(parts):
        raise ValueError(f"malformed rendezvous key {key!r} (expected "
                         "'src_device;incarnation_hex;dst_device;tensor_name;frame:iter')")
    try:
        incarnation = int(parts[1], 16)
    except ValueError:
        raise ValueError(f"malformed incarnation {parts[1]!r} in rendezvous key {key!r}") from None
    return parts[0], incarnation, parts[2], parts[3], parts[4]


def source_device(key):
    """The sending device's name in a rendezvous key (its first field), without a full parse."""
    return key.split(";", 1)[0]
