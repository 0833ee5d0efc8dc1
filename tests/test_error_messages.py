"""Errors a new user meets first: each names what went wrong and how to fix it (issue 19)."""

import numpy as np
import pytest
import trio

import asyncflow as af
from loopback_ports import free_ports


@pytest.fixture
def graph():
    with af.Graph().as_default() as g:
        yield g


async def test_fetch_by_a_wrong_name_is_the_value_error_tf1_raises(graph):
    af.constant(1.0, name="x")
    async with af.Session() as sess:
        with pytest.raises(ValueError) as info:
            await sess.run("nope:0")
        # TF1's Session raises ValueError for a name that matches nothing (KeyError is only
        # the lookup's), and the message prints the names without escaped quotes.
        assert str(info.value) == (
            "Fetch argument 'nope:0' cannot be interpreted as a Tensor or Operation: The name "
            "'nope:0' refers to a Tensor which does not exist. The operation, 'nope', does not "
            "exist in the graph.")
        with pytest.raises(ValueError, match=r"^Fetch argument 'x:3' .*'x' has 1 outputs"):
            await sess.run("x:3")
        with pytest.raises(ValueError, match="^Fetch argument 'nope' cannot be interpreted .*"
                                             "The name 'nope' refers to an Operation not in"):
            await sess.run(["x:0", "nope"])
        with pytest.raises(TypeError, match="^Fetch argument 3 cannot be interpreted"):
            await sess.run(3)
        with pytest.raises(TypeError) as info:
            await sess.run("x:0", feed_dict={"nope:0": 1.0})
        assert str(info.value) == (
            "Cannot interpret feed_dict key 'nope:0' as a Tensor: The name 'nope:0' refers to a "
            "Tensor which does not exist. The operation, 'nope', does not exist in the graph.")


async def test_uninitialized_variable_says_how_to_initialize_it(graph):
    w = af.Variable(np.zeros(3, np.float32), name="w")
    async with af.Session() as sess:
        with pytest.raises(af.errors.FailedPreconditionError) as info:
            await sess.run(w)
        message = info.value.message
        assert message.startswith("Attempting to use uninitialized value w: ")
        assert "af.global_variables_initializer()" in message and "restore" in message
        # ... and following the advice works.
        await sess.run(af.global_variables_initializer())
        np.testing.assert_array_equal(await sess.run(w), [0, 0, 0])


def _closed_port():
    return free_ports(1)[0]  # reserved: no other test process starts a server there


async def test_unreachable_session_target_names_its_address_once():
    address = f"127.0.0.1:{_closed_port()}"
    with af.Graph().as_default():
        af.constant(1.0)
        with pytest.raises(af.errors.UnavailableError) as info:
            async with af.Session(address, config=af.SessionConfig(connect_timeout_s=5.0)):
                pass
    assert info.value.message.startswith(f"worker at {address} is unavailable: ")
    assert "  " not in info.value.message


async def test_changed_variable_shape_on_a_reused_worker_hints_at_reset():
    (port,) = free_ports(1)  # reserved until the server binds it
    cluster = af.ClusterSpec({"worker": [f"127.0.0.1:{port}"]})

    async def initialize(shape):
        with af.Graph().as_default():
            with af.device("/job:worker/task:0"):
                w = af.Variable(np.ones(shape, np.float32), name="w")
            async with af.Session(cluster=cluster) as sess:
                await sess.run(af.global_variables_initializer())
                return await sess.run(w)

    async with trio.open_nursery() as nursery:
        await nursery.start(af.Server(cluster, "worker", 0).serve)
        np.testing.assert_array_equal(await initialize([3]), np.ones(3))
        with pytest.raises(af.errors.InvalidArgumentError) as info:
            await initialize([4])  # the worker still holds the 3-element w
        message = info.value.message
        assert "Assign requires shapes of both tensors to match" in message
        assert "lhs shape= [3] rhs shape= [4]" in message
        assert "await af.Session.reset(cluster)" in message
        # ... and following the advice works.
        await af.Session.reset(cluster)
        np.testing.assert_array_equal(await initialize([4]), np.ones(4))
        nursery.cancel_scope.cancel()
