"""A worker's data directory (``exec/files.py``) and the checkpoint writer's cleanup of
temporary files left by a killed save, on real files."""
import os
import time

import numpy as np
import pytest

from asyncflow import errors
from asyncflow.kernels.checkpoint import STALE_TEMPORARY_S, read_safetensors, write_safetensors
from asyncflow.exec.files import DataDirectory


@pytest.fixture
def layout(tmp_path):
    data, outside = tmp_path / "data", tmp_path / "outside"
    (data / "sub").mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, data / "out")
    os.symlink(data / "sub", data / "in")
    return DataDirectory(data), data, outside


def test_paths_inside_resolve_and_everything_else_is_denied(layout):
    directory, data, outside = layout
    real = os.path.realpath(data)
    assert directory.resolve("model.ckpt") == os.path.join(real, "model.ckpt")
    assert directory.resolve(str(data / "sub" / "x")) == os.path.join(real, "sub", "x")
    assert directory.resolve("in/x") == os.path.join(real, "sub", "x")  # a link that stays in
    assert directory.resolve(b"sub/../y") == os.path.join(real, "y")
    for path in ["../outside/x", str(outside / "x"), "out/x", "/proc/self/environ",
                 "/etc/passwd", "sub/../../outside/x", "a\0b", "/"]:
        with pytest.raises(errors.PermissionDeniedError, match="data directory|NUL"):
            directory.resolve(path, "save/Save")


def test_a_data_directory_must_exist(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        DataDirectory(tmp_path / "missing")


def test_a_killed_saves_temporary_file_is_removed_by_the_next_save(tmp_path):
    path = tmp_path / "model.safetensors"
    stale = tmp_path / ".model.safetensors.abc123.tmp"
    fresh = tmp_path / ".model.safetensors.def456.tmp"  # another writer, still alive
    other = tmp_path / ".other.safetensors.abc123.tmp"
    for leftover in (stale, fresh, other):
        leftover.write_bytes(b"\0" * 1024)
    old = time.time() - STALE_TEMPORARY_S - 5
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    write_safetensors(str(path), {"v": np.arange(3, dtype=np.float32)})
    assert not stale.exists() and fresh.exists() and other.exists()
    tensors, _, _ = read_safetensors(str(path))
    np.testing.assert_array_equal(tensors["v"], [0, 1, 2])
