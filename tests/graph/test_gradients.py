"""af.gradients: the backward walk, and every math/array/sources gradient vs finite differences."""
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import asyncflow as af
from gradcheck import assert_close, check_gradients

SETTINGS = settings(max_examples=25, deadline=None)


def floats(low=-2.0, high=2.0):
    return st.floats(low, high, allow_nan=False, allow_infinity=False, width=64)


def arrays(shape, low=-2.0, high=2.0):
    return hnp.arrays(np.float64, shape, elements=floats(low, high))


small_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3)


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast (numpy rules), with 1s and missing leading dims."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3))
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, base_shape=shape,
                                                    max_side=3))
    return shapes.input_shapes


async def run(fetches, feed_dict=None):
    async with af.Session() as sess:
        return await sess.run(fetches, feed_dict)


# -- unary ----------------------------------------------------------------------------------
UNARY = {
    "negative": (af.negative, -2, 2),
    "abs": (af.abs, 0.1, 2),
    "square": (af.square, -2, 2),
    "sqrt": (af.sqrt, 0.2, 3),
    "rsqrt": (af.rsqrt, 0.3, 3),
    "exp": (af.exp, -2, 2),
    "log": (af.log, 0.2, 3),
    "log1p": (af.log1p, -0.5, 3),
    "tanh": (af.tanh, -2, 2),
    "sigmoid": (af.sigmoid, -3, 3),
    "reciprocal": (af.reciprocal, 0.3, 3),
    "sin": (af.sin, -3, 3),
    "cos": (af.cos, -3, 3),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@SETTINGS
@given(shape=small_shapes, negate=st.booleans(), data=st.data())
async def test_unary_gradient(name, shape, negate, data):
    fn, low, high = UNARY[name]
    x = data.draw(arrays(shape, low, high))
    if name == "abs" and negate:
        x = -x  # both sides of the kink
    await check_gradients(fn, [x])


# -- binary with broadcasting -----------------------------------------------------------------
BINARY = {
    "add": (af.add, None),
    "subtract": (af.subtract, None),
    "multiply": (af.multiply, None),
    "divide": (af.divide, "positive_y"),
    "pow": (af.pow, "positive_x"),
    "maximum": (af.maximum, "distinct"),
    "minimum": (af.minimum, "distinct"),
    "squared_difference": (af.squared_difference, None),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(shapes=broadcast_pair(), data=st.data())
async def test_binary_gradient_with_broadcasting(name, shapes, data):
    fn, domain = BINARY[name]
    x = data.draw(arrays(shapes[0], 0.5 if domain == "positive_x" else -2, 2))
    y = data.draw(arrays(shapes[1], 0.5 if domain == "positive_y" else -2, 2))
    if domain == "distinct" and np.abs(np.subtract(x, y)).min(initial=1.0) < 0.01:
        return  # max/min are not differentiable at ties
    await check_gradients(fn, [x, y])


async def test_broadcast_gradient_with_unknown_batch_dim():
    """[None, 3] + [3] and [None, 1] * [None, 3]: static where decidable, dynamic otherwise."""
    with af.Graph().as_default():
        a = af.placeholder(af.float64, [None, 3])
        b = af.placeholder(af.float64, [3])
        c = af.placeholder(af.float64, [None, 1])
        d = af.placeholder(af.float64, [None, None])
        y = af.reduce_sum((a + b) * c * d)
        grads = af.gradients(y, [a, b, c, d])
        assert grads[1].shape.as_list() == [3]
        a_v = np.arange(6.0).reshape(2, 3)
        b_v = np.array([1.0, 2.0, 3.0])
        c_v = np.array([[2.0], [3.0]])
        d_v = np.ones((2, 3))
        ga, gb, gc, gd = await run(grads, {a: a_v, b: b_v, c: c_v, d: d_v})
    assert_close(ga, np.broadcast_to(c_v, (2, 3)))
    assert_close(gb, c_v.sum() * np.ones(3))
    assert_close(gc, (a_v + b_v).sum(axis=1, keepdims=True))
    assert_close(gd, (a_v + b_v) * c_v)


# -- matmul ---------------------------------------------------------------------------------------
@SETTINGS
@given(m=st.integers(1, 3), k=st.integers(1, 3), n=st.integers(1, 3),
       ta=st.booleans(), tb=st.booleans(), data=st.data())
async def test_matmul_gradient(m, k, n, ta, tb, data):
    a = data.draw(arrays((k, m) if ta else (m, k)))
    b = data.draw(arrays((n, k) if tb else (k, n)))
    await check_gradients(lambda x, y: af.matmul(x, y, transpose_a=ta, transpose_b=tb), [a, b])


@SETTINGS
@given(batch=st.sampled_from([((2,), (2,)), ((2,), ()), ((1, 2), (3, 1)), ((), (2,))]),
       ta=st.booleans(), tb=st.booleans(), data=st.data())
async def test_batched_matmul_gradient(batch, ta, tb, data):
    a = data.draw(arrays(batch[0] + ((3, 2) if ta else (2, 3))))
    b = data.draw(arrays(batch[1] + ((2, 3) if tb else (3, 2))))
    if a.ndim == 2 and b.ndim == 2:
        return
    await check_gradients(lambda x, y: af.matmul(x, y, transpose_a=ta, transpose_b=tb), [a, b])


# -- add_n, cast, select, identity, reshape, placeholder_with_default ----------------------
@SETTINGS
@given(shape=small_shapes, n=st.integers(1, 4), data=st.data())
async def test_add_n_gradient(shape, n, data):
    values = [data.draw(arrays(shape)) for _ in range(n)]
    await check_gradients(lambda *xs: af.add_n(list(xs)) * af.add_n(list(xs)), values)


@SETTINGS
@given(x=small_shapes.flatmap(arrays))
async def test_cast_identity_reshape_placeholder_with_default_gradients(x):
    def build(t):
        t32 = af.cast(af.identity(t), af.float32)
        flat = af.reshape(af.cast(t32 * t32, af.float64), [-1])
        return af.placeholder_with_default(flat, [None]) * 3.0
    # float32 in the middle: a large step (exact for a quadratic) beats its rounding.
    await check_gradients(build, [x], delta=1e-2, rtol=1e-3, atol=1e-3)


def test_cast_to_int_has_no_gradient():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2])
        y = af.cast(af.cast(x, af.int32), af.float32)
        assert af.gradients(y, [x]) == [None]


@SETTINGS
@given(shapes=broadcast_pair(), vector_cond=st.booleans(), data=st.data())
async def test_select_gradient(shapes, vector_cond, data):
    if vector_cond:
        shapes = ((2, 3), (2, 3))
        cond = np.array([True, False])
    else:
        out = np.broadcast_shapes(*shapes)
        cond = data.draw(hnp.arrays(np.bool_, out))
    x = data.draw(arrays(shapes[0]))
    y = data.draw(arrays(shapes[1]))
    await check_gradients(lambda a, b: af.where(af.constant(cond), a, b), [x, y])


# -- reductions -------------------------------------------------------------------------------
@st.composite
def reduction_case(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=3))
    axis = draw(st.one_of(
        st.none(),
        st.lists(st.integers(-len(shape), len(shape) - 1), max_size=len(shape),
                 unique_by=lambda a: a % len(shape)) if shape else st.none()))  # 0 is -rank
    keepdims = draw(st.booleans())
    return shape, axis, keepdims


@pytest.mark.parametrize("name", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
                                  "reduce_prod"])
@SETTINGS
@given(case=reduction_case(), data=st.data())
async def test_reduction_gradient(name, case, data):
    fn = getattr(af, name)
    shape, axis, keepdims = case
    if name in ("reduce_max", "reduce_min"):
        # Distinct values: max/min are differentiable away from ties.
        size = int(np.prod(shape))
        perm = data.draw(st.permutations(range(size)))
        x = (np.array(perm, dtype=np.float64).reshape(shape) - size / 2) * 0.3
    else:
        x = data.draw(arrays(shape, 0.3, 2) if name == "reduce_prod" else arrays(shape))
    await check_gradients(lambda t: fn(t, axis=axis, keepdims=keepdims) ** 2, [x])


async def test_reduce_max_splits_gradient_among_ties():
    with af.Graph().as_default():
        x = af.constant([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], af.float64)
        (grad,) = af.gradients(af.reduce_sum(af.reduce_max(x, axis=1) * [1.0, 6.0]), [x])
        value = await run(grad)
    assert_close(value, [[0, 0.5, 0.5], [2, 2, 2]])


async def test_reduce_prod_gradient_with_zeros():
    with af.Graph().as_default():
        x = af.constant([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 4.0]], af.float64)
        (grad,) = af.gradients(af.reduce_prod(x, axis=1), [x])
        value = await run(grad)
    assert_close(value, [[6, 0, 0], [0, 0, 0], [8, 4, 2]])


async def test_reduction_gradient_with_unknown_dims():
    with af.Graph().as_default():
        x = af.placeholder(af.float64, [None, None, 2])
        y = af.reduce_sum(af.reduce_mean(x, axis=[0, 2]) * [1.0, 2.0, 3.0])
        (grad,) = af.gradients(y, [x])
        value = await run(grad, {x: np.ones((4, 3, 2))})
    assert_close(value, np.broadcast_to(np.array([1.0, 2.0, 3.0])[None, :, None] / 8, (4, 3, 2)))


async def test_gradcheck_catches_a_wrong_gradient():
    """x * stop_gradient(x) has symbolic gradient x but true derivative 2x."""
    with pytest.raises(AssertionError, match=r"gradient of input 0 .* 3 of 3 elements differ"):
        await check_gradients(lambda x: x * af.stop_gradient(x), [np.array([1.0, 2.0, 3.0])])


# -- the walk -----------------------------------------------------------------------------------
async def test_several_paths_are_summed():
    with af.Graph().as_default():
        x = af.constant(3.0)
        y = x * x + af.exp(x) + 2.0 * x
        (grad,) = af.gradients(y, [x])
        assert grad.op.type == "AddN"
        value = await run(grad)
    assert_close(value, 6.0 + np.exp(3.0) + 2.0)


async def test_multiple_ys_and_grad_ys():
    with af.Graph().as_default():
        x = af.constant([1.0, 2.0])
        grads = af.gradients([x * 2.0, x * x], [x], grad_ys=[af.constant([1.0, 0.0]), None])
        value = await run(grads[0])
    assert_close(value, [2.0 + 2.0, 4.0])


def test_unconnected_x_gets_none():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2])
        z = af.placeholder(af.float32, [2])
        y = af.reduce_sum(x * 2.0)
        grads = af.gradients(y, [x, z])
        assert grads[0] is not None and grads[1] is None


def test_stop_gradient_and_stop_gradients_argument():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2])
        assert af.gradients(af.reduce_sum(af.stop_gradient(x) * 2.0), [x]) == [None]
        h = x * 3.0
        y = h * x
        (grad,) = af.gradients(y, [x], stop_gradients=[h])
        assert grad is not None
        # h is held constant: dy/dx = h only, so the h op's gradient is never built.
        assert not any(op.name.startswith("gradients_1/mul_grad/")
                       for op in af.get_default_graph().get_operations())


async def test_stop_gradients_value():
    with af.Graph().as_default():
        x = af.constant(2.0)
        h = x * 3.0
        (grad,) = af.gradients(h * x, [x], stop_gradients=[h])
        assert await run(grad) == pytest.approx(6.0)


def test_integer_tensors_are_not_differentiated():
    with af.Graph().as_default():
        i = af.placeholder(af.int32, [2])
        x = af.placeholder(af.float32, [2])
        y = af.reduce_sum(x * af.cast(i * 2, af.float32))
        grads = af.gradients(y, [i, x])
        assert grads[0] is None and grads[1] is not None


def test_missing_gradient_names_op_type_and_input():
    af.graph.register_op("GradTestNoGradient", infer=lambda op: [(op.inputs[1].dtype,
                                                                   op.inputs[1].shape)])
    with af.Graph().as_default():
        i = af.constant(1)
        x = af.placeholder(af.float32, [2])
        op = af.get_default_graph().create_op("GradTestNoGradient", (i, x), name="foo")
        with pytest.raises(LookupError, match=r"No gradient defined for operation 'foo' "
                                              r"\(op type: GradTestNoGradient\) input 1"):
            af.gradients(op.outputs[0], [x])


async def test_x_on_another_x_path_does_not_stop_the_walk():
    with af.Graph().as_default():
        x = af.constant(2.0)
        h = x * x
        y = h * 3.0
        gx, gh = af.gradients(y, [x, h])
        assert await run([gx, gh]) == [pytest.approx(12.0), pytest.approx(3.0)]


async def test_unused_sibling_outputs_get_zeros():
    def infer(op):
        x = op.inputs[0]
        return [(x.dtype, x.shape), (x.dtype, x.shape)]

    af.graph.register_op("GradTestTwoOutputs", infer=infer)

    @af.graph.register_gradient("GradTestTwoOutputs")
    def _grad(op, grad_a, grad_b):
        assert grad_a is not None and grad_b is not None
        assert grad_b.op.type == "ZerosLike"
        return [grad_a + grad_b]

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2])
        op = af.get_default_graph().create_op("GradTestTwoOutputs", (x,))
        (grad,) = af.gradients(af.reduce_sum(op.outputs[0]), [x])
        assert grad is not None


async def test_gradient_wrt_variable_and_its_reference():
    with af.Graph().as_default():
        v = af.Variable([1.0, 2.0])
        y = af.reduce_sum(v * v)
        g_var, g_ref, g_snapshot = af.gradients(y, [v, v._ref(), v.value()])
        async with af.Session() as sess:
            await sess.run(v.initializer)
            values = await sess.run([g_var, g_ref, g_snapshot])
    for value in values:
        assert_close(value, [2.0, 4.0])


def test_gradient_ops_are_named_under_the_scope():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2, 2], name="x")
        y = af.tanh(af.matmul(x, x, name="mm"), name="act")
        af.gradients(y, [x])
        names = {op.name for op in af.get_default_graph().get_operations()}
        assert any(n.startswith("gradients/act_grad/") for n in names)
        assert any(n.startswith("gradients/mm_grad/") for n in names)


# -- higher order -------------------------------------------------------------------------------
@SETTINGS
@given(x=arrays((2, 3)))
async def test_second_order_tanh(x):
    await check_gradients(lambda t: af.gradients(af.reduce_sum(af.tanh(t)), [t])[0], [x])


@SETTINGS
@given(x=arrays((2, 3)), y=arrays((3,)))
async def test_second_order_mul(x, y):
    def build(a, b):
        return af.add_n(af.gradients(af.reduce_sum(a * a * b), [a, b])[:1]) * 1.0
    await check_gradients(build, [x, y])
    await check_gradients(lambda a, b: af.gradients(af.reduce_sum(a * a * b), [b])[0], [x, y])


@SETTINGS
@given(a=arrays((2, 3)), b=arrays((3, 2)))
async def test_second_order_matmul(a, b):
    def build(x, y):
        gx, gy = af.gradients(af.reduce_sum(af.tanh(af.matmul(x, y))), [x, y])
        return af.reduce_sum(gx * gx) + af.reduce_sum(gy)
    await check_gradients(build, [a, b])


# -- scale ---------------------------------------------------------------------------------------
def _mlp_gradient_work(layers):
    """(Python calls made by ``af.gradients``, ops it added) for an MLP of ``layers`` layers."""
    with af.Graph().as_default() as graph:
        x = af.placeholder(af.float32, [None, 16])
        h = x
        weights = []
        for layer in range(layers):
            w = af.Variable(np.full((16, 16), 0.01, np.float32), name=f"w{layer}")
            b = af.Variable(np.zeros(16, np.float32), name=f"b{layer}")
            weights += [w, b]
            h = af.tanh(af.matmul(h, w) + b)
        loss = af.reduce_mean(af.square(h))
        ops_before = len(graph.get_operations())
        calls = 0

        def count(frame, event, arg):
            nonlocal calls
            calls += event == "call"

        previous = sys.getprofile()
        sys.setprofile(count)
        try:
            grads = af.gradients(loss, weights)
        finally:
            sys.setprofile(previous)
        assert all(g is not None for g in grads)
        return calls, len(graph.get_operations()) - ops_before


def test_hundred_layer_mlp_gradient_graph_takes_linear_work():
    # Work counted, not timed: building the gradient graph must grow linearly with depth (a
    # traversal per op would make 100 layers cost 4x 50 layers, not 2x), whatever the load.
    (calls_50, ops_50), (calls_100, ops_100) = _mlp_gradient_work(50), _mlp_gradient_work(100)
    print(f"gradient graph of 50 / 100 layers: {calls_50} / {calls_100} Python calls, "
          f"{ops_50} / {ops_100} ops")
    assert ops_100 <= 2 * ops_50 + 10
    assert calls_100 <= 2.2 * calls_50
