"""TF1's explicit padding (``[[0, 0], [top, bottom], [left, right], [0, 0]]``) for
``conv2d_transpose``/``conv2d_backprop_input`` and ``conv2d_backprop_filter``: the gradients
of ``conv2d`` with that padding (a zero pad and a VALID convolution), checked here as the
adjoints of the direct convolution by hand (``<conv(x, f), g> = <x, backprop_input(g)> =
<f, backprop_filter(x, g)>``) and in NCHW against NHWC. asyncflow refused the padding ("must
be 'SAME' or 'VALID'"). TF1's values: tests/ops/test_tf1_conv_fuzz.py
(``_explicit_backprops``). ``max_pool`` takes it too, as TF1's: the value padded with its
dtype's lowest finite number (TF1's kernel's), each pad smaller than the window (TF1: an
InvalidArgumentError when it runs; here a ValueError while building); ``avg_pool`` refuses
it in both."""
import numpy as np
import pytest

import asyncflow.compat.v1 as tf
from default_graph import fresh_graph, session_run  # noqa: F401 (fresh_graph: autouse fixture)
from test_conv_explicit_and_1d import _direct_conv

RNG = np.random.default_rng(11)
PADS = [[1, 2], [3, 0]]
PADDING = [[0, 0]] + PADS + [[0, 0]]
X = RNG.standard_normal((2, 5, 6, 3))
F = RNG.standard_normal((2, 3, 3, 4))
STRIDES = (1, 2)
Y = _direct_conv(X, F, PADS, STRIDES)  # [2, 7, 4, 4]
G = RNG.standard_normal(Y.shape)


def test_backprop_input_and_transpose_are_the_adjoint_of_the_padded_convolution():
    strides = [1, *STRIDES, 1]
    back = tf.nn.conv2d_backprop_input(list(X.shape), F, G, strides, PADDING)
    transposed = tf.nn.conv2d_transpose(G, F, list(X.shape), strides, padding=PADDING)
    fed = tf.placeholder(tf.int32, [4])  # sizes known only when the op runs
    dynamic = tf.nn.conv2d_backprop_input(fed, F, G, strides, PADDING)
    assert back.shape.as_list() == list(X.shape) and transposed.name == "conv2d_transpose:0"
    values = session_run([back, transposed, dynamic], {fed: list(X.shape)})
    for value in values:
        assert value.shape == X.shape
        np.testing.assert_allclose(np.vdot(X, value), np.vdot(Y, G), rtol=1e-10)
    np.testing.assert_array_equal(values[0], values[1])
    np.testing.assert_array_equal(values[0], values[2])
    # and it is conv2d's own input gradient with that padding
    x = tf.constant(X)
    grad = tf.gradients(tf.nn.conv2d(x, F, strides, PADDING), x, grad_ys=tf.constant(G))[0]
    np.testing.assert_allclose(session_run(grad), values[0], rtol=1e-12)


def test_backprop_filter_is_the_adjoint_of_the_padded_convolution():
    back = tf.nn.conv2d_backprop_filter(X, list(F.shape), G, [1, *STRIDES, 1], PADDING)
    value = session_run(back)
    assert value.shape == F.shape
    np.testing.assert_allclose(np.vdot(F, value), np.vdot(Y, G), rtol=1e-10)


def test_nchw_is_nhwc_transposed():
    nchw = [[0, 0], [0, 0]] + PADS
    to_nchw, to_nhwc = (0, 3, 1, 2), (0, 2, 3, 1)
    sizes = [X.shape[i] for i in to_nchw]
    back = tf.nn.conv2d_backprop_input(sizes, F, G.transpose(to_nchw), [1, 1, *STRIDES], nchw,
                                       data_format="NCHW")
    flt = tf.nn.conv2d_backprop_filter(X.transpose(to_nchw), list(F.shape),
                                       G.transpose(to_nchw), [1, 1, *STRIDES], nchw,
                                       data_format="NCHW")
    want = session_run([tf.nn.conv2d_backprop_input(list(X.shape), F, G, [1, *STRIDES, 1],
                                                    PADDING),
                        tf.nn.conv2d_backprop_filter(X, list(F.shape), G, [1, *STRIDES, 1],
                                                     PADDING)])
    got = session_run([back, flt])
    np.testing.assert_allclose(got[0].transpose(to_nhwc), want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_bad_explicit_padding_is_refused_naming_the_builder():
    with pytest.raises(ValueError, match="conv2d_transpose: nonzero explicit padding in "
                                         "the batch or depth"):
        tf.nn.conv2d_transpose(G, F, list(X.shape), [1, 1, 1, 1],
                               padding=[[0, 1]] + PADS + [[0, 0]])
    with pytest.raises(ValueError, match="conv2d_backprop_input: nonzero explicit padding in "
                                         "the batch or depth"):
        tf.nn.conv2d_backprop_input(list(X.shape), F, G, [1, 1, 1, 1],
                                    padding=[[0, 1]] + PADS + [[0, 0]])
    with pytest.raises(ValueError, match="conv2d_backprop_filter: all explicit paddings must "
                                         "be non-negative"):
        tf.nn.conv2d_backprop_filter(X, list(F.shape), G, [1, 1, 1, 1],
                                     [[0, 0], [-1, 0], [0, 0], [0, 0]])


def test_max_pool_pads_with_the_lowest_finite_number_as_tf1():
    # TF1's values: a window of only padding and -inf is float32's lowest number; the
    # gradient goes to each window's largest real cell (upstream 1..9 row by row).
    x = tf.constant(np.array([[-np.inf, 2, 3], [4, -np.inf, 6]], np.float32).reshape(1, 2, 3, 1))
    y = tf.nn.max_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], padding=[[0, 0], [1, 1], [1, 0], [0, 0]])
    grad = tf.gradients(y, x, grad_ys=tf.constant(np.arange(1.0, 10.0, dtype=np.float32)
                                                  .reshape(1, 3, 3, 1)))[0]
    ints = tf.nn.max_pool(tf.constant(np.arange(-3, 3, dtype=np.int32).reshape(1, 2, 3, 1)),
                          [1, 2, 2, 1], [1, 1, 1, 1], [[0, 0], [1, 1], [1, 0], [0, 0]])
    value, grad_value, int_value = session_run([y, grad, ints])
    lowest = np.finfo(np.float32).min
    np.testing.assert_array_equal(value[0, :, :, 0], [[lowest, 2, 3], [4, 4, 6], [4, 4, 6]])
    # (TF1 gives x[0, 0] the 1 of the first window, all padding and -inf: here it is lost)
    np.testing.assert_array_equal(grad_value[0, :, :, 0], [[0, 2, 3], [24, 0, 15]])
    np.testing.assert_array_equal(int_value[0, :, :, 0], [[-3, -2, -1], [0, 1, 2], [0, 1, 2]])
    with pytest.raises(ValueError, match="max_pool: explicit padding .* must be smaller than "
                                         "the window size 2"):
        tf.nn.max_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], [[0, 0], [2, 0], [0, 0], [0, 0]])
    with pytest.raises(ValueError, match="avg_pool: padding must be 'SAME' or 'VALID'"):
        tf.nn.avg_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], [[0, 0], [1, 0], [0, 0], [0, 0]])


@pytest.mark.parametrize("dtype", [np.bool_, np.str_])
def test_max_pool_of_a_dtype_it_refuses_names_max_pool_with_explicit_padding_too(dtype):
    # TF1: TypeError, "DataType bool not in list of allowed values"; with SAME or VALID this
    # is "MaxPool: value passed to value has dtype bool"; with explicit padding the lowest
    # value to pad with was asked of numpy first: "ValueError: Invalid integer data type 'b'."
    x = tf.constant(np.zeros((1, 3, 3, 1), dtype))
    with pytest.raises(TypeError, match="MaxPool: value passed to value has dtype"):
        tf.nn.max_pool(x, [1, 2, 2, 1], [1, 1, 1, 1], [[0, 0], [1, 0], [0, 1], [0, 0]])



def test_conv2d_transpose_names_itself_in_its_errors():
    # Its bad padding or strides were reported as conv2d_backprop_input's, a function the
    # caller never named.
    for padding, strides, what in [("SOME", [1, 1, 1, 1], "padding must be"),
                                   ([[0, 0]] + PADS, [1, 1, 1, 1], "must be of size 4"),
                                   ("SAME", [1, 1, 1], "strides must be")]:
        with pytest.raises(ValueError, match=f"^conv2d_transpose: .*{what}"):
            tf.nn.conv2d_transpose(G, F, list(X.shape), strides, padding)


def test_backprop_input_with_explicit_padding_is_named_and_shaped_as_tf1s():
    # TF1 (2.21's tf.compat.v1): one Conv2DBackpropInput named "Conv2DBackpropInput", shaped
    # (?, 7, 6, 3) from tf.shape(x) of x (?, 7, 6, 3). Here the padded backprop took that
    # name, so the result was "Conv2DBackpropInput_1:0" (and "Conv2DBackpropInput:0" the
    # padded tensor), and its shape was unknown.
    x = tf.placeholder(tf.float32, [None, 7, 6, 3])
    out_backprop = tf.placeholder(tf.float32, [None, 4, 4, 4])
    pads = [[0, 0], [2, 1], [0, 2], [0, 0]]
    y = tf.nn.conv2d_backprop_input(tf.shape(x), tf.ones([3, 2, 3, 4]), out_backprop,
                                    [1, 2, 2, 1], pads)
    second = tf.nn.conv2d_backprop_input(tf.shape(x), tf.ones([3, 2, 3, 4]), out_backprop,
                                         [1, 2, 2, 1], pads)
    transposed = tf.nn.conv2d_transpose(out_backprop, tf.ones([3, 2, 3, 4]), tf.shape(x),
                                        [1, 2, 2, 1], pads)
    assert [t.name for t in (y, second, transposed)] == [
        "Conv2DBackpropInput:0", "Conv2DBackpropInput_1:0", "conv2d_transpose:0"]
    assert [t.shape.as_list() for t in (y, transposed)] == [[None, 7, 6, 3]] * 2
