"""A step's RunGraph sent as a ``StepCall`` (``transports.run_graph_step``): its frame, built
from the prepared signature with only the ids and feeds' bytes filled in, is the full encode's
byte for byte; a feed of another dtype, shape or layout is never sent in that frame (the
message is built and encoded in full, and the worker gets what was fed); every channel takes
a StepCall (the in-process one as its message), over the bare protocol and over HTTP."""
import contextlib

import numpy as np
import pytest
import trio
from frame_bytes import frame_bytes, full_frame
from transport_fakes import FakeWorker

from transports import checksum, wire
from transports.http.client import TrioHttpChannel
from transports.http.server import open_http_server
from transports.inprocess import InProcessChannel
from transports.messages import RegisterGraph
from transports.run_graph_step import RunGraphStep, StepCall

LIMITS = wire.DEFAULT_LIMITS
GENEROUS = 20


def _values(rng, shapes=((256, 64), (256, 10)), dtype=np.float32):
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("timeout_ms, trace", [(None, False), (5000, True)])
def test_a_step_frame_from_the_prepared_signature_is_the_full_encode(checksums, timeout_ms,
                                                                     trace):
    was = checksum.enabled()
    checksum.set_enabled(checksums)
    try:
        rng = np.random.default_rng(4)
        step = RunGraphStep("sess/1/g3", ("_feed_0:0", "_feed_1:0"), ("loss:0", "train"),
                            timeout_ms, trace)
        first = step.message(3, 1, _values(rng))
        _, prepared = wire.encode_prepared(None, first, LIMITS)
        ids_first = prepared.volatile_names() == ("step_id", "request_id")
        assert sorted(prepared.volatile_names()) == ["request_id", "step_id"]
        for step_id, request_id in [(5, 2), (2**62 + 1, 127), (2**64 - 1, 2**32), (9, 65536)]:
            values = _values(rng)
            ids = (step_id, request_id) if ids_first else (request_id, step_id)
            got = frame_bytes(prepared.encode_step(ids, values, checksums, True))
            assert got == full_frame(step.message(step_id, request_id, values))
    finally:
        checksum.set_enabled(was)


def test_a_feed_not_of_the_signature_is_refused_and_so_are_bad_ids():
    rng = np.random.default_rng(5)
    step = RunGraphStep("g", ("a:0", "b:0"), ("a:0",))
    _, prepared = wire.encode_prepared(None, step.message(3, 1, _values(rng)), LIMITS)
    on = checksum.enabled()
    good = _values(rng)
    assert prepared.encode_step((4, 2), good, on, False) is not None
    others = [
        _values(rng, dtype=np.float64),                            # another dtype
        _values(rng, shapes=((128, 64), (256, 10))),               # another shape
        [good[0], np.asfortranarray(rng.standard_normal((256, 10)), np.float32)],  # layout
        [good[0].tolist(), good[1]],                               # no array
        good[:1],                                                  # a feed fewer
    ]
    for values in others:
        assert prepared.encode_step((4, 2), values, on, False) is None
    assert prepared.encode_step((4, 2), good, not on, False) is None  # other checksums
    ids_first = prepared.volatile_names() == ("step_id", "request_id")
    # What a full encode refuses, or leaves out (request_id 0, its default).
    for step_id, request_id in [(4, 0), (True, 2), (-1, 2), (2**64, 2), (4, 2.0)]:
        ids = (step_id, request_id) if ids_first else (request_id, step_id)
        assert prepared.encode_step(ids, good, on, False) is None


class _Recording(FakeWorker):
    def __init__(self):
        super().__init__()
        self.requests = []

    async def run_graph(self, request):
        self.requests.append(request)
        return await super().run_graph(request)


@contextlib.asynccontextmanager
async def _registered(bare_protocol):
    """A recording worker behind a real server, a channel to it and a graph registered there:
    ``(worker, channel, handle)``, inside a generous deadline."""
    worker = _Recording()
    async with open_http_server(worker) as server:
        async with TrioHttpChannel(server.address, bare=bare_protocol) as channel:
            with trio.fail_after(GENEROUS):
                handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                          ).graph_handle
                yield worker, channel, handle


@pytest.mark.parametrize("bare_protocol", [True, False])
async def test_steps_reach_the_worker_as_fed_and_a_changed_feed_takes_the_full_path(
        bare_protocol):
    rng = np.random.default_rng(6)
    async with _registered(bare_protocol) as (worker, channel, handle):
        step = RunGraphStep(handle, ("x:0", "y:0"), ("y:0", "x:0"))
        sent, full = [], []
        encode_in_full = channel._encode_run_graph

        def counted(request):
            full.append(request.request_id)
            return encode_in_full(request)

        channel._encode_run_graph = counted
        feeds = [_values(rng), _values(rng), _values(rng, shapes=((3, 64), (3, 10))),
                 _values(rng, dtype=np.float64), _values(rng, dtype=np.float64),
                 [v.astype(">f8") for v in _values(rng)], _values(rng, dtype=np.float64)]
        for request_id, values in enumerate(feeds, start=1):
            reply = await channel.run_graph_step(StepCall(step, 40 + request_id,
                                                          request_id, values))
            sent.append((values, reply))
            if request_id == 1:
                assert step.prepared is not None  # kept from the first full encode
    # The first step and each changed feed (shape, dtype, byte order) in full, and the step
    # after the byte-swapped one (no signature kept of that); the repeats (the 2nd and the
    # 5th) from the prepared frame of the step before's signature.
    assert full == [1, 3, 4, 6, 7]
    assert [r.step_id for r in worker.requests] == [41, 42, 43, 44, 45, 46, 47]
    assert [r.request_id for r in worker.requests] == [1, 2, 3, 4, 5, 6, 7]
    for request, (values, reply) in zip(worker.requests, sent):
        assert request.graph_handle == handle and request.fetch_keys == ["y:0", "x:0"]
        assert request.timeout_ms is None and request.trace is False
        for entry, key, value in zip(request.feeds, ("x:0", "y:0"), values):
            assert entry.key == key and entry.value.dtype == value.dtype.newbyteorder("=")
            np.testing.assert_array_equal(entry.value, value)
        np.testing.assert_array_equal(reply.tensors[0].value, values[1])


async def test_a_step_of_a_signature_replaced_since_is_encoded_in_full():
    """Two signatures of one handle (another timeout) in turn: each frame is its own."""
    rng = np.random.default_rng(7)
    async with _registered(True) as (worker, channel, handle):
        plain = RunGraphStep(handle, ("x:0",), ("x:0",))
        timed = RunGraphStep(handle, ("x:0",), ("x:0",), timeout_ms=700, trace=True)
        for request_id in range(1, 7):
            step = plain if request_id % 2 else timed
            await channel.run_graph_step(StepCall(step, request_id, request_id,
                                                  _values(rng, shapes=((4,),))))
    assert [(r.timeout_ms, r.trace) for r in worker.requests] == [
        (None, False), (700, True)] * 3


async def test_the_in_process_channel_sends_its_message():
    worker = _Recording()
    rng = np.random.default_rng(8)
    channel = InProcessChannel(worker)
    handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))).graph_handle
    values = _values(rng, shapes=((2, 3),))
    reply = await channel.run_graph_step(StepCall(RunGraphStep(handle, ("x:0",), ("x:0",)),
                                                  7, 1, values))
    np.testing.assert_array_equal(reply.tensors[0].value, values[0])
    assert worker.requests[0].step_id == 7 and worker.requests[0].request_id == 1
