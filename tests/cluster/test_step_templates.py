"""Steps whose RunGraph headers are decoded from a template (``transports/header_templates.py``)
behave as before across what may change between steps: the fed values and their shapes, the
fetched signature, a failed step, a second session's registration of the same graph."""
import numpy as np
import pytest
import trio

import asyncflow as af
from transports import header_templates, repeat_frames

W0 = "/job:worker/task:0"


def _graph():
    graph = af.Graph()
    with graph.as_default(), af.device(W0):
        p = af.placeholder(af.float32, [None], name="p")
        doubled = p * 2.0
        pair = af.reshape(p, [2])  # fails on the worker unless two values are fed
        plus = p + 1.0
    return graph, p, doubled, pair, plus


async def test_steps_across_feeds_signatures_failures_and_registrations(cluster):
    spec, _ = cluster
    graph, p, doubled, pair, plus = _graph()
    with trio.fail_after(60):
        async with af.Session(graph=graph, cluster=spec) as sess:
            for i in range(6):
                values = np.arange(i % 3 + 1, dtype=np.float32) + i  # shapes [1], [2], [3]
                np.testing.assert_array_equal(await sess.run(doubled, {p: values}), 2 * values)
            assert header_templates._templates  # the steps above were decoded from one
            assert any(repeat_frames._templates_by_key.values())  # and encoded from one
            got = await sess.run([doubled, plus], {p: np.array([1.0, 2.0], np.float32)})
            np.testing.assert_array_equal(got[0], [2.0, 4.0])
            np.testing.assert_array_equal(got[1], [2.0, 3.0])
            with pytest.raises(af.errors.InvalidArgumentError):
                await sess.run(pair, {p: np.array([1.0, 2.0, 3.0], np.float32)})
            np.testing.assert_array_equal(
                await sess.run(pair, {p: np.array([4.0, 5.0], np.float32)}), [4.0, 5.0])
            np.testing.assert_array_equal(
                await sess.run(doubled, {p: np.array([7.0], np.float32)}), [14.0])
            async with af.Session(graph=graph, cluster=spec) as other:  # its own handle
                for value in (3.0, 4.0):
                    np.testing.assert_array_equal(
                        await other.run(doubled, {p: np.array([value], np.float32)}),
                        [2 * value])
                    np.testing.assert_array_equal(
                        await sess.run(plus, {p: np.array([value], np.float32)}),
                        [value + 1])
