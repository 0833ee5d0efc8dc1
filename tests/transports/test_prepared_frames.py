"""A prepared signature (``transports.repeat_frames.Prepared``, ``wire.encode_prepared``): a
message of the signature encodes to exactly a full encode's bytes and decodes to the same
message, whatever its ids and tensor values; any other field, tensor or setting is refused
(None: the caller encodes it in full, which checks it)."""
import dataclasses
import types

import numpy as np
import pytest

from bit_flips import one_bit_flips
from frame_bytes import frame_bytes, full_frame
from transports import checksum, repeat_frames, wire
from transports.http import bare_io
from transports.http.client import TrioHttpChannel
from transports.messages import PushTensors, RunGraph, RunGraphReply, TensorEntry

LIMITS = wire.DEFAULT_LIMITS

SIGNATURES = {  # feeds of a RunGraph: several dtypes and shapes, one to three tensors
    "scalar": [("p:0", np.float32, ())],
    "three": [("a:0", np.int64, (3,)), ("b:0", np.float64, (2, 3)), ("c:0", np.uint8, (5,))],
    "empty and bool": [("e:0", np.float32, (0, 4)), ("m:0", np.bool_, (7,))],
}


def _feeds(signature, rng):
    return [TensorEntry(key, np.asarray(rng.random(shape) * 200 - 50).astype(dtype))
            for key, dtype, shape in SIGNATURES[signature]]


def _prepared(message):
    buffers, prepared = wire.encode_prepared(None, message, LIMITS)  # the first step: in full
    assert prepared is not None and frame_bytes(buffers) == full_frame(message)
    again, same = wire.encode_prepared(None, message, LIMITS)  # its template found
    assert same is prepared and frame_bytes(again) == full_frame(message)
    return prepared


def _encoded(prepared, message, limits=LIMITS, defer_checksums=False):
    """``message``'s buffers from ``prepared``; None where it is not of its signature."""
    buffers, now = wire.encode_prepared(prepared, message, limits, defer_checksums)
    return buffers if now is prepared else None


@pytest.mark.parametrize("signature", sorted(SIGNATURES))
def test_a_prepared_run_graph_patched_per_step_is_the_fresh_encode(signature):
    rng = np.random.default_rng(len(signature))
    first = RunGraph("sess/1/g7", 3, _feeds(signature, rng), ["mul:0", "add:0"],
                     request_id=1)
    prepared = _prepared(first)
    ids = [(5, 2), (2**62 + 1, 127), (2**40 + 3, 128), (2**64 - 1, 2**32), (7, 65535)]
    for step_id, request_id in ids:
        message = RunGraph("sess/1/g7", step_id, _feeds(signature, rng), ["mul:0", "add:0"],
                           request_id=request_id)
        got = frame_bytes(_encoded(prepared, message, LIMITS, defer_checksums=True))
        assert got == full_frame(message)
        decoded = wire.decode(got, LIMITS)
        assert (decoded.graph_handle, decoded.step_id, decoded.request_id,
                decoded.fetch_keys) == ("sess/1/g7", step_id, request_id, ["mul:0", "add:0"])
        for back, sent in zip(decoded.feeds, message.feeds):
            assert back.key == sent.key and back.value.dtype == sent.value.dtype
            assert back.value.shape == sent.value.shape
            assert np.array_equal(back.value, sent.value)


def test_a_prepared_reply_and_push_are_the_fresh_encodes():
    rng = np.random.default_rng(1)
    reply = RunGraphReply(_feeds("three", rng))
    prepared = _prepared(reply)
    for _ in range(3):
        again = RunGraphReply(_feeds("three", rng))
        assert frame_bytes(_encoded(prepared, again)) == full_frame(again)
    push = PushTensors(9, _feeds("scalar", rng))
    prepared = _prepared(push)
    later = PushTensors(2**50 + 1, _feeds("scalar", rng))
    assert frame_bytes(_encoded(prepared, later)) == full_frame(later)


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("signature", sorted(SIGNATURES))
def test_a_small_prepared_reply_is_written_whole_by_offsets(signature, checksums):
    """The bare server's reply (``bare_io.prepared_reply``): after the first of a signature,
    a small reply is one buffer, its tensors' bytes and trailers written into a copy of the
    kept frame image: the full encode's bytes for any values (NaN, -0.0, empty and bool
    tensors), with checksums on and off; a reply of another signature, or too large to be
    copied whole, is encoded as before (the same bytes) and its signature kept instead."""
    was = checksum.enabled()
    checksum.set_enabled(checksums)
    try:
        rng = np.random.default_rng(len(signature) + checksums)
        conn = types.SimpleNamespace(prepared=None)
        for step in range(6):
            reply = RunGraphReply(_feeds(signature, rng))
            if step == 3:
                reply.tensors[0].value.reshape(-1)[:1] = np.nan if \
                    reply.tensors[0].value.dtype.kind == "f" else 0
            buffers = bare_io.prepared_reply(conn, reply, LIMITS)
            assert frame_bytes(buffers) == full_frame(reply)
            if step >= 1:  # the signature kept (learnt by the first, a full encode)
                assert len(buffers) == 1 and type(buffers[0]) is bytearray
                assert wire.decode(bytes(buffers[0]), LIMITS) == reply  # (bitwise: NaN too)
        other = RunGraphReply([TensorEntry("mul:0", np.full((2, 2), -0.0, np.float32))])
        assert frame_bytes(bare_io.prepared_reply(conn, other, LIMITS)) == full_frame(other)
        assert conn.prepared is not None and conn.prepared.matches(other, LIMITS, checksums)
        large = RunGraphReply([TensorEntry("big:0", np.arange(
            repeat_frames.WHOLE_BYTES // 4 + 1, dtype=np.float32))])
        for _ in range(3):  # over WHOLE_BYTES: the buffers, the tensor not copied
            buffers = bare_io.prepared_reply(conn, large, LIMITS)
            assert frame_bytes(buffers) == full_frame(large)
        assert len(buffers) > 1 and conn.prepared.image is False
    finally:
        checksum.set_enabled(was)


def test_a_reply_too_large_to_be_written_whole_leaves_its_trailers_to_the_writer():
    """A reply of the connection's signature over ``WHOLE_BYTES`` is the buffers, its checksum
    trailers pending as the first reply's (``defer_checksums``): summed by the writer
    (``small_pieces``, ``send_pieces`` in chunks, a lent body's), never all at once on the
    server's trio thread as the reply is encoded."""
    was = checksum.enabled()
    checksum.set_enabled(True)
    try:
        conn = types.SimpleNamespace(prepared=None)
        for step in range(3):
            large = RunGraphReply([TensorEntry("big:0", np.full(
                repeat_frames.WHOLE_BYTES // 4 + 1, step, np.float32))])
            buffers = bare_io.prepared_reply(conn, large, LIMITS)
            trailers = [b for b in buffers if type(b) is checksum.ChecksumTrailer]
            assert len(trailers) == 1 and trailers[0].pending, step
            assert frame_bytes(buffers) == full_frame(large)
        assert conn.prepared.image is False
    finally:
        checksum.set_enabled(was)


def test_anything_but_the_ids_and_tensor_bytes_differing_is_refused():
    rng = np.random.default_rng(2)
    first = RunGraph("sess/1/g7", 3, _feeds("three", rng), ["mul:0"], request_id=1)
    prepared = _prepared(first)
    feeds = first.feeds

    def with_feed(position, value):
        changed = list(feeds)
        changed[position] = dataclasses.replace(feeds[position], value=value)
        return dataclasses.replace(first, feeds=changed)

    others = [
        dataclasses.replace(first, graph_handle="sess/1/g8"),
        dataclasses.replace(first, fetch_keys=["add:0"]),
        dataclasses.replace(first, fetch_keys=["mul:0", "add:0"]),
        dataclasses.replace(first, fetch_keys=[]),
        dataclasses.replace(first, timeout_ms=1000),
        dataclasses.replace(first, trace=True),
        dataclasses.replace(first, feeds=feeds[:2]),
        dataclasses.replace(first, feeds=[*feeds, feeds[0]]),
        dataclasses.replace(first, feeds=[dataclasses.replace(feeds[0], key="z:0"),
                                          *feeds[1:]]),
        with_feed(0, feeds[0].value.astype(np.int32)),  # another dtype
        with_feed(0, feeds[0].value.astype(">i8")),  # another byte order
        with_feed(1, feeds[1].value.reshape(3, 2)),  # another shape
        with_feed(1, np.asfortranarray(feeds[1].value)),  # not C-contiguous
        with_feed(0, list(feeds[0].value)),  # not an array
        with_feed(0, None),
        dataclasses.replace(first, feeds=[dataclasses.replace(feeds[0], is_dead=True),
                                          *feeds[1:]]),
        dataclasses.replace(first, feeds=tuple(feeds)),  # not a list
        dataclasses.replace(first, step_id=True),  # ids checked as the full encode checks
        dataclasses.replace(first, request_id=-1),
        dataclasses.replace(first, request_id=0),  # (the default: a full encode leaves it out)
        RunGraphReply(list(feeds)),  # another class
    ]
    for message in others:
        assert prepared.encode(message, LIMITS, checksum.enabled(), False) is None, message
    assert prepared.encode(first, wire.Limits(max_tensors=9), checksum.enabled(), False) is None
    was = checksum.enabled()
    checksum.set_enabled(not was)
    try:
        assert _encoded(prepared, first) is None
    finally:
        checksum.set_enabled(was)
    assert frame_bytes(_encoded(prepared, first)) == full_frame(first)


def test_a_signature_never_encoded_or_without_a_template_has_none():
    message = RunGraph("sess/1/g7", 3, [TensorEntry("p:0", np.float32(1.0))], ["mul:0"],
                       request_id=1)  # (a numpy scalar, not an array: no template)
    on = checksum.enabled()
    assert repeat_frames.prepare(message, LIMITS, on) is None
    assert wire.encode_prepared(None, message, LIMITS)[1] is None
    assert repeat_frames.prepare(message, LIMITS, on) is None
    fresh = dataclasses.replace(message, feeds=[TensorEntry("p:0", np.asarray(np.float32(1)))])
    assert repeat_frames.prepare(fresh, LIMITS, on) is None  # not encoded yet


def test_a_prepared_frame_damaged_anywhere_is_refused_by_the_decoder():
    """The prepared path writes the same prefix, header and tensor CRCs as a full encode: a
    bit flipped anywhere in its frame is refused (never decoded to other values)."""
    rng = np.random.default_rng(4)
    first = RunGraph("sess/1/g7", 3, _feeds("scalar", rng), ["mul:0"], request_id=1)
    prepared = _prepared(first)
    later = RunGraph("sess/1/g7", 2**61 + 5, _feeds("scalar", rng), ["mul:0"], request_id=2)
    frame = frame_bytes(_encoded(prepared, later, LIMITS, defer_checksums=True))
    wire.decode(frame, LIMITS)  # (its header validated: the one-pass decode is tried too)
    for bit, damaged in one_bit_flips(frame):
        assert wire.decode_repeated(memoryview(damaged), LIMITS) is None, bit
        with pytest.raises(wire.RemoteProtocolError):
            wire.decode(damaged, LIMITS)


def test_a_signature_other_than_the_prepared_one_costs_what_a_plain_encode_costs(monkeypatch):
    """Steps whose signature changes (feeds of alternating shapes on one graph handle, a
    string feed that has no template, replies of alternating shapes on one connection) build
    no more keys than ``wire.encode`` builds for them: the caller's miss is not paid twice."""
    built = []
    key = repeat_frames._key
    monkeypatch.setattr(repeat_frames, "_key", lambda *args: built.append(1) or key(*args))
    strings = np.array([b"ab", b"c"], dtype=object)
    requests = [RunGraph("sess/1/g7", step, [TensorEntry("p:0", feed)], ["mul:0"],
                         request_id=step)
                for step, feed in enumerate([np.zeros(3, np.float32), np.zeros((), np.float32),
                                             strings] * 4, start=1)]
    replies = [RunGraphReply([TensorEntry("mul:0", np.full(shape, 2.0, np.float32))])
               for shape in [(3,), (), (2, 2)] * 4]
    channel = types.SimpleNamespace(_prepared={}, _limits=LIMITS)
    conn = types.SimpleNamespace(prepared=None)
    costs = {}
    for name, encode_one, messages in [
            ("plain", lambda m: wire.encode(m, LIMITS, defer_checksums=True),
             requests + replies),
            ("callers", lambda m: (TrioHttpChannel._encode_run_graph(channel, m)
                                   if isinstance(m, RunGraph) else bare_io.prepared_reply(conn, m, LIMITS)),
             requests + replies)]:
        wants = [full_frame(message) for message in messages]
        repeat_frames.forget_all()
        built.clear()
        got = [frame_bytes(encode_one(message)) for message in messages]
        costs[name] = len(built)
        assert got == wants
    assert costs["callers"] <= costs["plain"], costs


async def test_a_deregistered_graphs_prepared_signature_and_template_are_dropped():
    """A channel keeps one prepared signature per graph handle for its RunGraphs; deregistering
    the graph drops it and its kept template (a client that registers and drops many graphs
    holds none of theirs), the other graphs' signatures stay, and steps of the graph still
    registered encode from theirs as before."""
    from transport_fakes import FakeWorker

    from transports.http.server import open_http_server
    from transports.messages import DeregisterGraph, RegisterGraph
    from transports.service import RemoteCallError

    def step(handle, step_id):
        return RunGraph(handle, step_id, [TensorEntry("p:0", np.full((), step_id, np.float32))],
                        ["p:0"], request_id=step_id)

    async with open_http_server(FakeWorker()) as server, \
            TrioHttpChannel(server.address, bare=True) as channel:
        handles = [(await channel.register_graph(RegisterGraph({"nodes": []}, "s"))).graph_handle
                   for _ in range(2)]
        for step_id in range(1, 4):
            for handle in handles:
                reply = await channel.run_graph(step(handle, step_id))
                assert float(reply.tensors[0].value) == step_id
        kept = dict(channel._prepared)
        assert sorted(kept) == sorted(handles)
        templates = list(repeat_frames._templates_by_key.values())
        assert all(any(t is p for t in templates) for p in kept.values())

        await channel.deregister_graph(DeregisterGraph(handles[0]))
        assert list(channel._prepared) == [handles[1]]
        templates = list(repeat_frames._templates_by_key.values())
        assert not any(t is kept[handles[0]] for t in templates)
        assert any(t is kept[handles[1]] for t in templates)

        reply = await channel.run_graph(step(handles[1], 4))  # from its kept signature
        assert float(reply.tensors[0].value) == 4 and channel._prepared[handles[1]] is \
            kept[handles[1]]
        with pytest.raises(RemoteCallError, match="NOT_FOUND"):
            await channel.run_graph(step(handles[0], 5))
        assert channel._bare and channel.bare_calls > 0


@pytest.mark.parametrize("bare_protocol", [True, False])
async def test_a_deregister_with_a_handle_that_is_no_str_is_refused_naming_the_field(
        bare_protocol):
    """A DeregisterGraph whose handle is no str is a LocalProtocolError naming the field, as
    any other request that cannot be encoded, also once the channel keeps a prepared
    signature: its handle was looked up in the channel's signatures before the request was
    checked, and an unhashable one (a list, a dict) raised a bare ``TypeError: unhashable
    type``."""
    from transport_fakes import FakeWorker

    from transports.http.server import open_http_server
    from transports.messages import DeregisterGraph, RegisterGraph
    from transports.wire import LocalProtocolError

    async with open_http_server(FakeWorker()) as server, \
            TrioHttpChannel(server.address, bare=bare_protocol) as channel:
        handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))).graph_handle
        for step_id in range(1, 4):
            await channel.run_graph(RunGraph(
                handle, step_id, [TensorEntry("p:0", np.full((), step_id, np.float32))],
                ["p:0"], request_id=step_id))
        assert list(channel._prepared) == [handle]
        for wrong in (["graph/0"], {"graph": 0}, 7):
            with pytest.raises(LocalProtocolError, match="DeregisterGraph.graph_handle"):
                await channel.deregister_graph(DeregisterGraph(wrong))
        assert list(channel._prepared) == [handle]  # (nothing dropped for a refused request)


@pytest.mark.parametrize("bare_protocol", [True, False])
async def test_a_step_begun_while_its_graph_is_deregistered_keeps_no_signature_after_it(
        bare_protocol):
    """A RunGraph of a graph begun while its DeregisterGraph is under way (sent, not yet
    answered: the worker still runs it) is encoded in full and kept its signature again; once
    the deregister has ended, neither that signature nor its template is kept: they were
    dropped only as the deregister began, and stayed until 64 signatures had piled up."""
    import trio
    from transport_fakes import FakeWorker

    from transports.http.server import open_http_server
    from transports.messages import DeregisterGraph, RegisterGraph

    class SlowToDeregister(FakeWorker):
        def __init__(self):
            super().__init__()
            self.deregistering, self.release = trio.Event(), trio.Event()

        async def deregister_graph(self, request):
            self.deregistering.set()
            await self.release.wait()
            await super().deregister_graph(request)

    def step(handle, step_id):
        return RunGraph(handle, step_id, [TensorEntry("p:0", np.full((), step_id, np.float32))],
                        ["p:0"], request_id=step_id)

    def templates_of(handle):
        return [p for p in repeat_frames._templates_by_key.values()
                if p.schema.cls is RunGraph and ("graph_handle", str, handle, None) in p.static]

    worker = SlowToDeregister()
    async with open_http_server(worker) as server, \
            TrioHttpChannel(server.address, bare=bare_protocol) as channel:
        handle = (await channel.register_graph(RegisterGraph({"nodes": []}, "s"))).graph_handle
        for step_id in range(1, 4):
            await channel.run_graph(step(handle, step_id))
        assert list(channel._prepared) == [handle] and templates_of(handle)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.deregister_graph, DeregisterGraph(handle))
            await worker.deregistering.wait()
            for step_id in range(4, 7):  # (the worker has the graph still)
                reply = await channel.run_graph(step(handle, step_id))
                assert float(reply.tensors[0].value) == step_id
            assert list(channel._prepared) == [handle]
            worker.release.set()
        assert handle not in worker.graphs
        assert not channel._prepared and not templates_of(handle)


def test_forget_drops_its_template_while_another_thread_keeps_one(monkeypatch):
    """``forget`` finds its template by the signature's key, not by a scan of every kept
    template: another thread's trio run in the process (``compat.v1``'s background loop, a
    server's thread beside a session) may keep a template between any two bytecodes of this
    one, and the scan then raised ``RuntimeError: dictionary changed size during iteration``
    out of a DeregisterGraph (here: a template kept as the scan passed the first; with real
    threads it took well under a second of steps and deregisters)."""
    def step(handle):
        return RunGraph(handle, 1, [TensorEntry("p:0", np.ones((), np.float32))], ["p:0"],
                        request_id=1)

    first, mine, other = (_prepared(step(f"graph/{n}")) for n in range(3))
    repeat_frames._templates_by_key.pop(next(
        key for key, kept in repeat_frames._templates_by_key.items() if kept is other))

    class KeptMeanwhile(dict):
        """The templates, one kept by another thread as a scan of them has begun."""

        def _meanwhile(self, view):
            for n, item in enumerate(view):
                yield item
                if n == 0:
                    wire.encode(step("graph/2"))  # (kept on another thread)

        def items(self):
            return self._meanwhile(dict.items(self))

        def keys(self):
            return self._meanwhile(dict.keys(self))

        def values(self):
            return self._meanwhile(dict.values(self))

        def __iter__(self):
            return self._meanwhile(dict.__iter__(self))

    kept = KeptMeanwhile(repeat_frames._templates_by_key)
    monkeypatch.setattr(repeat_frames, "_templates_by_key", kept)
    assert len(kept) == 2
    repeat_frames.forget(mine)
    assert list(dict.values(kept)) == [first] and repeat_frames.prepare(
        step("graph/1"), LIMITS, checksum.enabled()) is None
    repeat_frames.forget(mine)  # (gone already: nothing to drop)
    assert list(dict.values(kept)) == [first]


async def test_graphs_registered_and_deregistered_leave_no_template_that_names_them():
    """A client that registers, steps and drops many graphs keeps no template of theirs in
    the process (nor does the worker): not the RunGraphs' (dropped with their signature), nor
    those of the messages sent once per graph (its DeregisterGraph, the RegisterGraphReply
    that names it), which were kept as if they would come again, one more per graph until 256
    had piled up and every template, the live graphs' too, was cleared."""
    from transport_fakes import FakeWorker

    from transports.http.server import open_http_server
    from transports.messages import DeregisterGraph, RegisterGraph

    async with open_http_server(FakeWorker()) as server, \
            TrioHttpChannel(server.address, bare=True) as channel:
        *handles, live = [(await channel.register_graph(RegisterGraph({"nodes": []}, "s"))
                           ).graph_handle for _ in range(4)]
        for handle in [*handles, live]:
            for step_id in range(1, 4):
                await channel.run_graph(RunGraph(
                    handle, step_id, [TensorEntry("p:0", np.full((), step_id, np.float32))],
                    ["p:0"], request_id=step_id))
        for handle in handles:
            await channel.deregister_graph(DeregisterGraph(handle))

        def naming(names):
            return [(p.schema.cls.__name__, value)
                    for p in repeat_frames._templates_by_key.values()
                    for _, _, value, _ in p.static if value in names]
        assert len({*handles, live}) == 4 and naming(handles) == []
        assert naming([live]) == [("RunGraph", live)]  # (the live graph's steps keep theirs)
