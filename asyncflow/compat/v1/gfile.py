"""``tf.gfile``: TF1's file calls, on the local file system."""
import glob as _glob
import os
import shutil

from asyncflow import errors as _errors


def _not_found(path, exc):
    return _errors.NotFoundError(None, None, f"{path}: {exc.strerror or exc}")


class GFile:
    """``tf.gfile.GFile(name, mode='r')``: a file object (text or binary by ``mode``)."""

    def __init__(self, name, mode="r"):
        try:
            self._file = open(name, mode)  # noqa: SIM115 - closed by close()/__exit__
        except FileNotFoundError as exc:
            raise _not_found(name, exc) from None
        self.name = name

    def __getattr__(self, attr):
        return getattr(self._file, attr)

    def __iter__(self):
        return iter(self._file)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._file.close()
        return False

    def size(self):
        return os.path.getsize(self.name)


Open = GFile
FastGFile = GFile


def Exists(path):  # noqa: N802 - TF1's names
    return os.path.exists(path)


def IsDirectory(path):  # noqa: N802
    return os.path.isdir(path)


def MakeDirs(path):  # noqa: N802
    os.makedirs(path, exist_ok=True)


def MkDir(path):  # noqa: N802
    os.mkdir(path)


def ListDirectory(path):  # noqa: N802
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError as exc:
        raise _not_found(path, exc) from None


def Glob(pattern):  # noqa: N802
    return sorted(_glob.glob(pattern))


def Remove(path):  # noqa: N802
    try:
        os.remove(path)
    except FileNotFoundError as exc:
        raise _not_found(path, exc) from None


def DeleteRecursively(path):  # noqa: N802
    if not os.path.exists(path):
        raise _errors.NotFoundError(None, None, f"{path}: no such file or directory")
    if os.path.isdir(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def Copy(oldpath, newpath, overwrite=False):  # noqa: N802
    if os.path.exists(newpath) and not overwrite:
        raise _errors.AlreadyExistsError(None, None, f"{newpath} exists (overwrite=False)")
    shutil.copyfile(oldpath, newpath)


def Rename(oldname, newname, overwrite=False):  # noqa: N802
    if os.path.exists(newname) and not overwrite:
        raise _errors.AlreadyExistsError(None, None, f"{newname} exists (overwrite=False)")
    os.replace(oldname, newname)


def Stat(path):  # noqa: N802
    return os.stat(path)


def Walk(top, in_order=True):  # noqa: N802
    for root, dirs, files in os.walk(top):
        yield root, sorted(dirs), sorted(files)
