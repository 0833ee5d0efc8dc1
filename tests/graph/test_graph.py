"""Graph building: names, scopes, lookups, inference errors, operators. No event loop needed."""
import numpy as np
import pytest
import trio

import asyncflow as af


@pytest.fixture
def graph():
    with af.Graph().as_default() as g:
        yield g


def test_unique_names_and_scopes(graph):
    a = af.constant(1.0)
    b = af.constant(2.0)
    assert (a.op.name, b.op.name) == ("Const", "Const_1")
    s1 = af.add(a, b)
    s2 = af.add(a, b)
    assert (s1.name, s2.name) == ("add:0", "add_1:0")
    with af.name_scope("layer1"):
        c = af.constant(3.0, name="c")
        with af.name_scope("inner"):
            d = af.identity(c)
    with af.name_scope("layer1"):
        e = af.constant(4.0, name="c")
    assert c.op.name == "layer1/c"
    assert d.op.name == "layer1/inner/Identity"
    assert e.op.name == "layer1_1/c"


def test_lookups(graph):
    c = af.constant([1, 2], name="c")
    assert graph.get_operation_by_name("c") is c.op
    assert graph.get_tensor_by_name("c:0") is c
    with pytest.raises(KeyError, match="c:1"):
        graph.get_tensor_by_name("c:1")
    with pytest.raises(ValueError, match="looks like an Operation name"):
        graph.get_tensor_by_name("c")
    with pytest.raises(KeyError, match="missing"):
        graph.get_operation_by_name("missing")
    assert graph.get_operations() == [c.op]


def test_tensor_properties(graph):
    x = af.placeholder(af.float32, [None, 3], name="x")
    assert x.name == "x:0"
    assert x.dtype is af.float32
    assert x.shape.as_list() == [None, 3]
    assert x.get_shape() == af.TensorShape([None, 3])
    x.set_shape([2, 3])
    assert x.shape.as_list() == [2, 3]
    with pytest.raises(ValueError, match="x:0"):
        x.set_shape([4, 3])
    assert x.graph is graph
    assert x.op.type == "Placeholder"
    assert x.op.outputs == (x,) and x.op.outputs is x.op.outputs  # its own tuple: no copy
    assert x.op.inputs is x.op.inputs
    assert x.op.attrs["dtype"] == x.op.get_attr("dtype")
    with pytest.raises(TypeError):  # a read-only view of the op's own attrs
        x.op.attrs["dtype"] = None


def test_creation_site_points_at_user_code(graph):
    c = af.constant(1.0)
    filename, lineno, function = c.op.traceback
    assert filename == __file__
    assert function == "test_creation_site_points_at_user_code"


def test_shape_inference_errors_name_the_op(graph):
    a = af.constant(np.ones((2, 3), np.float32))
    b = af.constant(np.ones((4, 5), np.float32))
    with pytest.raises(ValueError, match=r"MatMul 'mm'.*inner dimensions 3 and 4"):
        af.matmul(a, b, name="mm")
    with pytest.raises(ValueError, match="Add 'add'.*broadcasting"):
        af.add(a, af.constant(np.ones((3, 2), np.float32)))
    with pytest.raises(TypeError, match="Add 'add.*float32 and int32"):
        af.add(a, af.constant(np.ones((2, 3), np.int32)))


def test_python_scalars_take_the_tensor_dtype(graph):
    i = af.constant([1, 2], dtype=af.int64)
    assert (i + 1).dtype is af.int64
    assert (2 * i).dtype is af.int64
    f = af.constant([1.0], dtype=af.float64)
    assert (f * 2.5).dtype is af.float64
    with pytest.raises(TypeError, match="fractional"):
        i + 1.5
    assert (af.constant(1) / af.constant(2)).dtype is af.float64  # TF1 truediv


def test_operators_build_ops(graph):
    x = af.placeholder(af.float32, [2])
    y = af.placeholder(af.float32, [2])
    ops = [x + y, x - y, x * y, x / y, x // y, x % y, x ** y, -x, abs(x), x < y, x <= y,
           x > y, x >= y, 1.0 - x, 2.0 / x]
    assert [t.op.type for t in ops] == [
        "Add", "Sub", "Mul", "RealDiv", "FloorDiv", "FloorMod", "Pow", "Neg", "Abs", "Less",
        "LessEqual", "Greater", "GreaterEqual", "Sub", "RealDiv"]
    b = af.placeholder(af.bool, [2])
    assert [(b & b).op.type, (b | b).op.type, (~b).op.type] == ["LogicalAnd", "LogicalOr", "LogicalNot"]
    m = af.placeholder(af.float32, [2, 2])
    assert (m @ m).op.type == "MatMul"
    assert np.float32(2.0) * x is not None


def test_equality_is_identity_and_bool_raises(graph):
    x = af.constant(1.0)
    y = af.constant(1.0)
    assert x != y and x == x
    assert {x: 1, y: 2}[x] == 1
    with pytest.raises(TypeError, match="af.cond"):
        bool(x)
    with pytest.raises(TypeError, match="af.cond"):
        if x:
            pass


def test_control_dependencies(graph):
    a = af.constant(1.0)
    b = af.constant(2.0)
    with af.control_dependencies([a]):
        c = af.identity(b)
        with af.control_dependencies([b.op]):
            d = af.identity(b)
        with af.control_dependencies(None):
            e = af.identity(b)
    assert c.op.control_inputs == [a.op]
    assert d.op.control_inputs == [a.op]  # b is already a data input of d
    assert e.op.control_inputs == []


def test_device_scopes_merge(graph):
    with af.device("/job:worker/task:1"):
        with af.device("/device:CPU:0"):
            a = af.constant(1.0)
        b = af.constant(1.0)
        with af.device(lambda op: "/device:GPU:0" if op.type == "MatMul" else "/device:CPU:1"):
            c = af.constant(np.ones((1, 1), np.float32))
            d = af.matmul(c, c)
    assert a.device == "/job:worker/task:1/device:CPU:0"
    assert b.device == "/job:worker/task:1"
    assert c.device == "/job:worker/task:1/device:CPU:1"
    assert d.device == "/job:worker/task:1/device:GPU:0"
    with pytest.raises(ValueError, match="bogus"):
        with af.device("/bogus:1"):
            pass


def test_colocation(graph):
    v = af.Variable(1.0, name="v")
    with af.colocate_with(v):
        x = af.identity(v)
    assert x.op.colocation_groups == ("v",)
    assert v.initializer.colocation_groups == ("v",)


def test_finalize(graph):
    af.constant(1.0)
    graph.finalize()
    with pytest.raises(RuntimeError, match="finalized"):
        af.constant(2.0)


def test_collections(graph):
    af.add_to_collection("things", 1)
    af.add_to_collections(["things", "other"], 2)
    assert af.get_collection("things") == [1, 2]
    assert af.get_collection("other") == [2]
    v = af.Variable(1.0, name="v")
    w = af.Variable(1.0, name="w", trainable=False)
    assert af.global_variables() == [v, w]
    assert af.trainable_variables() == [v]
    assert af.get_collection(af.GraphKeys.GLOBAL_VARIABLES, scope="w") == [w]


def test_inputs_from_another_graph_are_rejected(graph):
    with af.Graph().as_default():
        other = af.constant(1.0)
    with pytest.raises(ValueError, match="different graph"):
        af.add(af.constant(1.0), other)


def test_invalid_names(graph):
    with pytest.raises(ValueError, match="not a valid op name"):
        af.constant(1.0, name="_bad")


async def test_default_graph_is_context_local():
    seen = {}

    async def build(label):
        with af.Graph().as_default() as g:
            af.constant(1.0, name=label)
            await trio.sleep(0)
            seen[label] = (af.get_default_graph() is g, [op.name for op in g.get_operations()])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(build, "a")
        nursery.start_soon(build, "b")
    assert seen == {"a": (True, ["a"]), "b": (True, ["b"])}


def test_reset_default_graph():
    af.reset_default_graph()
    g = af.get_default_graph()
    af.constant(1.0)
    af.reset_default_graph()
    assert af.get_default_graph() is not g
    assert af.get_default_graph().get_operations() == []
    with af.Graph().as_default():
        with pytest.raises(RuntimeError, match="nested"):
            af.reset_default_graph()


def test_variable_properties(graph):
    v = af.Variable(np.zeros((2, 3), np.float32), name="v")
    assert v.name == "v:0"
    assert v.shape.as_list() == [2, 3]
    assert v.dtype is af.float32
    assert v.initializer.type == "Assign"
    assert v.op.type == "VariableV2"
    assert af.convert_to_tensor(v).op.name == "v/read"
    with pytest.raises(ValueError, match="fully defined"):
        af.Variable(af.placeholder(af.float32, [None]))
