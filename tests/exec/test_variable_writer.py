"""A variable updated in place on one thread is read as a snapshot on any other.

``VariableResource.reusable`` hands a dense update the stored array itself when nothing else
holds it; a step on a worker thread (``exec/thread_step.py``) or a ``compat.v1`` caller's
thread then writes it while the event loop's thread may serve a fetch of the same variable.
That fetch must never return an array whose values change after it returned.
"""
import threading

import numpy as np

from asyncflow import dtypes
from asyncflow.exec.resources import VariableResource


def _variable(values):
    var = VariableResource("v", dtypes.float32, (len(values),))
    var.assign(np.asarray(values, np.float32))
    return var


def _on_a_thread(fn):
    result, error = [], []

    def run():
        try:
            result.append(fn())
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller
            error.append(exc)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    if error:
        raise error[0]
    return result[0]


def test_a_read_from_another_thread_during_an_in_place_update_is_a_snapshot():
    var = _variable([0.0] * 4)
    updating = _on_a_thread(var.reusable)  # the update's thread takes the array in place
    assert updating is not None and updating.flags.writeable
    fetched = var.read()  # this thread: a fetch meanwhile
    assert fetched is not updating
    updating[:] = 1.0  # the update goes on
    np.testing.assert_array_equal(fetched, np.zeros(4, np.float32))
    _on_a_thread(lambda: var.assign(updating, fresh=True))
    after = var.read()
    assert after is updating and not after.flags.writeable  # no copy once it is stored
    np.testing.assert_array_equal(after, np.ones(4, np.float32))


def test_the_updating_thread_reads_the_array_it_writes():
    var = _variable([0.0] * 4)

    def update():
        array = var.reusable()
        same = var.read() is array  # (the optimizers read their variables after this)
        array += 2.0
        var.assign(array, fresh=True)
        return same
    assert _on_a_thread(update)
    np.testing.assert_array_equal(var.read(), np.full(4, 2.0, np.float32))


def test_a_value_read_before_the_update_is_not_handed_out_in_place():
    var = _variable([0.0] * 4)
    held = var.read()  # a fetch or a reader of another step holds the value
    assert _on_a_thread(var.reusable) is None  # so the update must make its own array
    assert var.writer is None
    new = _on_a_thread(var.writable)
    assert new is not held
    new[:] = 3.0
    var.assign(new, fresh=True)
    np.testing.assert_array_equal(held, np.zeros(4, np.float32))
    assert var.read() is new
