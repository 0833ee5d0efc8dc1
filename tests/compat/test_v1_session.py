"""``asyncflow.compat.v1``: TF1's synchronous Session on the background loop, and misuse
of the async surface caught with the fix in the message."""
import asyncio
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import trio

import asyncflow as af
import asyncflow.compat.v1 as tf
from asyncflow.compat.background_loop import LOOP
from default_graph import fresh_graph  # noqa: F401 (autouse fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_a_tf1_script_runs_with_sync_calls():
    x = tf.placeholder("float", [None, 2])
    w = tf.Variable(tf.ones([2, 1]))
    y = tf.matmul(x, w)
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        assert sess.run(y, {x: [[1, 2]]}).tolist() == [[3.0]]
        assert y.eval({x: [[3, 4]]}).tolist() == [[7.0]]  # the with block's default session
        w.assign([[2.0], [2.0]]).op.run()
        assert w.eval().tolist() == [[2.0], [2.0]]
        # A step that needs the loop (a queue) runs there; the result comes back the same way.
        queue = tf.FIFOQueue(3, tf.float32)
        sess.run(queue.enqueue([5.0]))
        assert sess.run(queue.dequeue()) == 5.0
    assert sess.closed
    with pytest.raises(RuntimeError, match="closed Session"):
        sess.run(y, {x: [[1, 2]]})


def test_variable_load_assigns_at_once_with_a_sync_session():
    """TF1's ``v.load(value, sess)`` (and with the default session) assigns before it
    returns; it was a coroutine here, so a TF1 program that loaded weights silently kept the
    initial ones. An af.Session's load is still awaited."""
    v = tf.get_variable("v", [2], initializer=tf.zeros_initializer())
    with tf.Session() as sess:
        sess.run(v.initializer)
        assert v.load(np.array([1.0, 2.0], np.float32), sess) is None
        assert sess.run(v).tolist() == [1.0, 2.0]
        v.load([3.0, 4.0])  # the with block's default session
        assert v.eval().tolist() == [3.0, 4.0]
    with pytest.raises(ValueError, match="load needs a session"):
        v.load([5.0, 6.0])

    async def main():
        async with af.Session() as sess:
            await sess.run(v.initializer)
            assert await v.load([7.0, 8.0], sess) is None
            assert (await sess.run(v)).tolist() == [7.0, 8.0]
    trio.run(main)


def test_eval_without_a_default_session_says_how():
    t = tf.constant(1.0)
    with pytest.raises(ValueError, match="No default session.*as_default"):
        t.eval()


def test_interactive_session_is_the_default_until_closed():
    sess = tf.InteractiveSession()
    try:
        assert (tf.constant(2.0) * 3.0).eval() == 6.0
        assert tf.get_default_session() is sess
    finally:
        sess.close()
    assert tf.get_default_session() is None


def test_dtype_strings_mean_what_tf1_means():
    assert tf.placeholder("float").dtype is tf.float32
    assert tf.cast(tf.constant(1), "float").dtype is tf.float32
    assert tf.placeholder("double").dtype is tf.float64
    assert tf.placeholder("int32").dtype is tf.int32
    with pytest.raises(TypeError, match="'int'"):
        tf.placeholder("int")


def test_dropout_takes_keep_prob_second_and_keeps_static_shape():
    x = tf.ones([200, 50])
    keep_prob = tf.placeholder(tf.float32)  # unshaped, as TF1 tutorials write it
    dropped = tf.nn.dropout(x, keep_prob)
    assert dropped.shape.as_list() == [200, 50]
    kept_90 = tf.nn.dropout(x, 0.9, seed=1)
    by_rate = tf.nn.dropout(x, rate=0.9, seed=1)
    with tf.Session() as sess:
        assert np.array_equal(sess.run(dropped, {keep_prob: 1.0}), np.ones([200, 50]))
        share = np.mean(sess.run(kept_90) > 0)
        assert 0.85 < share < 0.95
        assert 0.05 < np.mean(sess.run(by_rate) > 0) < 0.15
    with pytest.raises(ValueError, match="exactly one"):
        tf.nn.dropout(x, 0.5, rate=0.5)


def test_threads_share_one_session():
    """Hogwild and feeding threads: runs from several threads at once, one blocking on the
    loop (a dequeue) until another thread's enqueue wakes it."""
    x = tf.placeholder(tf.float32, [])
    doubled = x * 2.0
    queue = tf.FIFOQueue(10, tf.float32)
    value = tf.placeholder(tf.float32, [])
    enqueue, dequeue = queue.enqueue([value]), queue.dequeue()
    results, failures = {}, []
    with tf.Session() as sess:
        def compute(index):
            try:
                results[index] = [float(sess.run(doubled, {x: index * 100 + i})) for i in range(50)]
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                failures.append(exc)

        def consume():
            try:
                results["dequeued"] = float(sess.run(dequeue))
            except BaseException as exc:  # noqa: BLE001
                failures.append(exc)

        consumer = threading.Thread(target=consume)
        consumer.start()
        workers = [threading.Thread(target=compute, args=(i,)) for i in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        sess.run(enqueue, {value: 7.0})
        consumer.join(60)
    assert not failures
    assert results["dequeued"] == 7.0
    for i in range(4):
        assert results[i] == [2.0 * (i * 100 + j) for j in range(50)]


def test_threads_fetching_one_flat_list_get_their_own_values():
    """Hogwild threads fetching the same flat list and tuple (the structure and its feed
    signatures kept once per session, built by whichever thread comes first), feeding in
    either order: each run returns its own values in its own container type."""
    x = tf.placeholder(tf.float32, [])
    y = tf.placeholder(tf.float32, [])
    counter = tf.Variable(0.0)
    bump = tf.assign_add(counter, 1.0)
    total = x + 2.0 * y
    results, failures = {}, []
    with tf.Session() as sess:
        sess.run(counter.initializer)

        def compute(index):
            try:
                got = []
                for i in range(40):
                    a, b = float(index * 100 + i), float(i)
                    feeds = {x: a, y: b} if i % 2 else {y: b, x: a}
                    listed = sess.run([total, bump.op, x], feeds)
                    paired = sess.run((y, total), feeds)
                    got.append((type(listed), listed[1:], type(paired), paired[0],
                                listed[0] == paired[1] == a + 2.0 * b))
                results[index] = got
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                failures.append(exc)

        workers = [threading.Thread(target=compute, args=(i,)) for i in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert 0 < sess.run(counter) <= 160  # unlocked updates (TF1's hogwild) may overlap
    assert not failures
    for index in range(4):
        assert results[index] == [(list, [None, float(index * 100 + i)], tuple, float(i), True)
                                  for i in range(40)]


async def test_a_sync_run_inside_trio_names_await():
    with pytest.raises(RuntimeError, match=r"await sess\.run"):
        tf.Session()


async def test_sync_and_async_share_the_session_and_its_graph():
    """Build once, run a step synchronously (outside the loop), then await the same session."""
    counter = tf.Variable(0.0)
    bump = counter.assign_add(1.0)
    sess = await trio.to_thread.run_sync(tf.Session)
    try:
        await trio.to_thread.run_sync(sess.run, counter.initializer)
        await trio.to_thread.run_sync(sess.run, bump)
        assert await sess.run_async(bump) == 2.0
        assert await sess.run_async(counter) == 2.0
    finally:
        await trio.to_thread.run_sync(sess.close)


def test_run_async_from_asyncio():
    c = tf.constant(3.0) * 2.0
    with tf.Session() as sess:
        assert asyncio.run(sess.run_async(c)) == 6.0


def test_with_on_the_async_session_names_async_with_and_compat():
    with pytest.raises(TypeError, match=r"async with af\.Session.*asyncflow\.compat\.v1"):
        with af.Session():
            pass


async def test_an_unawaited_run_warns_with_its_line():
    c = af.constant(1.0)
    async with af.Session() as sess:
        with pytest.warns(RuntimeWarning, match=r"test_v1_session\.py:\d+ was never awaited"):
            handle = sess.run(c)  # noqa: F841 - the mistake under test
            del handle
        handle = sess.run(c)
        line = sys._getframe().f_lineno - 1
        with pytest.raises(TypeError, match=f"test_v1_session.py:{line} was used without"):
            float(handle)
        assert await handle == 1.0
        # still a coroutine by protocol: trio's start_soon and asyncio take it
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sess.run, c)


def test_trio_run_inside_asyncio_names_aio():
    from asyncflow import aio

    async def main():
        aio.run_trio(trio.sleep, 0)

    with pytest.raises(RuntimeError, match=r"asyncflow\.aio"):
        asyncio.run(main())


def _run_script(code, timeout=120):
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def test_ctrl_c_cancels_a_waiting_step_and_leaves_the_session_usable():
    result = _run_script("""
        import os, signal, threading
        import asyncflow.compat.v1 as tf
        queue = tf.FIFOQueue(2, tf.float32)
        dequeue, enqueue = queue.dequeue(), queue.enqueue([1.0])
        sess = tf.Session()

        def interrupt_once_waiting():
            for _ in range(20000):  # bounded: until the main thread's step waits
                if sess.statistics().runs_in_flight == 1:
                    os.kill(os.getpid(), signal.SIGINT)
                    return
                threading.Event().wait(0.001)

        threading.Thread(target=interrupt_once_waiting, daemon=True).start()
        try:
            sess.run(dequeue)
        except KeyboardInterrupt:
            print("interrupted")
        sess.run(enqueue)
        print("after", sess.run(dequeue), sess.statistics().runs_in_flight)
        sess.close()
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["interrupted", "after", "1.0", "0"]


def test_a_session_used_after_exit_began_fails_clearly_and_never_hangs():
    result = _run_script("""
        import atexit
        def late():  # registered first: runs after the loop stopped
            try:
                sess.run(dequeue)
            except RuntimeError as exc:
                print("refused:", exc)
        atexit.register(late)
        import asyncflow.compat.v1 as tf
        queue = tf.FIFOQueue(2, tf.float32)
        dequeue = queue.dequeue()
        sess = tf.Session()
        sess.run(queue.enqueue([1.0]))
    """)
    assert result.returncode == 0, result.stderr
    assert "refused: the asyncflow.compat.v1 event loop has stopped" in result.stdout


def test_the_loop_is_one_per_process():
    with tf.Session() as first, tf.Session() as second:
        first.run(tf.FIFOQueue(1, tf.float32).size())
        second.run(tf.FIFOQueue(1, tf.float32).size())
    assert LOOP.running and LOOP.thread.daemon


def test_monitored_training_session_runs_synchronously(tmp_path):
    step = tf.train.get_or_create_global_step()
    weight = tf.Variable(0.0)
    loss = tf.square(weight - 3.0)
    train_op = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    hooks = [tf.train.StopAtStepHook(last_step=20)]
    saver = tf.train.Saver()  # before the session finalizes the graph, as in TF1
    with tf.train.MonitoredTrainingSession(checkpoint_dir=str(tmp_path), hooks=hooks) as sess:
        runs = 0
        while not sess.should_stop():
            sess.run(train_op)
            runs += 1
    assert runs == 20
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("-20")
    with tf.Session() as sess:  # the final checkpoint restores into a plain session
        saver.restore(sess, tf.train.latest_checkpoint(str(tmp_path)))
        assert abs(sess.run(weight) - 3.0) < 0.1


def test_a_local_server_target_is_a_session_target():
    server = tf.train.Server.create_local_server()
    try:
        with tf.device("/job:localhost/task:0"):
            total = tf.Variable(1.0)
            bump = total.assign_add(2.0)
        with tf.Session(server.target) as sess:
            assert server.target.startswith("grpc://127.0.0.1:")
            sess.run(total.initializer)
            assert sess.run(bump) == 3.0
        handle = sess.async_session._target.master.session_handle
        refused = f"Attempted to use a closed Session\\. \\({handle} "
        with pytest.raises(RuntimeError, match=refused):
            sess.run(bump)  # on a cluster target too: not an UnavailableError of its channels
    finally:
        server.stop()


def test_a_dropped_session_is_closed_on_the_loop():
    import gc
    sess = tf.Session()
    inner = sess.async_session
    sess.run(tf.constant(1.0))
    del sess
    gc.collect()
    for _ in range(1000):  # bounded: until the loop's task has closed it
        if inner.closed:
            break
        threading.Event().wait(0.005)
    assert inner.closed


def test_a_close_from_another_thread_waits_for_the_first():
    # The first close's cleanup (on the loop) waits up to 1 s for the second close to return:
    # at once if the second does not wait for the first (then the order below is reversed).
    with tf.Session() as sess:
        assert sess.run(tf.constant(2.0) * 3.0) == 6.0
        inner = sess.async_session
        target_close = inner._target.close
        began, second_returned, order = threading.Event(), threading.Event(), []

        async def held():
            began.set()
            await trio.to_thread.run_sync(second_returned.wait, 1.0)
            await target_close()
            order.append("the first close's cleanup ended")
        inner._target.close = held

        def second():
            assert began.wait(60)
            sess.close()
            order.append("the second close returned")
            second_returned.set()
        closer = threading.Thread(target=second, daemon=True)
        closer.start()
    closer.join(60)
    assert not closer.is_alive()
    assert order == ["the first close's cleanup ended", "the second close returned"]


def test_a_close_from_a_task_of_the_loop_itself_is_refused_not_hung(monkeypatch):
    # The session's task runs on the background loop: a synchronous close made from another
    # task of that loop would wait for a task its own wait keeps from running (it returned
    # only at the bound, 40 s, with nothing closed). It is refused, as LOOP.call is there,
    # and the session stays usable and closes from this thread.
    from asyncflow.compat import background_loop
    monkeypatch.setattr(background_loop, "CANCEL_GRACE_S", 0.0)  # the old hang: short here
    monkeypatch.setattr(background_loop, "STOP_TIMEOUT_S", 0.5)
    sess = tf.Session()
    try:
        assert sess.run(tf.constant(2.0) * 3.0) == 6.0

        async def close_synchronously():
            sess.close()
        with pytest.raises(RuntimeError, match="its own event loop"):
            LOOP.call(close_synchronously)
        assert not sess.async_session.closed
        assert sess.run(tf.constant(1.0) + 1.0) == 2.0
    finally:
        sess.close()
    assert sess.async_session.closed
