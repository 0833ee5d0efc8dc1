"""What a plan computes once when it is built, not on every run (issue 18, item 2).

``ExecutionPlan.may_offload``, ``NodePlan.subscribe`` and each node context's ``prepared`` (a
kernel's prepare hook: a Send/Recv's root-frame rendezvous key, a queue's spec) are set by
``compile_plan``; running the plan any number of times never computes them again.
"""
import dataclasses

import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors
from asyncflow.compile import prune
from asyncflow.kernels import registry
from asyncflow.rendezvous_keys import make_key, parse_key, source_device
from one_device import plan_of_ops

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"


def plan_of(fetches, feeds=()):
    ops = prune.prune(list(fetches), [], list(feeds))
    return plan_of_ops(ops, feeds, fetches)


def counting_prepare(monkeypatch, op_type, device=registry.ANY):
    """Wrap ``op_type``'s prepare hook so its calls are counted; returns the list of calls."""
    kernel = registry._KERNELS[(op_type, device)]
    calls = []

    def prepare(ctx):
        calls.append(ctx.name)
        return kernel.prepare(ctx)
    monkeypatch.setitem(registry._KERNELS, (op_type, device),
                        dataclasses.replace(kernel, prepare=prepare))
    return calls


def test_may_offload_is_a_plan_field():
    with af.Graph().as_default():
        a = af.placeholder(af.float32, [None, None])
        small = plan_of([a + 1.0], [a])
        large = plan_of([af.matmul(a, a)], [a])
    assert small.may_offload is False
    assert large.may_offload is True  # MatMul may go to a thread when its inputs are large


def test_subscribe_is_the_kernels_form_set_at_build():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [])
        recv = af.get_default_graph().create_op("_Recv", [], {
            "dtype": af.float32, "tensor_name": "edge_1_x_0", "send_device": CPU0,
            "send_device_incarnation": 1, "recv_device": CPU1,
            "shape": af.TensorShape([])}, name="recv")
        plan = plan_of([recv.outputs[0] + x], [x])
    forms = {node.op.type: node.subscribe for node in plan.nodes}
    assert forms.pop("_Recv") is registry.get_kernel("_Recv", "CPU").subscribe is not None
    assert forms and all(form is None for form in forms.values())  # not waiting kernels


def test_recv_key_is_prepared_with_the_plan_in_the_one_key_format():
    with af.Graph().as_default():
        recv = af.get_default_graph().create_op("_Recv", [], {
            "dtype": af.float32, "tensor_name": "edge_1_x_0", "send_device": CPU0,
            "send_device_incarnation": 0xABC, "recv_device": CPU1,
            "shape": af.TensorShape([])}, name="recv")
        plan = plan_of([recv.outputs[0]])
    key = plan.nodes[0].ctx.prepared
    assert key == make_key(CPU0, 0xABC, CPU1, "edge_1_x_0")
    assert parse_key(key) == (CPU0, 0xABC, CPU1, "edge_1_x_0", "0:0")
    assert source_device(key) == CPU0


@pytest.mark.parametrize("key", ["a;1;b;t", "a;zz;b;t;0:0", "a;1;;t;0:0"])
def test_malformed_key_is_refused_naming_it(key):
    with pytest.raises(ValueError, match="rendezvous key"):
        parse_key(key)


async def test_send_recv_keys_are_prepared_once_per_plan_node_not_per_run(monkeypatch):
    sends = counting_prepare(monkeypatch, "_Send")
    recvs = counting_prepare(monkeypatch, "_Recv")
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [])
        with af.device("/device:CPU:0"):
            a = x + 0.0
        with af.device("/device:CPU:1"):
            y = a * 2.0
        with af.device("/device:CPU:0"):
            z = y + 1.0
        async with af.Session(config=af.SessionConfig(device_count={"CPU": 2})) as sess:
            for i in range(25):
                assert await sess.run(z, {x: float(i)}) == 2.0 * i + 1.0
    # One edge each way (a to CPU:1, y back to CPU:0): each Send and Recv prepared once.
    assert len(sends) == len(recvs) == 2
    assert len(set(sends)) == len(set(recvs)) == 2


async def test_a_loop_builds_per_iteration_keys_and_the_root_key_once(monkeypatch):
    recvs = counting_prepare(monkeypatch, "_Recv")
    with af.Graph().as_default():
        n = af.placeholder(af.int32, [])

        def body(i, total):
            with af.device("/device:CPU:1"):
                doubled = af.identity(i) * 2
            return i + 1, total + doubled
        _, total = af.while_loop(lambda i, total: i < n, body, [af.constant(0), af.constant(0)])
        async with af.Session(config=af.SessionConfig(device_count={"CPU": 2})) as sess:
            for count in (3, 5, 4):
                assert await sess.run(total, {n: count}) == count * (count - 1)
    assert recvs and len(recvs) == len(set(recvs))  # each Recv node prepared once, not per run


async def test_queue_spec_is_prepared_once_per_queue_node(monkeypatch):
    specs = counting_prepare(monkeypatch, "FIFOQueue", "CPU")
    with af.Graph().as_default():
        queue = af.FIFOQueue(4, [af.float32], shapes=[[2]], name="q")
        x = af.placeholder(af.float32, [2])
        enqueue = queue.enqueue([x])
        dequeue = queue.dequeue()
        async with af.Session() as sess:
            for i in range(10):
                await sess.run(enqueue, {x: np.full(2, i, np.float32)})
                np.testing.assert_array_equal(await sess.run(dequeue), np.full(2, i, np.float32))
    # One queue node in the enqueue plan and one in the dequeue plan, whatever the runs.
    assert specs == ["q", "q"]


def test_prepare_rejecting_attrs_names_the_op(monkeypatch):
    kernel = registry._KERNELS[("FIFOQueue", "CPU")]
    monkeypatch.setitem(registry._KERNELS, ("FIFOQueue", "CPU"),
                        dataclasses.replace(kernel, prepare=lambda ctx: int("not a capacity")))
    with af.Graph().as_default():
        queue = af.FIFOQueue(4, [af.float32], name="bad_queue")
        with pytest.raises(errors.InvalidArgumentError, match="FIFOQueue 'bad_queue'"):
            plan_of([queue.queue_ref])


def test_register_prepare_needs_a_registered_kernel():
    with pytest.raises(KeyError, match="register_prepare\\('NoSuchOp'\\): no kernel"):
        registry.register_prepare("NoSuchOp")(lambda ctx: None)


def test_an_op_without_a_kernel_on_the_device_is_named(monkeypatch):
    monkeypatch.delitem(registry._KERNELS, ("Identity", registry.ANY))
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [])
        y = af.identity(x, name="lonely")
        with pytest.raises(errors.NotFoundError, match="No kernel registered for Identity "
                                                       "'lonely' on device .*CPU:0"):
            plan_of([y], [x])
