"""The end of a worker's RunGraph: fetched numpy scalars become 0-d arrays of their dtype on the
wire (strings object arrays, as before), and a finished step's state is dropped once its
rendezvous is settled (``settled()`` says what ``statistics()`` says).
"""
import numpy as np
import pytest
import trio

import asyncflow as af
from asyncflow.cluster.remote_rendezvous import StepRendezvous, host_array
from asyncflow.exec.rendezvous import LocalRendezvous


@pytest.mark.parametrize("value", [np.float32(1.5), np.float64(-2.0), np.int8(-3),
                                   np.uint64(2**63), np.bool_(True), np.complex64(1 + 2j),
                                   np.float16(0.25), np.longdouble(3.0)])
def test_a_numpy_scalar_fetch_is_a_0d_array_of_its_dtype(value):
    array = host_array(value)
    assert type(array) is np.ndarray and array.shape == () and array.dtype == value.dtype
    assert array.item() == value.item()


@pytest.mark.parametrize("value", [np.str_("text"), np.bytes_(b"raw"), np.array(["a", "bc"]),
                                   np.array([b"x"]), "plain", b"bytes"])
def test_strings_still_go_out_as_object_arrays(value):
    array = host_array(value)
    assert array.dtype == object
    assert np.asarray(value).shape == array.shape


def test_arrays_pass_through_and_python_numbers_convert():
    array = np.arange(4, dtype=np.int32)
    assert host_array(array) is array
    assert host_array(2.5).dtype == np.float64 and host_array(2.5).shape == ()
    assert host_array([1, 2]).tolist() == [1, 2]


def test_settled_is_what_statistics_say():
    rdv = LocalRendezvous()
    assert rdv.settled()
    rdv.send("a", 1.0)
    stats = rdv.statistics()
    assert not rdv.settled() and stats.pending_sends == 1
    got = []
    rdv.subscribe("a", lambda item, error: got.append(item))
    assert rdv.settled() and got
    rdv.subscribe("b", lambda item, error: got.append(item))
    assert not rdv.settled() and rdv.statistics().waiting_recvs == 1
    step = StepRendezvous(7, ["/job:w/replica:0/task:0/device:CPU:0"])
    assert step.settled()


async def test_scalar_fetches_and_finished_steps_on_a_worker(autojump_clock):
    spec = af.ClusterSpec({"worker": ["inprocess:201"]})
    graph = af.Graph()
    with graph.as_default():
        with af.device("/job:worker/task:0"):
            p = af.placeholder(af.float32, [], name="p")
            doubled = af.multiply(p, 2.0, name="doubled")
            count = af.cast(doubled, af.int64, name="count")
    async with trio.open_nursery() as nursery:
        server = await nursery.start(af.Server(spec, "worker", 0).serve)
        async with af.Session(graph=graph, cluster=spec) as sess:
            for step in range(3):
                got_double, got_count = await sess.run([doubled, count], {p: 1.5 + step})
                assert np.asarray(got_double).dtype == np.float32
                assert np.asarray(got_double) == np.float32(3.0 + 2 * step)
                assert np.asarray(got_count).dtype == np.int64
                assert server.service.statistics().steps_held == 0  # dropped once done
        assert server.service.statistics().steps_run >= 3
        nursery.cancel_scope.cancel()
