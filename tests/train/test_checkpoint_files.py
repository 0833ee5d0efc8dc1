"""The checkpoint file layer (``kernels/checkpoint.py``) on real files: files written by the
hand-written writer of earlier versions still restore, a restore reads in windows of one
mapping each and never mixes two versions of a file, and it copies each tensor once."""
import json
import os
import struct
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest

import asyncflow as af
from asyncflow.kernels import checkpoint as ckpt_io


def _old_writer(path, tensors, metadata):
    """The file layout asyncflow wrote by hand before it used the safetensors package: names
    sorted, header JSON without spaces padded with spaces to 8 bytes, data back to back."""
    codes = {"float32": "F32", "int64": "I64", "bfloat16": "BF16", "bool": "BOOL"}
    header, offset, data = {}, 0, b""
    for name in sorted(tensors):
        array = np.asarray(tensors[name])
        header[name] = {"dtype": codes[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
        data += array.tobytes()
    header["__metadata__"] = metadata
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as fileobj:
        fileobj.write(struct.pack("<Q", len(encoded)) + encoded + data)


async def test_checkpoints_of_the_hand_written_writer_still_restore(tmp_path, recwarn):
    values = {"w": np.arange(6, dtype=np.float32).reshape(2, 3),
              "b": np.array([1, 2], dtype=ml_dtypes.bfloat16),
              "global_step": np.int64(7), "mask": np.array([True, False, True])}
    _old_writer(tmp_path / "old-7.safetensors", values,
                {"format": ckpt_io.FORMAT, "format_version": "1", "global_step": "7"})
    with af.Graph().as_default():
        variables = [af.Variable(np.zeros_like(values["w"]), name="w"),
                     af.Variable(np.zeros(2, ml_dtypes.bfloat16), name="b"),
                     af.Variable(np.int64(0), name="global_step", trainable=False),
                     af.Variable(np.zeros(3, bool), name="mask", trainable=False)]
        saver = af.train.Saver()
        async with af.Session() as sess:
            await saver.restore(sess, str(tmp_path / "old-7"))
            got = await sess.run(variables)
    for name, value in zip(["w", "b", "global_step", "mask"], got):
        np.testing.assert_array_equal(value, values[name])
        assert value.dtype == np.asarray(values[name]).dtype
    # Such a file has no checksums: it restores, with one warning saying so.
    unchecked = [w for w in recwarn if w.category is ckpt_io.UncheckedCheckpointWarning]
    assert len(unchecked) == 1 and "old-7.safetensors has no checksums" in str(unchecked[0].message)


def test_restore_reads_in_windows_and_arrays_are_read_only(tmp_path, monkeypatch):
    path = str(tmp_path / "m.safetensors")
    tensors = {f"t{i}": np.full((256,), i, np.float32) for i in range(10)}  # 1 KiB each
    ckpt_io.write_safetensors(path, tensors, {"global_step": "3"})
    opened = []
    real_open = ckpt_io._open

    def counting_open(name):
        opened.append(name)
        return real_open(name)
    monkeypatch.setattr(ckpt_io, "_open", counting_open)
    monkeypatch.setattr(ckpt_io, "MAPPED_WINDOW_BYTES", 3 * 1024)
    got, metadata, entries = ckpt_io.read_safetensors(path)
    assert len(opened) == 4  # windows of 3, 3, 3 and 1 tensors
    assert metadata["global_step"] == "3" and entries["t0"] == (af.float32, (256,))
    for name, value in tensors.items():
        np.testing.assert_array_equal(got[name], value)
        assert not got[name].flags.writeable


def test_a_file_replaced_mid_restore_is_read_again_whole(tmp_path, monkeypatch):
    path = str(tmp_path / "m.safetensors")
    old = {f"t{i}": np.zeros(256, np.float32) for i in range(4)}
    new = {f"t{i}": np.ones(256, np.float32) for i in range(4)}
    ckpt_io.write_safetensors(path, old)
    monkeypatch.setattr(ckpt_io, "MAPPED_WINDOW_BYTES", 2 * 1024)
    real_window, windows = ckpt_io._read_window, []

    def window_then_save(handle, pending, keep):
        real_window(handle, pending, keep)
        windows.append(len(pending))  # tensors still to read
        if len(windows) == 1:  # a concurrent save lands between the first two windows
            ckpt_io.write_safetensors(path, new)
    monkeypatch.setattr(ckpt_io, "_read_window", window_then_save)
    got, _, _ = ckpt_io.read_safetensors(path)
    assert windows == [2, 2, 0]  # the first read stopped at its second open, the second read whole
    for name in new:
        np.testing.assert_array_equal(got[name], new[name])


def test_restore_copies_each_tensor_once(tmp_path):
    """Peak memory of reading 64 MiB back, in a fresh process: about the tensors plus one
    mapped window, where a second copy (or the whole file left mapped) would add 64 MiB more."""
    path = str(tmp_path / "big.safetensors")
    ckpt_io.write_safetensors(path, {f"t{i}": np.ones(1 << 20, np.float32) for i in range(16)})
    script = textwrap.dedent(f"""
        from asyncflow.kernels import checkpoint as ckpt_io

        def status(key):
            for line in open("/proc/self/status"):
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        ckpt_io.MAPPED_WINDOW_BYTES = 8 << 20
        before = status("VmRSS")
        open("/proc/self/clear_refs", "w").write("5")
        tensors, _, _ = ckpt_io.read_safetensors({path!r})
        assert sum(t.nbytes for t in tensors.values()) == 64 << 20
        print(status("VmHWM") - before)
    """)
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("this kernel does not let a process reset its memory high-water mark")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True, timeout=120)
    added = int(result.stdout.split()[-1])
    assert (64 << 20) <= added < (64 + 8 + 4 + 12) << 20, added / (1 << 20)


async def test_dtypes_without_an_asyncflow_dtype_are_named_and_strings_are_refused(tmp_path):
    """A safetensors file may hold dtypes asyncflow lacks (float8): restoring one names it;
    asyncflow's own dtype safetensors lacks (string) cannot be saved at all."""
    from safetensors.numpy import save_file
    save_file({"w": np.zeros(3, ml_dtypes.float8_e4m3fn)}, str(tmp_path / "f8.safetensors"))
    with af.Graph().as_default():
        af.Variable(np.zeros(3, np.float32), name="w")
        saver = af.train.Saver()
        async with af.Session() as sess:
            with pytest.raises(af.errors.InvalidArgumentError,
                               match="w: dtype F8_E4M3 in the checkpoint, float32 in the graph"):
                await saver.restore(sess, str(tmp_path / "f8"))
    with pytest.raises(TypeError, match="'s' has dtype object.*no string dtype"):
        ckpt_io.write_safetensors(str(tmp_path / "s.safetensors"),
                                  {"s": np.array([b"text"], dtype=object)})
    assert sorted(os.listdir(tmp_path)) == ["f8.safetensors"]  # the refusal wrote nothing
    with af.Graph().as_default(), pytest.raises(TypeError, match="safetensors format has no string"):
        af.train.Saver([af.Variable(np.array([b"x"], dtype=object), name="s")])
