"""GraphDef export and import: plain-data structure, round trips, input_map, return_elements."""
import msgpack
import numpy as np
import pytest

import asyncflow as af
from asyncflow.graph import graph_def


def _build_model():
    x = af.placeholder(af.float32, shape=[None, 3], name="x")
    with af.name_scope("layer1"):
        w = af.constant(np.arange(6, dtype=np.float32).reshape(3, 2), name="w")
        b = af.constant([0.5, -1.0], name="b")
        y = af.add(af.matmul(x, w), b, name="y")
    s = af.reduce_sum(y, axis=1, name="s")
    words = af.constant([b"ab", b"", "c\u00e9"], name="words")
    with af.control_dependencies([s]):
        out = af.identity(y * 2.0, name="out")
    return x, y, s, words, out


def test_graph_def_structure_is_plain_and_tagged():
    with af.Graph().as_default() as g:
        _build_model()
        gd = g.as_graph_def()
    assert set(gd) == {"versions", "node"}
    nodes = {n["name"]: n for n in gd["node"]}
    assert nodes["x"]["attr"]["dtype"] == {"type": "float32"}
    assert nodes["x"]["attr"]["shape"] == {"shape": [None, 3]}
    assert nodes["layer1/y"]["input"] == ["layer1/MatMul:0", "layer1/b:0"]
    assert nodes["out"]["input"] == ["mul:0", "^s"]
    w = nodes["layer1/w"]["attr"]["value"]["tensor"]
    assert w["dtype"] == "float32" and w["shape"] == [3, 2] and isinstance(w["data"], bytes)
    assert nodes["words"]["attr"]["value"]["tensor"]["data"] == [b"ab", b"", "c\u00e9".encode()]
    assert nodes["s"]["attr"]["axis"] == {"tuple": [{"i": 1}]}
    assert nodes["s"]["attr"]["keepdims"] == {"b": False}
    packed = msgpack.packb(gd, use_bin_type=True)
    assert msgpack.unpackb(packed, raw=False) == gd


def test_attr_encoding_round_trips_every_kind():
    values = [None, af.bfloat16, af.TensorShape(None), af.TensorShape([2, None]), True, 7,
              2.5, "s", b"\x00b", (1, 2), [af.int32, 3.0], {"k": [None]},
              np.array([[1.5, 2]], dtype=af.bfloat16.np), np.zeros((0, 2), np.int64),
              np.array(3, np.uint16), np.array([b"x", b"yz"], dtype=object)]
    for value in values:
        back = graph_def.decode_attr(msgpack.unpackb(
            msgpack.packb(graph_def.encode_attr(value), use_bin_type=True), raw=False))
        if isinstance(value, np.ndarray):
            assert back.dtype == value.dtype and back.shape == value.shape
            np.testing.assert_array_equal(back, value)
        else:
            assert back == value and type(back) is type(value)
    with pytest.raises(TypeError, match="function"):
        graph_def.encode_attr(lambda: 0)
    with pytest.raises(ValueError, match="needs 8 bytes"):
        graph_def.decode_array({"dtype": "float32", "shape": [2], "data": b"\x00" * 7})


async def test_round_trip_runs_identically_and_def_is_stable():
    feed = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    with af.Graph().as_default() as g1:
        x, y, s, words, out = _build_model()
        gd = g1.as_graph_def()
        async with af.Session() as sess:
            expected = await sess.run([y, s, words, out], {x: feed})
    wire = msgpack.unpackb(msgpack.packb(gd, use_bin_type=True), raw=False)
    with af.Graph().as_default() as g2:
        x2, y2, s2, w2, out2 = af.import_graph_def(
            wire, return_elements=["x:0", "layer1/y:0", "s:0", "words:0", "out:0"], name="")
        assert g2.as_graph_def() == gd
        assert y2.shape.as_list() == [None, 2]
        async with af.Session() as sess:
            got = await sess.run([y2, s2, w2, out2], {x2: feed})
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(a, b)


async def test_import_prefix_input_map_and_return_ops():
    with af.Graph().as_default() as g1:
        _build_model()
        gd = g1.as_graph_def()
    with af.Graph().as_default() as g2:
        replacement = af.constant([[1.0, 1.0, 1.0]], name="ones")
        y, out_op = af.import_graph_def(gd, input_map={"x": replacement},
                                        return_elements=["layer1/y:0", "out"])
        assert y.name == "import/layer1/y:0"
        assert out_op.name == "import/out" and isinstance(out_op, af.Operation)
        assert out_op.control_inputs[0].name == "import/s"
        assert y.op.inputs[0].op.inputs[0] is replacement
        again = af.import_graph_def(gd, return_elements=["s:0"])[0]
        assert again.name == "import_1/s:0"
        named = af.import_graph_def(gd, return_elements=["s"], name="m")[0]
        assert named.name == "m/s"
        async with af.Session() as sess:
            np.testing.assert_allclose(await sess.run(y), [[6.5, 8.0]])


def test_import_errors_name_the_problem():
    with af.Graph().as_default() as g1:
        _build_model()
        gd = g1.as_graph_def()
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="not found in graph_def"):
            af.import_graph_def(gd, input_map={"nope:0": af.constant(1.0)})
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="return_element 'zzz:0'"):
            af.import_graph_def(gd, return_elements=["zzz:0"])
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="incompatible|Shapes|shape"):
            af.import_graph_def(gd, input_map={"x:0": af.constant(np.ones((2, 4), np.float32))})
    with af.Graph().as_default():
        af.import_graph_def(gd, name="")
        with pytest.raises(ValueError, match="Duplicate node name"):
            af.import_graph_def(gd, name="")
    broken = {"versions": gd["versions"],
              "node": [{"name": "a", "op": "Identity", "input": ["missing:0"], "device": "",
                        "attr": {}}]}
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="names no node"):
            af.import_graph_def(broken)


def test_devices_colocation_and_shapes_survive():
    with af.Graph().as_default() as g1:
        with af.device("/device:CPU:1"):
            a = af.placeholder(af.float32, name="a")
        with g1.colocate_with(a.op):
            b = af.identity(a, name="b")
        b.set_shape([4])
        gd = g1.as_graph_def(add_shapes=True)
    with af.Graph().as_default() as g2:
        af.import_graph_def(gd, name="")
        b2 = g2.get_tensor_by_name("b:0")
        assert b2.shape.as_list() == [4]
        assert b2.op.colocation_groups == ("a",)
        assert g2.get_operation_by_name("a").device == g1.get_operation_by_name("a").device
        assert g2.as_graph_def(add_shapes=True) == gd
