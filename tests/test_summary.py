"""Summaries and FileWriter: protobuf messages, event files read back by TensorBoard and by us."""
import glob
import io
import os
import struct
import threading

import numpy as np
import pytest
import trio
from tensorboardX.proto import event_pb2, graph_pb2, summary_pb2

import asyncflow as af
from asyncflow.kernels.summary_ops import summary_value
from asyncflow.summary import proto


def _iter_records(fileobj):
    """Yield the payloads of the TFRecords in a binary file object (the framing read back).

    Raises:
        ValueError: on a CRC mismatch (a partial last record written by a crashed writer ends
            the iteration silently instead).
    """
    while True:
        header = fileobj.read(12)
        if len(header) < 12:
            return
        length_bytes, crc = header[:8], struct.unpack("<I", header[8:])[0]
        if proto.masked_crc32c(length_bytes) != crc:
            raise ValueError("TFRecord length CRC mismatch")
        length, = struct.unpack("<Q", length_bytes)
        data = fileobj.read(length)
        footer = fileobj.read(4)
        if len(data) < length or len(footer) < 4:
            return
        if proto.masked_crc32c(data) != struct.unpack("<I", footer)[0]:
            raise ValueError("TFRecord data CRC mismatch")
        yield data


def _event_file(logdir):
    files = glob.glob(os.path.join(str(logdir), "events.out.tfevents.*"))
    assert len(files) == 1, files
    return files[0]


def _read_events(path):
    with open(path, "rb") as fileobj:
        return [event_pb2.Event.FromString(r) for r in _iter_records(fileobj)]


def test_crc32c_and_record_framing():
    check = 0xE3069283  # CRC32C's standard check value, of b"123456789"
    assert proto.masked_crc32c(b"123456789") == (((check >> 15) | (check << 17)) + 0xA282EAD8
                                                 ) & 0xFFFFFFFF
    assert proto.masked_crc32c(b"") == 0xA282EAD8  # the mask of CRC 0
    framed = proto.tfrecord(b"hello") + proto.tfrecord(b"")
    assert list(_iter_records(io.BytesIO(framed))) == [b"hello", b""]
    corrupt = bytearray(framed)
    corrupt[13] ^= 1
    with pytest.raises(ValueError, match="CRC"):
        list(_iter_records(io.BytesIO(bytes(corrupt))))
    # A torn last record (writer killed mid-write) ends the stream quietly.
    assert list(_iter_records(io.BytesIO(framed[:-3]))) == [b"hello"]


def test_summary_ops_are_named_by_scope_and_collected():
    with af.Graph().as_default() as g:
        x = af.placeholder(af.float32, [None], name="x")
        with af.name_scope("train"):
            loss = af.summary.scalar("loss", af.reduce_mean(x))
            hist = af.summary.histogram("x values", x, family="inputs")
        again = af.summary.scalar("loss", af.reduce_sum(x))
        assert loss.op.get_attr("tag") == "train/loss" and loss.op.name == "train/loss"
        assert hist.op.get_attr("tag") == "inputs/train/inputs/x_values"
        assert again.op.get_attr("tag") == "loss"
        assert g.get_collection(af.GraphKeys.SUMMARIES) == [loss, hist, again]
        assert loss.dtype is af.string and loss.shape.as_list() == []
        with pytest.raises(ValueError, match="scalar"):
            af.summary.scalar("bad", x)
        merged = af.summary.merge_all()
        assert merged.op.type == "MergeSummary" and len(merged.op.inputs) == 3
    with af.Graph().as_default():
        assert af.summary.merge_all() is None


async def test_summary_values_encode_and_merge():
    values = np.array([-3.0, -0.5, 0.0, 0.0, 1e-13, 2.0, 2.0, 1e30], np.float64)
    with af.Graph().as_default():
        s = af.summary.scalar("s", af.constant(2.5))
        h = af.summary.histogram("h", af.constant(values))
        merged = af.summary.merge([s, h])
        dup = af.summary.merge([s, s])
        nan = af.summary.histogram("n", af.constant([1.0, np.nan]))
        async with af.Session() as sess:
            data = await sess.run(merged)
            with pytest.raises(af.errors.InvalidArgumentError, match="Duplicate tag s"):
                await sess.run(dup)
            with pytest.raises(af.errors.InvalidArgumentError, match="Nan in summary histogram"):
                await sess.run(nan)
    assert isinstance(data, bytes)
    scalar_value, histo_value = summary_pb2.Summary.FromString(data).value
    assert (scalar_value.tag, scalar_value.simple_value) == ("s", 2.5)
    assert histo_value.tag == "h" and histo_value.WhichOneof("value") == "histo"
    histo = histo_value.histo
    assert (histo.min, histo.max, histo.num) == (-3.0, 1e30, 8)
    assert histo.sum == pytest.approx(values.sum())
    assert histo.sum_squares == pytest.approx(np.dot(values, values))
    assert sum(histo.bucket) == 8
    limits = np.array(histo.bucket_limit)
    assert np.all(np.diff(limits) > 0)
    # Each non-empty bucket counts exactly the values below its limit and above the previous.
    counts = np.array(histo.bucket)
    for i, count in enumerate(counts):
        if count:
            low = limits[i - 1] if i else -np.inf
            assert count == np.sum((values >= low) & (values < limits[i]))


async def test_file_writer_events_open_in_tensorboard(tmp_path):
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator")
    with af.Graph().as_default() as g:
        x = af.placeholder(af.float32, [None], name="x")
        with af.name_scope("layer1"):
            w = af.Variable(np.ones(4, np.float32), name="w")
            y = af.multiply(x, w, name="y")
        af.summary.scalar("loss", af.reduce_mean(y))
        af.summary.histogram("weights", w)
        merged = af.summary.merge_all()
        writer = af.summary.FileWriter(str(tmp_path), graph=g)
        async with af.Session() as sess:
            await sess.run(w.initializer)
            for step in range(3):
                data = await sess.run(merged, {x: np.full(4, step, np.float32)})
                writer.add_summary(data, global_step=step)
        await writer.aclose()
    path = _event_file(tmp_path)
    assert os.path.basename(path).startswith("events.out.tfevents.")
    events = _read_events(path)
    assert events[0].file_version == "brain.Event:2"
    acc = event_accumulator.EventAccumulator(str(tmp_path), size_guidance={"histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    assert tags["scalars"] == ["loss"] and tags["histograms"] == ["weights"] and tags["graph"]
    assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(0, 0.0), (1, 1.0), (2, 2.0)]
    histo = acc.Histograms("weights")[-1].histogram_value
    assert (histo.min, histo.max, histo.num, histo.sum) == (1.0, 1.0, 4.0, 4.0)
    graph_def = acc.Graph()
    nodes = {n.name: n for n in graph_def.node}
    assert nodes["layer1/y"].op == "Mul"
    assert list(nodes["layer1/y"].input) == ["x", "layer1/w/read"]
    assert nodes["layer1/w"].attr["dtype"].type == 1  # DT_FLOAT
    assert [d.size for d in nodes["x"].attr["shape"].shape.dim] == [-1]
    assert [d.size for d in nodes["layer1/w"].attr["_output_shapes"].list.shape[0].dim] == [4]


async def test_own_reader_sees_graph_and_control_edges(tmp_path):
    with af.Graph().as_default() as g:
        a = af.constant([1.0, 2.0], name="a")
        with af.control_dependencies([a]):
            b = af.constant(3, name="b")
        af.identity(b, name="c")
        with af.summary.FileWriter(str(tmp_path / "run"), graph=g) as writer:
            writer.add_summary(summary_value("t", simple_value=1.0), global_step=5)
    events = _read_events(_event_file(tmp_path / "run"))
    nodes = {n.name: n for n in graph_pb2.GraphDef.FromString(events[1].graph_def).node}
    assert list(nodes["b"].input) == ["^a"] and list(nodes["c"].input) == ["b"]
    assert "value" in nodes["a"].attr and "_output_shapes" in nodes["a"].attr
    np.testing.assert_array_equal(
        np.frombuffer(nodes["a"].attr["value"].tensor.tensor_content, "<f4"), [1.0, 2.0])
    assert events[2].step == 5
    assert [(v.tag, v.simple_value) for v in events[2].summary.value] == [("t", 1.0)]
    with pytest.raises(RuntimeError, match="closed"):
        writer.add_summary(b"")
    with pytest.raises(TypeError, match="serialized Summary"):
        af.summary.FileWriter(str(tmp_path / "other")).add_summary(3.0)


async def test_writer_calls_never_wait_for_the_disk(tmp_path, monkeypatch):
    writer = af.summary.FileWriter(str(tmp_path))
    gate = threading.Event()
    real_write = writer._write

    def slow_write(data):
        gate.wait(10)
        real_write(data)
    monkeypatch.setattr(writer, "_write", slow_write)
    summary = summary_value("t", simple_value=1.0)
    with trio.fail_after(2):
        for step in range(200):
            writer.add_summary(summary, global_step=step)
        flushed = writer.flush()
        closed = writer.close()
    assert not flushed.is_set()
    gate.set()
    with trio.fail_after(10):
        await trio.to_thread.run_sync(closed.wait)
    assert flushed.is_set()
    events = _read_events(_event_file(tmp_path))
    assert [e.step for e in events[1:]] == list(range(200))
