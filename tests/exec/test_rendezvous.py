"""LocalRendezvous: send never blocks, recv waits on trio, abort wakes every waiter."""
import pytest
import trio
import trio.testing

from asyncflow import errors
from asyncflow.exec.rendezvous import LocalRendezvous, RendezvousStatistics
from asyncflow.rendezvous_keys import make_key

KEY = make_key("/job:localhost/replica:0/task:0/device:CPU:0", 0xABC,
               "/job:localhost/replica:0/task:0/device:CPU:1", "edge_0_x_0")


def test_key_format_is_deterministic_and_hex():
    assert KEY == ("/job:localhost/replica:0/task:0/device:CPU:0;0000000000000abc;"
                   "/job:localhost/replica:0/task:0/device:CPU:1;edge_0_x_0;0:0")
    assert make_key("a", 1, "b", "t", "3:7").endswith(";t;3:7")


async def test_send_then_recv():
    rdv = LocalRendezvous()
    rdv.send(KEY, 42)
    assert rdv.statistics() == RendezvousStatistics(1, 0, 1, 0, False)
    assert await rdv.recv(KEY) == (42, False)
    assert rdv.statistics() == RendezvousStatistics(0, 0, 1, 1, False)


async def test_poll_finds_nothing_until_sent_and_takes_the_value_once():
    rdv = LocalRendezvous()
    assert rdv.poll(KEY) is None
    rdv.send(KEY, "v", is_dead=True)
    assert rdv.poll(KEY) == ("v", True)
    assert rdv.poll(KEY) is None
    assert rdv.statistics() == RendezvousStatistics(0, 0, 1, 1, False)


async def test_recv_waits_without_blocking_the_loop(autojump_clock):
    rdv = LocalRendezvous()
    got = []

    async def receiver():
        got.append(await rdv.recv(KEY))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver)
        await trio.testing.wait_all_tasks_blocked()
        assert rdv.statistics().waiting_recvs == 1
        await trio.sleep(5)  # the loop keeps running while the receiver waits
        assert got == []
        rdv.send(KEY, 7)
    assert got == [(7, False)]
    assert rdv.statistics() == RendezvousStatistics(0, 0, 1, 1, False)


def test_duplicate_send_is_aborted():
    rdv = LocalRendezvous()
    rdv.send(KEY, 1)
    with pytest.raises(errors.AbortedError, match="Duplicated send"):
        rdv.send(KEY, 2)


async def test_abort_wakes_present_and_future_waiters(autojump_clock):
    rdv = LocalRendezvous()
    root = errors.InvalidArgumentError(None, None, "root cause")
    seen = []

    async def receiver(key):
        try:
            await rdv.recv(key)
        except errors.OpError as exc:
            seen.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(receiver, KEY)
        nursery.start_soon(receiver, KEY + "other")
        await trio.testing.wait_all_tasks_blocked()
        rdv.abort(root)
        rdv.abort(errors.CancelledError(None, None, "later"))  # the first abort wins
    assert seen == [root, root]
    with pytest.raises(errors.InvalidArgumentError, match="root cause"):
        await rdv.recv("future")
    rdv.send(KEY, 1)  # sends after an abort are dropped
    assert rdv.statistics().aborted and rdv.statistics().pending_sends == 0


async def test_cancelled_recv_leaves_no_waiter(autojump_clock):
    rdv = LocalRendezvous()
    with trio.move_on_after(1):
        await rdv.recv(KEY)
    assert rdv.statistics().waiting_recvs == 0
    rdv.send(KEY, 3)
    assert await rdv.recv(KEY) == (3, False)
