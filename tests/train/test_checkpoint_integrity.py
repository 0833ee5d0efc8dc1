"""Checkpoint files as a failing disk leaves them: a flipped bit anywhere (the header, the
tensor bytes, the last byte) or a truncation in any region fails the restore with
DataLossError naming the file (and the tensor, with both checksums), never a wrong value;
``asyncflow checkpoint verify`` finds the same damage without a graph."""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors
from asyncflow.kernels import checkpoint as ckpt_io
from asyncflow.train import checkpoint_verify

TENSORS = {"dense/kernel": np.arange(24, dtype=np.float32).reshape(4, 6),
           "dense/bias": np.linspace(-1, 1, 6).astype(np.float64),
           "global_step": np.int64(42), "mask": np.array([True, False, True])}


def _write(path):
    ckpt_io.write_safetensors(str(path), TENSORS, {"format": ckpt_io.FORMAT,
                                                   "format_version": "1", "global_step": "42"})
    return path.read_bytes()


def _regions(raw):
    header_len = struct.unpack("<Q", raw[:8])[0]
    return header_len, 8 + header_len  # the data starts after the length and the header


def _flip(path, raw, offset, bit):
    damaged = bytearray(raw)
    damaged[offset] ^= 1 << bit
    path.write_bytes(bytes(damaged))


def test_the_checksums_sit_in_the_header_metadata(tmp_path):
    path = tmp_path / "m.safetensors"
    raw = _write(path)
    header_len, _ = _regions(raw)
    metadata = json.loads(raw[8:8 + header_len])["__metadata__"]
    sums = json.loads(metadata["crc32c"])
    assert sums["dense/kernel"] == f"{ckpt_io.crc32c(TENSORS['dense/kernel']):08x}"
    assert set(sums) == set(TENSORS) and len(metadata["header_crc32c"]) == 8
    got, _, _ = ckpt_io.read_safetensors(str(path))
    for name, value in TENSORS.items():
        np.testing.assert_array_equal(got[name], value)


def test_big_endian_arrays_are_written_little_endian_and_check_out(tmp_path):
    path = str(tmp_path / "be.safetensors")
    ckpt_io.write_safetensors(path, {"a": np.arange(5, dtype=">f4"),
                                     "b": np.arange(3, dtype=">i8")})
    got, _, _ = ckpt_io.read_safetensors(path)
    np.testing.assert_array_equal(got["a"], np.arange(5, dtype=np.float32))
    np.testing.assert_array_equal(got["b"], np.arange(3))
    assert ckpt_io.verify_file(path)["checked"]


def test_a_bit_flipped_at_any_offset_is_data_loss(tmp_path):
    """Every byte of the file, one bit each (the bit rotating with the offset): the length
    prefix, the JSON header (names, dtypes, shapes, offsets, metadata, checksums, padding),
    every tensor byte and the last byte."""
    path = tmp_path / "m.safetensors"
    raw = _write(path)
    _, data_start = _regions(raw)
    assert len(raw) - data_start == sum(np.asarray(v).nbytes for v in TENSORS.values())
    for offset in range(len(raw)):
        _flip(path, raw, offset, offset % 8)
        with pytest.raises(errors.DataLossError, match="m.safetensors is corrupt"):
            ckpt_io.read_safetensors(str(path), list(TENSORS))
    for bit in range(8):  # the last byte, every bit
        _flip(path, raw, len(raw) - 1, bit)
        with pytest.raises(errors.DataLossError, match="tensor 'mask': Checksum does not match"):
            ckpt_io.read_safetensors(str(path), list(TENSORS))


def test_truncation_in_every_region_is_data_loss(tmp_path):
    path = tmp_path / "m.safetensors"
    raw = _write(path)
    header_len, data_start = _regions(raw)
    cuts = [0, 1, 7, 8, 9, 8 + header_len // 2, data_start - 1, data_start, data_start + 1,
            (data_start + len(raw)) // 2, len(raw) - 1]
    for cut in cuts:
        path.write_bytes(raw[:cut])
        with pytest.raises(errors.DataLossError, match="m.safetensors is corrupt"):
            ckpt_io.read_safetensors(str(path), list(TENSORS))


def test_a_flipped_tensor_bit_fails_restore_naming_file_tensor_and_checksums(tmp_path):
    with af.Graph().as_default():
        w = af.Variable(np.arange(1000, dtype=np.float32), name="w")
        b = af.Variable(np.zeros(3, np.float32), name="b")
        saver = af.train.Saver()
        async_path = str(tmp_path / "model")

        async def save_then_restore():
            async with af.Session() as sess:
                await sess.run(af.global_variables_initializer())
                prefix = await saver.save(sess, async_path, global_step=5)
                raw = (tmp_path / "model-5.safetensors").read_bytes()
                _, data_start = _regions(raw)
                # w's bytes come after b's (names sorted): a bit in the middle of w.
                _flip(tmp_path / "model-5.safetensors", raw, data_start + 12 + 2000, 3)
                with pytest.raises(errors.DataLossError) as info:
                    await saver.restore(sess, prefix)
                return info.value

        import trio
        exc = trio.run(save_then_restore)
    message = str(exc)
    assert "model-5.safetensors" in message and "tensor 'w'" in message
    assert "Checksum does not match: stored " in message and ", computed " in message


def test_a_checkpoint_of_another_program_names_what_differs(tmp_path):
    ckpt_io.write_safetensors(str(tmp_path / "other.safetensors"),
                              {"w": np.zeros((2, 2), np.float32), "extra": np.zeros(1)})
    with af.Graph().as_default():
        af.Variable(np.zeros((3, 2), np.float32), name="w")
        af.Variable(np.zeros(2, np.float32), name="b")
        saver = af.train.Saver()

        async def restore():
            async with af.Session() as sess:
                await saver.restore(sess, str(tmp_path / "other"))

        import trio
        with pytest.raises(errors.NotFoundError) as info:
            trio.run(restore)
    assert "b" in str(info.value) and "w: shape [2, 2] in the checkpoint" in str(info.value)


def _verify_cli(*paths, cwd):
    return subprocess.run([sys.executable, "-m", "asyncflow", "checkpoint", "verify", *paths],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_verify_command_checks_whole_checkpoints_without_a_graph(tmp_path):
    raw = _write(tmp_path / "model-42.safetensors")
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model-42"\n'
                                         'all_model_checkpoint_paths: "model-42"\n')
    good = _verify_cli(".", cwd=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ok      ./model-42.safetensors: 4 tensors" in good.stdout and "step 42" in good.stdout
    _, data_start = _regions(raw)
    _flip(tmp_path / "model-42.safetensors", raw, data_start + 30, 0)
    bad = _verify_cli("model-42", cwd=tmp_path)
    assert bad.returncode == 1
    assert "CORRUPT model-42.safetensors" in bad.stdout and "Checksum does not match" in bad.stdout
    missing = _verify_cli("nothing-here", cwd=tmp_path)
    assert missing.returncode == 1 and "MISSING nothing-here" in missing.stdout


def test_verify_reports_files_without_checksums_and_sharded_checkpoints(tmp_path):
    # A file without checksums (as written before they existed) is readable but unchecked.
    plain = tmp_path / "plain.safetensors"
    import safetensors.numpy
    safetensors.numpy.save_file({"w": np.ones(3, np.float32)}, str(plain))
    (report,) = checkpoint_verify.verify_checkpoint(str(plain))
    assert report.ok and not report.checked and "UNCHECKED" in checkpoint_verify.describe(report)
    # A sharded checkpoint: the index, then each shard.
    stem = str(tmp_path / "s-3.safetensors")
    for shard, names in enumerate([["a"], ["b"]]):
        ckpt_io.write_safetensors(ckpt_io.shard_path(stem, shard, 2),
                                  {n: np.full(4, shard, np.float32) for n in names})
    index = {"metadata": {}, "weight_map": {"a": os.path.basename(ckpt_io.shard_path(stem, 0, 2)),
                                            "b": os.path.basename(ckpt_io.shard_path(stem, 1, 2))}}
    with open(ckpt_io.index_path(stem), "w") as fileobj:
        json.dump(index, fileobj)
    reports = checkpoint_verify.verify_checkpoint(str(tmp_path / "s-3"))
    assert [r.ok for r in reports] == [True, True, True] and reports[0].tensors == 2
    shard1 = ckpt_io.shard_path(stem, 1, 2)
    raw = open(shard1, "rb").read()
    with open(shard1, "wb") as fileobj:
        fileobj.write(raw[:-1] + bytes([raw[-1] ^ 0x10]))
    reports = checkpoint_verify.verify_checkpoint(str(tmp_path / "s-3"))
    assert [r.ok for r in reports] == [True, True, False]
    assert "tensor 'b': Checksum does not match" in reports[2].problem


def test_a_bit_flipped_anywhere_in_a_sharded_checkpoints_index_is_data_loss(tmp_path):
    import trio
    with af.Graph().as_default():
        af.Variable(np.arange(8, dtype=np.float32), name="a")
        af.Variable(np.ones(3, np.int64), name="b")
        saver = af.train.Saver(sharded=True)

        async def save():
            async with af.Session() as sess:
                await sess.run(af.global_variables_initializer())
                return await saver.save(sess, str(tmp_path / "s"), global_step=3)
        prefix = trio.run(save)
    index = tmp_path / "s-3.safetensors.index.json"
    raw = index.read_bytes()
    assert ckpt_io.read_index(str(index)).keys() == {"a", "b"}
    assert '"crc32c"' in raw.decode()
    for offset in range(len(raw)):
        _flip(index, raw, offset, offset % 7)  # bit 7 would make most bytes non-UTF-8
        with pytest.raises(errors.DataLossError, match="index.json is corrupt"):
            ckpt_io.read_index(str(index))
    index.write_bytes(raw)
    assert [r.ok for r in checkpoint_verify.verify_checkpoint(prefix)] == [True, True]
