"""A convolution's forward keeps its input's spectra for its fused backprop
(compile/conv_spectra.py, issue 37): a training step gives the same bits with the pass and
without it, by FFT (the backprop then transforms no input) and by the direct kernels (the
spectra are empty and ignored); nothing pairs across different inputs."""
import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile import conv_spectra
from asyncflow.kernels import nn_conv_fft


def convnet(x):
    rng = np.random.default_rng(3)
    first = af.Variable((rng.standard_normal((3, 3, 2, 6)) * 0.3).astype(np.float32))
    second = af.Variable((rng.standard_normal((5, 5, 6, 4)) * 0.2).astype(np.float32))
    bias = af.Variable(np.full(4, 0.01, np.float32))
    hidden = af.nn.relu(af.nn.conv2d(x, first, [1, 1, 1, 1], "SAME"))
    top = af.nn.relu(af.nn.bias_add(af.nn.conv2d(hidden, second, [1, 1, 1, 1], "SAME"), bias))
    loss = af.reduce_mean(af.square(top - 0.5))
    train = af.train.AdamOptimizer(0.01).minimize(loss)
    return loss, train, [first, second, bias]


async def steps(images):
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 9, 8, 2])
        loss, train, params = convnet(x)
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            losses = [(await session.run([loss, train], {x: images}))[0] for _ in range(3)]
            metadata = af.RunMetadata()
            await session.run(train, {x: images}, options=af.RunOptions(
                trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
            return losses, await session.run(params), {s.op_type for s in metadata.step_stats}


@pytest.mark.parametrize("algorithm", ["fft", "direct"])
async def test_a_training_step_gives_the_same_bits_with_the_spectra_shared(
        algorithm, monkeypatch, cpu_only):
    images = np.random.default_rng(4).standard_normal((6, 9, 8, 2)).astype(np.float32)
    given = []
    backprop_both = nn_conv_fft.backprop_both

    def spy(ctx, plan, x, filters, grad, dx, spectra=None):
        given.append(spectra is not None and spectra.size > 0)
        return backprop_both(ctx, plan, x, filters, grad, dx, spectra)
    with monkeypatch.context() as patch:
        patch.setattr(nn_conv_fft, "FORCE", algorithm)
        patch.setattr(nn_conv_fft, "backprop_both", spy)
        shared = await steps(images)
        used, given[:] = list(given), []
        patch.setattr(conv_spectra, "share_conv_spectra", lambda graph: graph)
        plain = await steps(images)
    assert {"_FusedConv2DWithSpectra", "_FusedConv2DBackpropWithSpectra"} <= shared[2]
    assert not {"_FusedConv2DWithSpectra", "_FusedConv2DBackpropWithSpectra"} & plain[2]
    if algorithm == "fft":
        assert used and all(used) and not any(given)  # the backprop got the forward's spectra
    else:
        assert not used  # (the direct kernels: no FFT backprop ran)
    np.testing.assert_array_equal(shared[0], plain[0])
    for a, b in zip(shared[1], plain[1]):
        np.testing.assert_array_equal(a, b)


async def test_a_forward_only_step_keeps_no_spectra(monkeypatch, cpu_only):
    """Fetching the loss (inference, evaluation) prunes the backprop: the forward stays a
    plain ``_FusedConv2D`` and makes no spectra; the training step in the same session
    then pairs, and a step fetching the second conv's output with the update gets the
    forward's values."""
    monkeypatch.setattr(nn_conv_fft, "FORCE", "fft")
    images = np.random.default_rng(5).standard_normal((4, 9, 8, 2)).astype(np.float32)

    async def traced(session, fetches, feeds):
        metadata = af.RunMetadata()
        value = await session.run(fetches, feeds, options=af.RunOptions(
            trace_level=af.RunOptions.FULL_TRACE), run_metadata=metadata)
        return value, {s.op_type for s in metadata.step_stats}
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [None, 9, 8, 2])
        loss, train, _ = convnet(x)
        top = af.get_default_graph().get_tensor_by_name("Relu_1:0")
        async with af.Session() as session:
            await session.run(af.global_variables_initializer())
            before, types = await traced(session, [loss, top], {x: images})
            assert "_FusedConv2D" in types
            assert not {"_FusedConv2DWithSpectra", "_FusedConv2DBackpropWithSpectra"} & types
            (during, _), types = await traced(session, [[loss, top], train], {x: images})
            assert {"_FusedConv2DWithSpectra", "_FusedConv2DBackpropWithSpectra"} <= types
    np.testing.assert_array_equal(during[0], before[0])
    np.testing.assert_array_equal(during[1], before[1])
