"""Where a worker's ops may touch files: its data directory.

A worker runs graphs that other processes send it, and some ops name files: ``Save`` writes a
checkpoint, ``Restore`` and the readers read. On a worker every such path is resolved by
:meth:`DataDirectory.resolve` before the op opens anything: a relative path is taken inside the
data directory, symbolic links are followed, and the result must lie inside the directory and
outside ``/proc``, ``/sys`` and ``/dev``, or the op fails with ``PermissionDeniedError`` having
read and written nothing. A local session (the user's own process) has no data directory, and
its paths are used as given.

What this does not stop: a process that can change the directory's contents while an op runs
(a symbolic link swapped in between the check and the open). The data directory is meant to be
writable by the worker alone.
"""
from __future__ import annotations

import os

from asyncflow import errors

_NEVER = ("/proc", "/sys", "/dev")


class DataDirectory:
    """The directory a worker's file ops are confined to.

    Args:
        path: the directory (made absolute and resolved once, here).

    Raises:
        ValueError: if ``path`` is not an existing directory.
    """

    def __init__(self, path):
        self.path = os.path.realpath(os.fspath(path))
        if not os.path.isdir(self.path):
            raise ValueError(f"data directory {path!r} does not exist or is not a directory")

    def __repr__(self):
        return f"DataDirectory({self.path!r})"

    def resolve(self, path, op_name=None):
        """The real path of ``path``, checked to lie inside the data directory.

        Raises:
            PermissionDeniedError: ``path`` resolves outside the directory (``..``, another
                absolute path, a symbolic link out), into ``/proc``, ``/sys`` or ``/dev``, or
                holds a NUL byte.
        """
        text = os.fsdecode(path)
        if "\0" in text:
            raise errors.PermissionDeniedError(None, op_name, "file path holds a NUL byte")
        real = os.path.realpath(os.path.join(self.path, text))
        inside = real == self.path or real.startswith(self.path.rstrip(os.sep) + os.sep)
        special = any(real == top or real.startswith(top + os.sep) for top in _NEVER)
        if not inside or special:
            raise errors.PermissionDeniedError(
                None, op_name, f"file path {text!r:.200} resolves outside this worker's data "
                f"directory {self.path}; name a file inside it (asyncflow worker --data-dir)")
        return real
