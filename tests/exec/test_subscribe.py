"""Subscribing kernels: a Recv hands the rendezvous a callback instead of running as a task.

Covers ``LocalRendezvous.subscribe``/``unsubscribe``, the ``register_subscribe`` form of the
``_Recv`` kernel (and its fallback on a rendezvous that cannot subscribe), and the executor's
ready-queue path: values cross devices without a task per Recv, failures and cancellation
still wake or drop every subscription.
"""
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow import errors
from asyncflow.cluster.remote_rendezvous import StepRendezvous
from asyncflow.kernels.registry import WOULD_BLOCK, get_kernel
from asyncflow.exec.rendezvous import LocalRendezvous, RendezvousStatistics
from asyncflow.rendezvous_keys import make_key
from partition_graphs import counting_tasks, long_time_slice

# These tests count tasks and task steps: one long time slice keeps them deterministic.
pytestmark = pytest.mark.usefixtures("long_time_slice")


KEY = make_key("/job:localhost/replica:0/task:0/device:CPU:0", 1,
               "/job:localhost/replica:0/task:0/device:CPU:1", "edge_1_x_0")


def test_subscriber_is_called_by_send():
    rdv = LocalRendezvous()
    calls = []
    rdv.subscribe(KEY, lambda item, error: calls.append((item, error)))
    assert calls == []
    assert rdv.statistics() == RendezvousStatistics(0, 1, 0, 0, False)
    rdv.send(KEY, 7, is_dead=True)
    assert calls == [((7, True), None)]
    assert rdv.statistics() == RendezvousStatistics(0, 0, 1, 1, False)


def test_subscriber_is_called_at_once_when_value_is_there():
    rdv = LocalRendezvous()
    rdv.send(KEY, "v")
    calls = []
    rdv.subscribe(KEY, lambda item, error: calls.append((item, error)))
    assert calls == [(("v", False), None)]
    assert rdv.statistics().pending_sends == 0


def test_abort_calls_subscribers_with_the_error_now_and_later():
    rdv = LocalRendezvous()
    calls = []
    rdv.subscribe(KEY, lambda item, error: calls.append((item, error)))
    cause = errors.UnavailableError(None, None, "worker lost")
    rdv.abort(cause)
    rdv.subscribe("other", lambda item, error: calls.append((item, error)))
    assert calls == [(None, cause), (None, cause)]
    rdv.send(KEY, 1)  # a send after abort is a no-op: nobody is called twice
    assert len(calls) == 2


def test_unsubscribe_drops_only_an_uncalled_subscription():
    rdv = LocalRendezvous()
    calls = []

    def callback(item, error):
        calls.append(item)

    rdv.subscribe(KEY, callback)
    rdv.unsubscribe(KEY, lambda item, error: None)  # not this key's callback: kept
    rdv.unsubscribe(KEY, callback)
    rdv.send(KEY, 3)
    assert calls == []
    assert rdv.statistics().pending_sends == 1  # the value waits for a later receiver


async def test_second_receiver_on_a_key_is_refused():
    rdv = LocalRendezvous()
    rdv.subscribe(KEY, lambda item, error: None)
    with pytest.raises(RuntimeError, match="Two receivers"):
        rdv.subscribe(KEY, lambda item, error: None)
    with pytest.raises(RuntimeError, match="Two receivers"):
        await rdv.recv(KEY)


def _recv_context(rendezvous):
    """A StepContext of a real ``_Recv`` op planned on CPU:1 of a two-device session."""
    from asyncflow.exec.devices import make_local_devices
    from asyncflow.compile.node_graph import NodeGraph
    from asyncflow.exec.context import NodeContext
    from asyncflow.exec.context import StepContext
    from asyncflow.exec.step import Step
    from asyncflow.exec.resources import ResourceManager
    graph = af.Graph()
    with graph.as_default():
        recv = graph.create_op("_Recv", [], {
            "dtype": af.float32, "tensor_name": "edge_1_x_0",
            "send_device": "/job:localhost/replica:0/task:0/device:CPU:0",
            "send_device_incarnation": 1,
            "recv_device": "/job:localhost/replica:0/task:0/device:CPU:1",
            "shape": af.TensorShape([])}, name="recv")
    device = make_local_devices({"CPU": 2})[1]
    node = NodeGraph.from_ops([recv], [], [recv.outputs[0]], [], {recv: device.name}).nodes[0]
    step = Step(1, rendezvous=rendezvous)
    return StepContext(NodeContext(node, device, ResourceManager()), step)


async def test_recv_kernel_subscribes_and_delivers():
    rdv = LocalRendezvous()
    ctx = _recv_context(rdv)
    delivered = []
    cancel = get_kernel("_Recv", "CPU").subscribe(ctx, lambda *out: delivered.append(out))
    assert callable(cancel) and delivered == []
    rdv.send(KEY, np.float32(2.5))
    assert delivered == [((np.float32(2.5),),)]


async def test_recv_kernel_declines_a_remote_key_outside_a_worker_step():
    # The worker's step rendezvous pulls a remote key only in a step's run (its ``spawn``);
    # outside one its subscribe answers False and the Recv awaits ``recv`` instead.
    rdv = StepRendezvous(1, ["/job:localhost/replica:0/task:0/device:CPU:1"])
    assert get_kernel("_Recv", "CPU").subscribe(_recv_context(rdv), print) is WOULD_BLOCK


async def test_cross_device_chain_runs_without_a_task_per_recv():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [])
        y = x
        for i in range(40):
            with af.device(f"/device:CPU:{(i + 1) % 2}"):
                y = af.identity(y) + 1.0
        async with af.Session(config=af.SessionConfig(device_count={"CPU": 2})) as sess:
            assert await sess.run(y, {x: 1.0}) == 41.0
            with counting_tasks() as counter:
                assert await sess.run(y, {x: 2.0}) == 42.0
    # One task per partition (and none per Recv: 40 edges would spawn 40 more).
    assert counter.spawned <= 4


async def test_failure_in_one_partition_wakes_the_subscribed_other():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None])
        with af.device("/device:CPU:1"):
            bad = af.reshape(x, [3], name="bad_reshape")
        with af.device("/device:CPU:0"):
            out = af.identity(bad) * 2.0
        async with af.Session(config=af.SessionConfig(device_count={"CPU": 2})) as sess:
            with trio.fail_after(10):
                with pytest.raises(af.errors.InvalidArgumentError) as info:
                    await sess.run(out, {x: np.ones(4, np.float32)})
            assert info.value.op.name == "bad_reshape"
            np.testing.assert_array_equal(await sess.run(out, {x: np.ones(3, np.float32)}),
                                          np.full(3, 2.0))


async def test_timeout_drops_a_waiting_subscription(autojump_clock):
    async def wait_forever(v):
        await trio.sleep_forever()

    with af.Graph().as_default():
        x = af.constant(np.float32(1.0))
        with af.device("/device:CPU:1"):
            blocked = af.py_func(wait_forever, [x], af.float32, name="waits")
        with af.device("/device:CPU:0"):
            out = af.identity(blocked) + 1.0
            quick = af.identity(x) + 1.0
        async with af.Session(config=af.SessionConfig(device_count={"CPU": 2})) as sess:
            with pytest.raises(af.errors.DeadlineExceededError):
                await sess.run(out, options=af.RunOptions(timeout_in_ms=300))
            assert await sess.run(quick) == 2.0


@pytest.mark.parametrize("kind", ["local", "worker"])
async def test_both_rendezvous_keep_one_contract_for_local_keys(kind):
    from asyncflow.exec.rendezvous import Rendezvous
    devices = ["/job:localhost/replica:0/task:0/device:CPU:0",
               "/job:localhost/replica:0/task:0/device:CPU:1"]
    rdv = LocalRendezvous() if kind == "local" else StepRendezvous(1, devices)
    assert all(callable(getattr(rdv, name)) for name in
               ("send", "poll", "subscribe", "unsubscribe", "recv", "abort", "statistics"))
    assert {n for n in vars(Rendezvous) if not n.startswith("_")} <= set(dir(rdv))
    calls = []
    assert rdv.subscribe(KEY, lambda item, error: calls.append(item)) is True
    rdv.send(KEY, 1.0)  # delivered by the send, synchronously
    rdv.send("/job:localhost/replica:0/task:0/device:CPU:0;01;x;t;0:0", 2.0)
    assert rdv.poll("/job:localhost/replica:0/task:0/device:CPU:0;01;x;t;0:0") == (2.0, False)
    other = make_key(devices[0], 1, devices[1], "edge_2")
    rdv.send(other, 3.0)
    assert rdv.subscribe(other, lambda item, error: calls.append(item)) is True  # at once
    assert calls == [(1.0, False), (3.0, False)]
    cause = errors.CancelledError(None, None, "gone")
    late = []
    rdv.abort(cause)
    rdv.subscribe(make_key(devices[0], 1, devices[1], "edge_3"),
                  lambda item, error: late.append(error))
    assert late == [cause] and rdv.aborted
