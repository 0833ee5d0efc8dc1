"""Placement as data: constraints, colocation, soft placement, greedy cost model, pinning."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow import errors
from asyncflow.compile.placement import place
from asyncflow.compile.prune import prune
from asyncflow.kernels.registry import supported_device_kinds

CPU0 = "/job:localhost/replica:0/task:0/device:CPU:0"
CPU1 = "/job:localhost/replica:0/task:0/device:CPU:1"
GPU0 = "/job:localhost/replica:0/task:0/device:GPU:0"


def _place(fetches, devices=(CPU0, CPU1), kinds=supported_device_kinds, **kw):
    targets = [f for f in fetches if isinstance(f, af.Operation)]
    tensors = [f for f in fetches if not isinstance(f, af.Operation)]
    return place(prune(tensors, targets, []), list(devices), kinds, **kw).by_name()


def test_explicit_and_partial_specs():
    with af.Graph().as_default():
        a = af.constant(1.0, name="a")
        with af.device("/device:CPU:1"):
            b = af.add(a, a, name="b")
        with af.device("/cpu:0"):
            c = af.multiply(b, b, name="c")
    placed = _place([c])
    assert placed["b"] == CPU1 and placed["c"] == CPU0


def test_hard_placement_failure_names_spec_op_and_reason():
    with af.Graph().as_default():
        ones = af.ones([2, 2])
        with af.device("/device:GPU:3"):
            x = af.matmul(ones, ones, name="x")
    with pytest.raises(errors.InvalidArgumentError) as info:
        _place([x], allow_soft_placement=False)
    message = str(info.value)
    assert "Could not satisfy explicit device specification '/device:GPU:3' for op 'x' (MatMul)" \
        in message and "because no devices matching" in message
    assert info.value.op is x.op


def test_soft_placement_falls_back():
    with af.Graph().as_default():
        with af.device("/device:GPU:3"):
            x = af.matmul(af.ones([2, 2]), af.ones([2, 2]), name="x")
    assert _place([x], allow_soft_placement=True)["x"] in (CPU0, CPU1)


def test_kernel_availability_per_kind():
    def kinds(op_type, input_dtypes=(), output_dtypes=()):
        return ["CPU"] if op_type == "MatMul" else ["ANY"]
    with af.Graph().as_default():
        with af.device("/device:GPU:0"):
            x = af.matmul(af.ones([2, 2]), af.ones([2, 2]), name="x")
            y = af.add(x, x, name="y")
    with pytest.raises(errors.InvalidArgumentError, match="no supported kernel for GPU"):
        _place([y], devices=(CPU0, GPU0), kinds=kinds, allow_soft_placement=False)
    placed = _place([y], devices=(CPU0, GPU0), kinds=kinds)
    assert placed["x"] == CPU0 and placed["y"] == GPU0


def test_variable_groups_follow_ref_edges_and_colocation():
    with af.Graph().as_default():
        with af.device("/device:CPU:1"):
            v = af.Variable(np.zeros(3, np.float32), name="v")
        update = af.assign_add(v, af.ones([3]), name="update")  # colocated by the builder
        read = v.read_value()
    placed = _place([update.op, read, v.initializer])
    assert {placed[n] for n in ("v", "v/Assign", "update", read.op.name)} == {CPU1}


def test_conflicting_colocated_requests():
    with af.Graph().as_default():
        with af.device("/device:CPU:0"):
            a = af.constant(1.0, name="a")
        with af.colocate_with(a), af.device("/device:CPU:1"):
            b = af.identity(a, name="b")
        b.op._device = "/device:CPU:1"  # a colocated op that also asks for another device
    with pytest.raises(errors.InvalidArgumentError, match="Cannot colocate nodes 'a' and 'b'"):
        _place([b], allow_soft_placement=False)
    assert set(_place([b]).values()) == {CPU0}


def test_greedy_spreads_independent_heavy_work_and_keeps_chains_local():
    with af.Graph().as_default() as graph:
        mats = [af.matmul(af.ones([256, 256]), af.ones([256, 256]), name=f"mm{i}") for i in range(4)]
        total = af.add_n(mats, name="total")
        tail = af.multiply(total, 2.0, name="tail")
    placed = _place([tail])
    assert sorted(placed[f"mm{i}"] for i in range(4)) == [CPU0, CPU0, CPU1, CPU1]
    assert placed["tail"] == placed["total"]
    # constants follow their consumer instead of being shipped
    for i in range(4):
        consts = [t.op.name for t in graph.get_operation_by_name(f"mm{i}").inputs]
        assert all(placed[c] == placed[f"mm{i}"] for c in consts if c in placed)


def test_deterministic():
    with af.Graph().as_default():
        mats = [af.matmul(af.ones([64, 64]), af.ones([64, 64])) for _ in range(6)]
        total = af.add_n(mats)
    assert _place([total]) == _place([total])


def test_pinned_stateful_ops_keep_their_device():
    with af.Graph().as_default():
        v = af.Variable(np.zeros(2, np.float32), name="v")
    first = _place([v.initializer])
    other = CPU1 if first["v"] == CPU0 else CPU0
    again = _place([v.initializer], pinned={"v": other})
    assert again["v"] == other and again["v/Assign"] == other
