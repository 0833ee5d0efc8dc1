"""The end of a worker's RunGraph: fetched numpy scalars become 0-d arrays of their dtype on the
wire (strings object arrays, as before), and a finished step's state is dropped once its
rendezvous is settled (``settled()`` says what ``statistics()`` says).
"""
import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow import errors
from asyncflow.cluster.remote_rendezvous import StepRendezvous, host_array
from asyncflow.exec.rendezvous import LocalRendezvous
from asyncflow.rendezvous_keys import make_key
from transports import wire
from transports.messages import RunGraphReply, TensorEntry


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


def _host_array_before(value):
    """``host_array`` before numpy scalars took the shortcut to their 0-d array."""
    to_numpy = getattr(value, "get", None)
    if to_numpy is not None and not isinstance(value, np.ndarray):
        value = to_numpy()
    array = np.asarray(value)
    if array.dtype == object or array.dtype.kind in "SU":
        array = np.asarray(value, dtype=object)
    return array


def _on_the_wire(array):
    """A fetch's RunGraph reply as bytes, or what refused to encode it."""
    try:
        reply = RunGraphReply([TensorEntry("fetch:0", array)], None)
        return b"".join(bytes(buffer) for buffer in wire.encode(reply))
    except Exception as exc:  # noqa: BLE001 -- compared: the same refusal either way
        return type(exc), str(exc)


def _scalars():
    values = [np.dtype(code).type(1) for code in "?bhilqBHILQefdgFDG"]
    values += [np.float32(np.nan), np.float16(-0.0), np.int64(-2**63), np.uint64(2**64 - 1),
               np.datetime64("2026-12-05"), np.timedelta64(3, "s"), np.str_("text"),
               np.bytes_(b"raw"), np.void(b"\x01\x02"), 7, -2**63, 2**70, 2.5, True, 1 + 2j,
               None, "plain", b"bytes", np.array(3.0)[()]]
    try:
        import ml_dtypes
    except ImportError:
        pass
    else:
        values.append(np.array(1.5, dtype=ml_dtypes.bfloat16)[()])
    return values


@pytest.mark.parametrize("value", _scalars(), ids=lambda v: f"{type(v).__name__}-{v!r}"[:40])
def test_a_scalar_fetch_goes_on_the_wire_as_before(value):
    before = _host_array_before(value)
    array = host_array(value)
    assert type(array) is type(before) and array.dtype == before.dtype
    assert array.shape == before.shape
    assert _on_the_wire(array) == _on_the_wire(before)


def _says_settled(rdv):
    stats = rdv.statistics()
    settled = rdv.settled()
    assert settled == (stats.pending_sends == 0 and stats.waiting_recvs == 0)
    return settled


async def test_settled_agrees_with_statistics_in_every_state_of_a_step():
    device = "/job:w/replica:0/task:0/device:CPU:0"
    key, pushed, waited = (make_key(device, 1, device, name) for name in ("t", "p", "r"))
    step = StepRendezvous(7, [device])
    assert _says_settled(step)
    step.send(key, np.float32(1))  # a value waiting for its Recv
    assert not _says_settled(step)
    assert (await step.recv(key))[0] == 1
    assert _says_settled(step)
    step.accept_push([TensorEntry(pushed, np.float32(2))], {pushed})  # a parked push
    assert not _says_settled(step)
    got = []
    async with trio.open_nursery() as nursery:
        async def receive():
            with pytest.raises(errors.AbortedError, match="peer failed"):
                got.append(await step.recv(waited))

        nursery.start_soon(receive)
        await trio.testing.wait_all_tasks_blocked()
        assert not _says_settled(step)  # a Recv waiting (and the push's value)
        step.abort(errors.AbortedError(None, None, "peer failed"))
        assert _says_settled(step)  # aborted: the waiting Recv failed, nothing kept
    assert got == []
