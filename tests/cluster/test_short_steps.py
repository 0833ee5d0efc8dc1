"""The bare server's short path of a prepared plain step (``transports/http/bare_calls.py``,
``worker_step.PlainStep``): a repeated RunGraph of a plain graph, read by its frame template
into the feed arrays and answered from its reply's frame, is counted (``short_steps``) and
answers every frame as the full path does: the same replies, and the same errors for a
damaged frame, a frame of another dtype or shape, a replayed request id, a step id used
again, an AbortStep, the step's deadline and a client that leaves; the same counters and
tombstones. Each scenario runs on a worker that takes the short path and on one whose
``run_graph_in_scope`` is its instance's own (which the short path never bypasses), and their
answers are compared whole. Raw bare calls on real sockets (this process's servers on
loopback), and a real worker process."""
import struct

import numpy as np
import trio

import asyncflow as af
from cluster_processes import loopback_spec
from hand_registration import register_partitions
from loopback_ports import free_ports
from transports import wire
from transports.http import bare, same_host
from transports.messages import AbortStep, DeregisterGraph, ErrorReply, RunGraph, \
    RunGraphReply, TensorEntry
from transports.service import RPCS

RUN_GRAPH = next(i for i, rpc in enumerate(RPCS) if rpc.method == "run_graph")
TASK = "/job:worker/replica:0/task:0"


def _graph(shape=(3,)):
    """``x * 2 + 1`` of a float32 ``shape`` (``[None]``: any length), and a dequeue of an
    empty queue (it waits)."""
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:worker/task:0/device:CPU:0"):
            x = af.placeholder(af.float32, list(shape), name="x")
            y = af.add(af.multiply(x, 2.0), 1.0, name="y")
            waits = af.add(af.FIFOQueue(2, [af.float32], shapes=[[3]]).dequeue(), x,
                           name="waits")
    return graph, x, y, waits


class _Raw:
    """One bare connection to a worker, its calls written and answered by hand."""

    def __init__(self, stream):
        self.stream, self.pending, self.call_id = stream, b"", 0

    @classmethod
    async def open(cls, port):
        stream = await trio.open_unix_socket(same_host.socket_path(port, "bare"))
        await stream.send_all(bare.MAGIC + struct.pack("<I", 0))
        assert await stream.receive_some(1) == bare.ACCEPTED
        return cls(stream)

    async def send(self, frame):
        self.call_id += 1
        await self.stream.send_all(bare.REQUEST.pack(len(frame), self.call_id, RUN_GRAPH, 0,
                                                     30.0) + frame)

    async def next_answer(self):
        """The next answer as it came: its call id, kind and frame bytes (None: the server
        closed the connection)."""
        while True:
            if len(self.pending) >= bare.REPLY.size:
                length, call_id, kind, _ = bare.REPLY.unpack_from(self.pending)
                end = bare.REPLY.size + length
                if len(self.pending) >= end:
                    frame, self.pending = self.pending[bare.REPLY.size:end], self.pending[end:]
                    return call_id, kind, frame
            data = await self.stream.receive_some(1 << 16)
            if not data:
                return None
            self.pending += data

    async def answer(self):
        """The next answer's message (None: the server closed the connection)."""
        answer = await self.next_answer()
        if answer is None:
            return None
        call_id, kind, frame = answer
        assert call_id == self.call_id
        message = wire.decode(frame)
        assert (kind == bare.ERROR) == isinstance(message, ErrorReply)
        return message

    async def call(self, frame):
        await self.send(frame)
        return _outcome(await self.answer())


def _outcome(message):
    if isinstance(message, ErrorReply):
        return message.code, message.message, message.derived
    return [(entry.key, entry.value.dtype.str, entry.value.tolist()) for entry in message.tensors]


def _frame(handle, options, step_id, value, request_id=None, timeout_ms=None):
    return b"".join(bytes(b) for b in wire.encode(RunGraph(
        handle, step_id, [TensorEntry(options.feeds[0], value)], list(options.fetches),
        timeout_ms, False, request_id or step_id), checksums=True))


def _flipped(frame, at):
    return frame[:at] + bytes([frame[at] ^ 0x10]) + frame[at + 1:]


async def _until(condition):
    while not condition():
        await trio.sleep(0.001)


async def _scenario(spec, server):
    """Every outcome of the scenario on ``server``, and its short steps' count per part."""
    service, http = server.service, server.http
    graph, x, y, waits = _graph()
    outcomes, taken = {}, {}
    x3 = np.array([0.5, -3.0, 7.25], np.float32)

    def short():
        return http.statistics().short_steps

    (channel, handle, options), = (await register_partitions(spec, graph, [x], [y])).values()
    raw = await _Raw.open(server.port)
    before = short()
    outcomes["good"] = [await raw.call(_frame(handle, options, i, x3 + i)) for i in range(1, 9)]
    taken["good"] = short() - before
    before = short()
    outcomes["replayed"] = await raw.call(_frame(handle, options, 9, x3, request_id=3))
    outcomes["again"] = await raw.call(_frame(handle, options, 2, x3, request_id=10))
    taken["refused"] = short() - before  # (taken, then refused as the full path refuses)
    before = short()
    outcomes["float64"] = [await raw.call(_frame(handle, options, i, x3.astype(np.float64)))
                           for i in range(11, 15)]
    outcomes["shape"] = [await raw.call(_frame(handle, options, i, np.ones(4, np.float32)))
                         for i in range(15, 19)]
    taken["other signatures"] = short() - before
    # A flipped bit in a feed's bytes, then in the graph handle: DATA_LOSS, the connection closed.
    for name, at in (("feed", -8), ("handle", 40)):
        before = short()
        code, message, derived = await raw.call(
            _flipped(_frame(handle, options, 19 if name == "feed" else 20, x3), at))
        # (the sums of a header differ with its random graph handle)
        outcomes[f"damaged {name}"] = code, message.split(": the sender's")[0], derived
        assert await raw.answer() is None
        taken[f"damaged {name}"] = short() - before
        await raw.stream.aclose()
        raw = await _Raw.open(server.port)
    outcomes["after"] = await raw.call(_frame(handle, options, 21, x3))
    # Steps that wait: aborted, past their deadline, their client gone.
    (_, waiting, waiting_options), = (await register_partitions(
        spec, graph, [x], [waits])).values()
    before = short()
    outcomes["abort"] = []
    for step_id in (31, 32, 33):
        await raw.send(_frame(waiting, waiting_options, step_id, x3))
        await _until(lambda: step_id in service._steps and service._steps[step_id].running)
        await channel.abort_step(AbortStep(step_id, "CANCELLED", "the client went away"))
        outcomes["abort"].append(_outcome(await raw.answer()))
    outcomes["deadline"] = [await raw.call(_frame(waiting, waiting_options, step_id, x3,
                                                  timeout_ms=50)) for step_id in (34, 35, 36)]
    failed = service.counters.steps_failed
    await raw.send(_frame(waiting, waiting_options, 37, x3))
    await _until(lambda: 37 in service._steps and service._steps[37].running)
    await raw.stream.aclose()  # the client leaves mid-step
    await _until(lambda: 37 not in service._steps)
    outcomes["gone"] = (service._tombstones[37], service.counters.steps_failed - failed)
    taken["waits"] = short() - before
    outcomes["tombstones"] = sorted(service._tombstones.items())
    outcomes["counters"] = (service.counters.steps_run, service.counters.steps_failed,
                            service.counters.bytes_received, service.counters.bytes_sent,
                            service.plain_steps, len(service._steps))
    await channel.aclose()
    return outcomes, taken


async def test_the_short_path_answers_every_frame_as_the_full_path_does():
    results = {}
    for path in ("short", "full"):
        spec = af.ClusterSpec({"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]})
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                server = await nursery.start(af.Server(spec, "worker", 0).serve)
                if path == "full":  # an instance's own RunGraph: never bypassed
                    original = server.service.run_graph_in_scope

                    async def in_scope(request, scope, original=original):
                        return await original(request, scope)

                    server.service.run_graph_in_scope = in_scope
                results[path] = await _scenario(spec, server)
                nursery.cancel_scope.cancel()
    (short, taken), (full, none) = results["short"], results["full"]
    assert short == full
    assert set(none.values()) == {0}
    # From each signature's third frame (the first two teach its templates): taken; never
    # a frame of another dtype or shape, nor a damaged one.
    assert taken == {"good": 6, "refused": 2, "other signatures": 0, "damaged feed": 0,
                     "damaged handle": 0, "waits": 3}
    assert short["good"][0] == [("y:0", "<f4", [4.0, -3.0, 17.5])]
    assert short["good"][7] == [("y:0", "<f4", [18.0, 11.0, 31.5])]
    assert short["replayed"] == ("ABORTED", f"RunGraph of step 9 on {TASK}: request_id 3 was "
                                 "already used: a replayed RunGraph", False)
    assert short["again"] == ("ABORTED", f"step 2 was already finished on {TASK}", False)
    assert short["float64"] == [("INVALID_ARGUMENT", "feed '_feed_0:0' has dtype float64, but its "
                                 "placeholder declares float32", False)] * 4
    assert short["shape"] == [("INVALID_ARGUMENT", "feed '_feed_0:0' has shape [4], but its "
                               "placeholder declares (3,)", False)] * 4
    for name in ("feed", "handle"):
        code, message, _ = short[f"damaged {name}"]
        assert code == "DATA_LOSS" and message.startswith("same-host call run_graph: ") \
            and "Checksum" in message, message
    assert short["after"] == [("y:0", "<f4", [2.0, -5.0, 15.5])]
    assert short["abort"] == [("ABORTED", f"step {i} was aborted on {TASK}", True)
                              for i in (31, 32, 33)]
    assert short["deadline"] == [("DEADLINE_EXCEEDED", f"step {i} ran past its 50 ms deadline "
                                  f"on {TASK}", False) for i in (34, 35, 36)]
    assert short["gone"] == ("failed", 1)
    assert short["counters"][:2] == (9, 7) and short["counters"][-1] == 0


async def test_a_worker_process_takes_the_short_path(worker_processes):
    spec = loopback_spec({"worker": 1})
    assert worker_processes.start(spec, [("worker", 0)])
    graph, x, y, _ = _graph()
    with trio.fail_after(60):
        async with af.Session(graph=graph, cluster=spec) as sess:
            for i in range(100):
                value = np.full(3, i, np.float32)
                np.testing.assert_array_equal(await sess.run(y, {x: value}), value * 2 + 1)
        channel = af.cluster.channels.connect(spec["worker"][0])
        text = await channel.metrics_text(timeout=10)
        await channel.aclose()
    (short,) = [int(line.split()[1]) for line in text.splitlines()
                if line.startswith("asyncflow_transport_short_steps_total ")]
    assert 90 <= short <= 98  # (each signature's first two frames teach its templates)
    assert f'asyncflow_worker_steps_total{{task="{TASK}"}} 100' in text


async def test_a_stopped_worker_is_not_kept_by_the_templates_it_taught():
    """The frame templates are the process's (``transports.frame_templates``): what a worker
    made of one (its ``PlainStep``: the worker, its graph) must not keep a stopped worker, its
    graphs and their sessions' state alive until the templates are next dropped."""
    import gc
    import weakref

    spec = af.ClusterSpec({"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]})
    graph, x, y, _ = _graph()
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(af.Server(spec, "worker", 0).serve)
            (channel, handle, options), = (await register_partitions(
                spec, graph, [x], [y])).values()
            raw = await _Raw.open(server.port)
            x3 = np.array([0.5, -3.0, 7.25], np.float32)
            for i in range(1, 6):
                assert await raw.call(_frame(handle, options, i, x3)) == [
                    ("y:0", "<f4", (x3 * 2 + 1).tolist())]
            assert server.http.statistics().short_steps == 3
            await raw.stream.aclose()
            await channel.aclose()
            service = weakref.ref(server.service)
            nursery.cancel_scope.cancel()
    del server, channel, raw
    for _ in range(3):  # (the runner lets go of the server's finished tasks)
        await trio.lowlevel.checkpoint()
    gc.collect()
    assert service() is None  # (before: kept by the template's bound PlainStep)


async def test_a_frame_the_short_path_does_not_take_is_decoded_once():
    """A traced step's RunGraph (its template's step is None: ``prepare_run_graph``) and a
    deregistered graph's (its template dropped with it, then learnt again without a live
    step) go to the full path unread by the short path: one decode a frame
    (``frame_templates.statistics``), not two."""
    from transports import frame_templates

    spec = af.ClusterSpec({"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]})
    graph, x, y, _ = _graph()
    x3 = np.array([0.5, -3.0, 7.25], np.float32)

    def traced(handle, options, i):
        return b"".join(bytes(b) for b in wire.encode(RunGraph(
            handle, i, [TensorEntry(options.feeds[0], x3)], list(options.fetches), None, True,
            i), checksums=True))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(af.Server(spec, "worker", 0).serve)
            (channel, handle, options), = (await register_partitions(
                spec, graph, [x], [y])).values()
            raw = await _Raw.open(server.port)
            for i in range(1, 3):  # (the first two teach the signature's templates)
                await raw.call(traced(handle, options, i))
            before = frame_templates.statistics()
            for i in range(3, 8):
                assert await raw.call(traced(handle, options, i)) == [
                    ("y:0", "<f4", (x3 * 2 + 1).tolist())]
            after = frame_templates.statistics()
            assert (after["decoded"] - before["decoded"], after["steps"] - before["steps"]) \
                == (5, 0)
            for i in range(8, 11):  # taken
                await raw.call(_frame(handle, options, i, x3))
            await channel.deregister_graph(DeregisterGraph(handle))
            assert not frame_templates.known(len(_frame(handle, options, 11, x3)))
            before = frame_templates.statistics()
            for i in range(11, 14):
                code, _, _ = await raw.call(_frame(handle, options, i, x3))
                assert code == "NOT_FOUND"
            after = frame_templates.statistics()
            # its templates went with the graph (``repeat_frames.forget_graph``): the first
            # two decode in full and teach them again, the third by its template, unread by
            # the short path
            assert (after["decoded"] - before["decoded"], after["steps"] - before["steps"]) \
                == (1, 0)
            assert server.http.statistics().short_steps == 1
            await raw.stream.aclose()
            await channel.aclose()
            nursery.cancel_scope.cancel()


async def test_each_signature_of_a_step_keeps_its_own_answer():
    """A placeholder of an unknown length: each feed shape is its own frame template and its
    own reply (``bare_calls.step_answer``, the answer's head and frame in one buffer), so
    steps that alternate shapes, and a dtype the graph refuses between them, are each answered
    with their own values, the short ones byte for byte as the full path answers them."""
    spec = af.ClusterSpec({"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]})
    graph, x, y, _ = _graph([None])
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(af.Server(spec, "worker", 0).serve)
            (channel, handle, options), = (await register_partitions(
                spec, graph, [x], [y])).values()
            raw = await _Raw.open(server.port)
            frames = {}
            for i in range(1, 25):
                value = np.arange(3 + 2 * (i % 3), dtype=np.float32) * i
                if i % 7 == 0:
                    assert (await raw.call(_frame(handle, options, i, value.astype(
                        np.int32))))[0] == "INVALID_ARGUMENT"
                    continue
                await raw.send(_frame(handle, options, i, value))
                answer = await _answer_bytes(raw)
                assert answer == b"".join(bytes(b) for b in wire.encode(RunGraphReply(
                    [TensorEntry("y:0", value * 2 + 1)]), checksums=True))
                frames.setdefault(value.shape, []).append(i)
            # Three shapes, each signature's first two frames teach its templates.
            assert server.http.statistics().short_steps == sum(
                len(steps) - 2 for steps in frames.values()) == 15
            await raw.stream.aclose()
            await channel.aclose()
            nursery.cancel_scope.cancel()


async def _answer_bytes(raw):
    """The next answer's frame as it came (a FRAME of this call), whole."""
    answer = await raw.next_answer()
    assert answer is not None
    call_id, kind, frame = answer
    assert (call_id, kind) == (raw.call_id, bare.FRAME)
    return frame


async def test_an_answer_the_kernel_takes_in_part_is_sent_whole_in_order(monkeypatch):
    """Steps written back to back by a client that reads none of their answers until the
    server's socket is full: a short step's one-buffer answer (``bare_io.write_one``) that the
    kernel takes in part, or not at all, has its rest sent by ``_send_all`` before the next
    call is served, so every answer arrives whole, in order, byte for byte ``encode``'s."""
    rests, full = [], trio.Event()

    def write_one(sock, data):
        rest = real(sock, data)
        rests.append(len(rest))
        if rest:
            full.set()
        return rest

    real = bare._write_one
    monkeypatch.setattr(bare, "_write_one", write_one)
    spec = af.ClusterSpec({"worker": [f"127.0.0.1:{port}" for port in free_ports(1)]})
    graph, x, y, _ = _graph([None])
    values = [np.arange(3000, dtype=np.float32) + i for i in range(60)]  # ~12 KB answers
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(af.Server(spec, "worker", 0).serve)
            (channel, handle, options), = (await register_partitions(
                spec, graph, [x], [y])).values()
            raw = await _Raw.open(server.port)

            async def send_all():
                for i, value in enumerate(values):  # (call ids 1, 2, ...: ``_Raw.send``'s)
                    frame = _frame(handle, options, i + 1, value)
                    await raw.stream.send_all(bare.REQUEST.pack(
                        len(frame), i + 1, RUN_GRAPH, 0, 30.0) + frame)

            nursery.start_soon(send_all)
            await full.wait()  # (a write the kernel did not take whole)
            for i, value in enumerate(values):
                raw.call_id = i + 1
                assert await _answer_bytes(raw) == b"".join(bytes(b) for b in wire.encode(
                    RunGraphReply([TensorEntry("y:0", value * 2 + 1)]), checksums=True))
            assert 40 < len(rests) <= server.http.statistics().short_steps  # (the first: full)
            assert any(rests) and rests[-1] == 0
            await raw.stream.aclose()
            await channel.aclose()
            nursery.cancel_scope.cancel()
