"""Input pipelines: readers, producers with epochs, batching, and queue runners with the
Coordinator. Tests that read files run on real time (worker threads); pure waits use
``autojump_clock``."""
import numpy as np
import pytest
import trio
import trio.testing

import asyncflow as af
from asyncflow.train.queue_runner import Coordinator


def _write_text(tmp_path, name, lines):
    path = tmp_path / name
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return str(path)


def _write_shards(tmp_path, rows=30, shards=3):
    x = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    y = np.arange(rows, dtype=np.int64)
    paths = []
    for i, (xs, ys) in enumerate(zip(np.array_split(x, shards), np.array_split(y, shards))):
        path = tmp_path / f"shard{i}.npz"
        np.savez(path, x=xs, y=ys)
        paths.append(str(path))
    return paths


# -- readers ----------------------------------------------------------------------------------------
async def test_text_line_reader_reads_lines_across_files(tmp_path):
    first = _write_text(tmp_path, "a.txt", [b"header", b"a1", b"a2"])
    second = _write_text(tmp_path, "b.txt", [b"header", b"b1"])
    with af.Graph().as_default():
        files = af.FIFOQueue(4, af.string, shapes=[[]])
        reader = af.TextLineReader(skip_header_lines=1)
        key, value = reader.read(files)
        assert key.shape.as_list() == [] and value.dtype is af.string
        produced = reader.num_records_produced()
        async with af.Session() as sess:
            await sess.run(files.enqueue_many([[first.encode(), second.encode()]]))
            await sess.run(files.close())
            got = [await sess.run([key, value]) for _ in range(3)]
            assert [v for _, v in got] == [b"a1", b"a2", b"b1"]
            assert got[0][0] == f"{first}:2".encode()
            with pytest.raises(af.errors.OutOfRangeError, match="is closed"):
                await sess.run(value)
            assert await sess.run(produced) == 3
            assert await sess.run(reader.num_work_units_completed()) == 2


async def test_numpy_record_reader_reads_rows_of_npz_and_npy(tmp_path):
    paths = _write_shards(tmp_path, rows=10, shards=2)
    np.save(tmp_path / "plain.npy", np.arange(6, dtype=np.int32).reshape(3, 2))
    with af.Graph().as_default():
        files = af.FIFOQueue(4, af.string, shapes=[[]])
        reader = af.NumpyRecordReader([af.float32, af.int64], shapes=[[2], []], names=["x", "y"])
        keys, batch = reader.read_up_to(files, 4)
        assert batch["x"].shape.as_list() == [None, 2]
        npy_files = af.FIFOQueue(4, af.string, shapes=[[]])
        npy_reader = af.NumpyRecordReader(af.int32, shapes=[[2]])
        npy_key, npy_row = npy_reader.read(npy_files)
        async with af.Session() as sess:
            await sess.run(files.enqueue_many([[p.encode() for p in paths]]))
            await sess.run(files.close())
            ys = []
            while True:
                try:
                    got_keys, got = await sess.run([keys, batch])
                except af.errors.OutOfRangeError:
                    break
                assert len(got_keys) == len(got["y"]) <= 4
                np.testing.assert_array_equal(got["x"][:, 0], got["y"] * 2)
                ys += got["y"].tolist()
            assert ys == list(range(10))
            await sess.run(npy_files.enqueue(str(tmp_path / "plain.npy").encode()))
            key_value, row = await sess.run([npy_key, npy_row])
            assert row.tolist() == [0, 1] and key_value.endswith(b"plain.npy:0")


async def test_reader_errors_name_the_file(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.zeros((3, 5), np.float32))
    with af.Graph().as_default():
        files = af.FIFOQueue(4, af.string, shapes=[[]])
        name = af.placeholder(af.string, [])
        enqueue = files.enqueue(name)
        reader = af.NumpyRecordReader(af.float32, shapes=[[2]], names=["x"])
        _, row = reader.read(files)
        other = af.NumpyRecordReader(af.int32, names=["missing"])
        _, missing = other.read(files)
        async with af.Session() as sess:
            await sess.run(enqueue, {name: str(tmp_path / "nope.npz")})
            with pytest.raises(af.errors.NotFoundError, match="nope.npz does not exist"):
                await sess.run(row)
            await sess.run(reader.reset())
            await sess.run(enqueue, {name: str(tmp_path / "bad.npz")})
            with pytest.raises(af.errors.InvalidArgumentError, match=r"records of shape \[5\]"):
                await sess.run(row)
            await sess.run(enqueue, {name: str(tmp_path / "bad.npz")})
            with pytest.raises(af.errors.InvalidArgumentError, match="has no arrays"):
                await sess.run(missing)


# -- producers and epochs ---------------------------------------------------------------------------
async def test_string_input_producer_epochs_then_out_of_range(autojump_clock):
    with af.Graph().as_default():
        queue = af.train.string_input_producer(["a", "b", "c"], num_epochs=2, shuffle=False)
        name = queue.dequeue()
        async with af.Session() as sess:
            await sess.run(af.local_variables_initializer())
            got = []
            async with af.train.start_queue_runners(sess) as coord:
                while not coord.should_stop():
                    got.append(await sess.run(name))
            assert got == [b"a", b"b", b"c"] * 2
            assert coord.exception is None


async def test_shuffled_producer_shuffles_each_epoch_and_keeps_every_item(autojump_clock):
    with af.Graph().as_default():
        af.set_random_seed(3)
        queue = af.train.range_input_producer(20, num_epochs=3, shuffle=True, seed=1)
        value = queue.dequeue()
        async with af.Session() as sess:
            await sess.run(af.local_variables_initializer())
            got = []
            async with af.train.start_queue_runners(sess):
                while True:
                    got.append(int(await sess.run(value)))
    epochs = [got[i * 20:(i + 1) * 20] for i in range(3)]
    assert len(got) == 60 and all(sorted(e) == list(range(20)) for e in epochs)
    assert epochs[0] != list(range(20)) and epochs[0] != epochs[1]


def test_producer_build_errors():
    with af.Graph().as_default():
        with pytest.raises(ValueError, match="non-null"):
            af.train.string_input_producer([])
        with pytest.raises(ValueError, match="num_epochs"):
            af.train.limit_epochs(af.constant([1]), 0)
        with pytest.raises(ValueError, match="fully defined"):
            af.train.batch([af.placeholder(af.float32, [None])], 4)
        with pytest.raises(ValueError, match="batch_size"):
            af.train.batch([af.constant(1.0)], 0)


# -- batching ---------------------------------------------------------------------------------------
async def test_batch_of_text_lines_with_smaller_final_batch(tmp_path):
    path = _write_text(tmp_path, "lines.txt", [f"line{i}".encode() for i in range(7)])
    with af.Graph().as_default():
        files = af.train.string_input_producer([path], num_epochs=1, shuffle=False)
        _, line = af.TextLineReader().read(files)
        batches = af.train.batch({"line": line}, batch_size=3, allow_smaller_final_batch=True)
        assert batches["line"].shape.as_list() == [None]
        async with af.Session() as sess:
            await sess.run(af.local_variables_initializer())
            sizes, lines = [], []
            async with af.train.start_queue_runners(sess):
                while True:
                    got = (await sess.run(batches))["line"]
                    sizes.append(len(got))
                    lines += got.tolist()
            assert sizes == [3, 3, 1]
            assert lines == [f"line{i}".encode() for i in range(7)]


async def test_shuffle_batch_from_npz_shards_sees_every_row_once_per_epoch(tmp_path):
    paths = _write_shards(tmp_path, rows=30, shards=3)
    with af.Graph().as_default():
        files = af.train.string_input_producer(paths, num_epochs=2, seed=5)
        reader = af.NumpyRecordReader([af.float32, af.int64], shapes=[[2], []], names=["x", "y"])
        _, rows = reader.read_up_to(files, 4)
        x, y = af.train.shuffle_batch([rows["x"], rows["y"]], batch_size=5, capacity=20,
                                      min_after_dequeue=6, num_threads=2, seed=2,
                                      enqueue_many=True, allow_smaller_final_batch=True)
        async with af.Session() as sess:
            await sess.run(af.local_variables_initializer())
            ys = []
            async with af.train.start_queue_runners(sess):
                while True:
                    bx, by = await sess.run([x, y])
                    np.testing.assert_array_equal(bx[:, 0], by * 2)
                    ys += by.tolist()
    assert sorted(ys) == sorted(list(range(30)) * 2)
    assert ys[:30] != sorted(ys[:30])


async def test_dynamic_pad_batches_varying_lengths(autojump_clock):
    with af.Graph().as_default():
        values = af.placeholder(af.int32, [None])
        queue = af.FIFOQueue(5, af.int32, shapes=[[None]])
        enqueue = queue.enqueue(values)
        padded = af.train.batch([queue.dequeue()], batch_size=2, dynamic_pad=True)[0]
        async with af.Session() as sess:
            await sess.run(enqueue, {values: [1, 2, 3]})
            await sess.run(enqueue, {values: [4]})
            async with af.train.start_queue_runners(sess) as coord:
                assert (await sess.run(padded)).tolist() == [[1, 2, 3], [4, 0, 0]]
                coord.request_stop()
                await coord.join()


# -- queue runners and the coordinator -------------------------------------------------------------
async def test_runner_error_stops_everything_and_is_raised_once(tmp_path):
    with af.Graph().as_default():
        files = af.train.string_input_producer([str(tmp_path / "missing.txt")])
        _, line = af.TextLineReader().read(files)
        lines = af.train.batch([line], batch_size=2)
        async with af.Session() as sess:
            coord = Coordinator()
            with pytest.raises(af.errors.NotFoundError, match="missing.txt does not exist"):
                async with af.train.start_queue_runners(sess, coord=coord):
                    await sess.run(lines)          # fails or is cancelled when the runner fails
                    pytest.fail("the batch cannot be produced")
            assert coord.should_stop()
            coord.raise_requested_exception()      # already reported: nothing more
            assert await sess.run(files.is_closed())         # runners closed their queues


async def test_request_stop_ends_runners_blocked_on_full_queues(autojump_clock):
    with af.Graph().as_default():
        queue = af.FIFOQueue(2, af.int32, shapes=[[]])
        counter = af.Variable(0, name="counter")
        enqueue = queue.enqueue(counter.assign_add(1))
        af.train.add_queue_runner(af.train.QueueRunner(queue, [enqueue] * 3))
        size, closed = queue.size(), queue.is_closed()
        async with af.Session() as sess:
            await sess.run(counter.initializer)
            async with af.train.start_queue_runners(sess) as coord:
                await trio.testing.wait_all_tasks_blocked()
                assert await sess.run(size) == 2 and coord.running_tasks == 4
                coord.request_stop()
                await coord.join()
                assert coord.running_tasks == 0
            assert await sess.run(closed)
            assert await sess.run(size) == 2


async def test_coordinator_records_first_error_only_and_clean_stops(autojump_clock):
    coord = Coordinator()
    assert not await coord.wait_for_stop(timeout=1.0)
    coord.request_stop(af.errors.OutOfRangeError(None, None, "done"))
    assert coord.should_stop() and coord.exception is None
    first = af.errors.InvalidArgumentError(None, None, "first")
    coord.request_stop(first)
    coord.request_stop(ValueError("second"))
    assert coord.exception is first
    with coord.stop_on_exception():
        raise KeyError("ignored: already stopping with an error")
    with pytest.raises(af.errors.InvalidArgumentError, match="first"):
        await coord.join()
    await coord.join()                              # reported once
    coord.clear_stop()
    assert not coord.should_stop() and coord.exception is None


async def test_queue_runner_yields_between_runs_that_did_not_wait():
    # Runs that complete inline have no schedule point of their own; the runner adds one,
    # so it does not fill the whole queue before the code inside the block runs again.
    with af.Graph().as_default():
        queue = af.FIFOQueue(1000, [af.int32], shapes=[[]])
        af.train.add_queue_runner(af.train.QueueRunner(queue, [queue.enqueue([1])]))
        size = queue.size()
        async with af.Session() as sess:
            async with af.train.start_queue_runners(sess) as coord:
                for _ in range(3):
                    await trio.lowlevel.checkpoint()
                assert 0 < await sess.run(size) < 50
                coord.request_stop()
