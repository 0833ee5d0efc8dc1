"""Sparse gradients and updates: IndexedSlices from gathers, scatter ops, SparseApply* kernels.

Differential against TF1 (``tf.compat.v1``) where TensorFlow is available: the same graph is
built by one function for both libraries and stepped a few times with repeated ids.
"""
import inspect
import warnings

import numpy as np
import pytest

import asyncflow as af
from apply_context import ApplyContext, resources  # same folder
from asyncflow.kernels.registry import ANY, get_kernel
from test_apply_one_update import KERNELS, initial  # same folder (its sparse applies' arguments)
from tests.tf1_reference import tf1_run

TABLE = np.linspace(-1.0, 1.0, 7 * 3).reshape(7, 3).astype(np.float32)
IDS = np.array([[1, 4, 1], [6, 0, 4]], np.int32)


def _optimizers(tf):
    return [tf.train.GradientDescentOptimizer(0.3),
            tf.train.MomentumOptimizer(0.2, 0.9),
            tf.train.MomentumOptimizer(0.2, 0.9, use_nesterov=True),
            tf.train.AdagradOptimizer(0.4, initial_accumulator_value=0.2),
            tf.train.RMSPropOptimizer(0.05, decay=0.8, momentum=0.3, epsilon=1e-6),
            tf.train.RMSPropOptimizer(0.05, momentum=0.1, epsilon=1e-6, centered=True),
            tf.train.AdamOptimizer(0.1, epsilon=1e-6),
            tf.train.FtrlOptimizer(0.5, l1_regularization_strength=0.01,
                                   l2_regularization_strength=0.02),
            tf.train.FtrlOptimizer(0.5, learning_rate_power=-0.7,
                                   l2_shrinkage_regularization_strength=0.05)]


def _sparse_model(tf, table, ids, optimizer, sparse):
    """A loss over looked-up rows; ``sparse=False`` feeds the densified gradient instead."""
    var = tf.Variable(table)
    rows = tf.nn.embedding_lookup(var, ids)
    loss = tf.reduce_sum(tf.square(rows - 0.25) * tf.constant([1.0, 2.0, 3.0]))
    (grad, _), = optimizer.compute_gradients(loss, [var])
    if not sparse:
        grad = tf.convert_to_tensor(grad)
    return var, optimizer.apply_gradients([(grad, var)])


async def _our_steps(sparse):
    out = []
    for optimizer in _optimizers(af):
        with af.Graph().as_default():
            var, train = _sparse_model(af, TABLE, IDS, optimizer, sparse)
            async with af.Session() as sess:
                await sess.run(af.global_variables_initializer())
                for _ in range(3):
                    await sess.run(train)
                out.append(await sess.run(var))
    return out


async def test_sparse_applies_match_tf1(tmp_path):
    ours = await _our_steps(sparse=True)
    theirs = tf1_run(inspect.getsource(_optimizers) + inspect.getsource(_sparse_model) + """
results = []
for optimizer in _optimizers(tf):
    with tf.Graph().as_default():
        var, train = _sparse_model(tf, inputs["table"], inputs["ids"], optimizer, True)
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(3):
                sess.run(train)
            results.append(sess.run(var))
outputs["vars"] = results
""", tmp_path, table=TABLE, ids=IDS)
    for name, mine, reference in zip([type(o).__name__ for o in _optimizers(af)], ours,
                                     theirs["vars"]):
        np.testing.assert_allclose(mine, reference, rtol=2e-5, atol=2e-6, err_msg=name)


async def test_sparse_and_dense_applies_agree_where_tf1_says_they_do():
    """The sparse rule equals the dense rule on the touched rows (all but Adam and Ftrl
    touch nothing else; Momentum, RMSProp and Adagrad leave untouched rows as they are)."""
    sparse, dense = await _our_steps(True), await _our_steps(False)
    untouched = [2, 3, 5]
    for index, (a, b) in enumerate(zip(sparse, dense)):
        touched = [0, 1, 4, 6]
        np.testing.assert_allclose(a[touched], b[touched], rtol=1e-5, atol=1e-6)
        if index in (0, 3):  # SGD and Adagrad: a zero gradient changes nothing either way
            np.testing.assert_array_equal(a[untouched], b[untouched])
        if index in (1, 2, 4, 5):  # lazy: the untouched rows never move
            np.testing.assert_array_equal(a[untouched], TABLE[untouched])


def _gradient_graph(tf, table, ids):
    var = tf.Variable(table)
    first = tf.gather(var, ids)
    second = tf.nn.embedding_lookup(var, ids[:, :2])
    loss = tf.reduce_sum(first * first) + 3.0 * tf.reduce_sum(second)
    grad, = tf.gradients(loss, [var])
    clipped = tf.clip_by_norm(grad, 0.5)
    (global_a, global_b), norm = tf.clip_by_global_norm([grad, tf.constant([3.0, 4.0])], 2.0)
    fetch = {"values": grad.values, "indices": grad.indices, "dense": tf.convert_to_tensor(grad),
             "clipped_values": clipped.values, "global_values": global_a.values,
             "global_b": global_b, "norm": norm}
    return var, fetch, [type(grad).__name__, type(clipped).__name__, type(global_a).__name__]


async def test_gather_gradients_are_indexed_slices_matching_tf1(tmp_path):
    with af.Graph().as_default():
        var, fetch, kinds = _gradient_graph(af, TABLE, af.constant(IDS))
        assert kinds == ["IndexedSlices"] * 3
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            ours = await sess.run(fetch)
    theirs = tf1_run(inspect.getsource(_gradient_graph) + """
var, fetch, kinds = _gradient_graph(tf, inputs["table"], tf.constant(inputs["ids"]))
assert kinds == ["IndexedSlices"] * 3, kinds
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    for key, value in sess.run(fetch).items():
        outputs[key] = value
""", tmp_path, table=TABLE, ids=IDS)
    # Both concatenate the contributions of the two lookups; compare them as row sums.
    for key in ("dense", "global_b", "norm"):
        np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-5, err_msg=key)
    for key in ("values", "clipped_values", "global_values"):
        for mine, reference in ((ours, theirs),):
            dense_mine = np.zeros_like(TABLE)
            np.add.at(dense_mine, mine["indices"], mine[key])
            dense_theirs = np.zeros_like(TABLE)
            np.add.at(dense_theirs, reference["indices"], reference[key])
            np.testing.assert_allclose(dense_mine, dense_theirs, rtol=1e-5, err_msg=key)
    assert sorted(ours["indices"].tolist()) == sorted(theirs["indices"].tolist())


def _scatters(tf, table, ids, rows):
    var = tf.Variable(table)
    ops = [tf.scatter_update, tf.scatter_add, tf.scatter_sub, tf.scatter_mul, tf.scatter_div,
           tf.scatter_min, tf.scatter_max]
    variables = [tf.Variable(table) for _ in ops]
    return var, variables, [op(v, ids, rows) for op, v in zip(ops, variables)]


async def test_scatter_ops_match_tf1_with_repeated_indices(tmp_path):
    ids = np.array([5, 2, 5, 0], np.int32)  # repeats: update is last-wins (unique here below)
    rows = np.linspace(0.5, 2.0, 12).reshape(4, 3).astype(np.float32)
    with af.Graph().as_default():
        _, variables, updates = _scatters(af, TABLE, ids, rows)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            ours = await sess.run(updates)
    theirs = tf1_run(inspect.getsource(_scatters) + """
_, variables, updates = _scatters(tf, inputs["table"], inputs["ids"], inputs["rows"])
with tf.Session() as sess:
    sess.run(tf.global_variables_initializer())
    outputs["after"] = sess.run(updates)
""", tmp_path, table=TABLE, ids=ids, rows=rows)
    for index, (mine, reference) in enumerate(zip(ours, theirs["after"])):
        if index == 0:  # scatter_update with a repeated index: either write may win
            keep = [0, 1, 2, 3, 4, 6]
            np.testing.assert_allclose(mine[keep], reference[keep], rtol=1e-6)
            assert any(np.allclose(mine[5], rows[i]) for i in (0, 2))
        else:
            np.testing.assert_allclose(mine, reference, rtol=1e-6, err_msg=str(index))


async def test_out_of_range_ids_name_the_op_and_update_nothing():
    with af.Graph().as_default():
        var = af.Variable(TABLE)
        bad = af.placeholder(af.int32, [None])
        add = af.scatter_add(var, bad, af.ones([3, 3]), name="bad_scatter")
        lookup = af.nn.embedding_lookup(var, bad, name="bad_lookup")
        sgd = af.train.AdagradOptimizer(0.1)
        grad = af.IndexedSlices(af.ones([3, 3]), bad, af.constant([7, 3]))
        apply = sgd.apply_gradients([(grad, var)], name="bad_apply")
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"indices\[1\] = 7 is not in \[0, 7\)") as info:
                await sess.run(add, {bad: [0, 7, 1]})
            assert info.value.op.name == "bad_scatter"
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"indices\[2\] = -1 is not in \[0, 7\)"):
                await sess.run(lookup, {bad: [0, 1, -1]})
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=r"Index 9 at offset 2 in indices is out of range"):
                await sess.run(apply, {bad: [0, 1, 9]})
            np.testing.assert_array_equal(await sess.run(var), TABLE)
            slots = [await sess.run(v) for v in sgd.variables()]
            np.testing.assert_array_equal(slots[0], np.full_like(TABLE, 0.1))


async def test_a_reader_never_sees_a_sparse_update_in_place():
    with af.Graph().as_default():
        var = af.Variable(TABLE)
        update = af.scatter_add(var, [1], [[1.0, 1.0, 1.0]])
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            before = await sess.run(var)
            await sess.run(update)
            after = await sess.run(var)
    np.testing.assert_array_equal(before, TABLE)
    np.testing.assert_array_equal(after[1], TABLE[1] + 1)


def test_indexed_slices_aggregate_and_densify():
    with af.Graph().as_default():
        var = af.Variable(np.zeros((4, 2), np.float32))
        a = af.gather(var, [0, 1])
        b = af.gather(var, [3])
        grad, = af.gradients(af.reduce_sum(a) + af.reduce_sum(b), [var])
        assert isinstance(grad, af.IndexedSlices)
        assert grad.values.op.type == "ConcatV2"
        mixed, = af.gradients(af.reduce_sum(a) + af.reduce_sum(var * 2.0), [var])
        assert isinstance(mixed, af.Tensor) and mixed.op.type == "AddN"
        assert af.convert_to_tensor(grad).shape.as_list() == [4, 2]
        summed = af.add_n([grad, grad])  # add_n densifies, as TF1's does
        assert isinstance(summed, af.Tensor) and summed.shape.as_list() == [4, 2]
        assert isinstance(af.train.GradientDescentOptimizer(0.1).compute_gradients(
            af.reduce_sum(a), [var])[0][0], af.IndexedSlices)


def test_densifying_a_huge_or_unknown_gradient_warns_as_tf1():
    with af.Graph().as_default():
        values = af.placeholder(af.float32, [None, 64])
        ids = af.placeholder(af.int32, [None])
        big = af.IndexedSlices(values, ids, af.constant([2_000_000, 64]))
        with pytest.warns(UserWarning, match="dense Tensor with 128000000 elements"):
            af.convert_to_tensor(big)
        unknown = af.IndexedSlices(values, ids, af.shape(af.placeholder(af.float32, [None, 64])))
        with pytest.warns(UserWarning, match="dense Tensor of unknown shape"):
            af.convert_to_tensor(unknown)
        small = af.IndexedSlices(values, ids, af.constant([10, 64]))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            af.convert_to_tensor(small)


@pytest.mark.parametrize("optimizer", ["Adagrad", "Momentum", "Adam", "RMSProp", "Ftrl"])
def test_a_huge_table_and_its_slots_are_initialized_on_their_device(optimizer):
    """Registering the graph never carries the table: every Const stays small."""
    import msgpack
    with af.Graph().as_default() as graph:
        with af.device("/job:ps/task:0"):
            table = af.get_variable("table", [2_000_000, 64],
                                    initializer=af.initializers.random_uniform(-1.0, 1.0))
        loss = af.reduce_sum(af.nn.embedding_lookup(table, [3, 5]))
        opt = {"Adagrad": lambda: af.train.AdagradOptimizer(0.1),
               "Momentum": lambda: af.train.MomentumOptimizer(0.1, 0.9),
               "Adam": lambda: af.train.AdamOptimizer(0.1),
               "RMSProp": lambda: af.train.RMSPropOptimizer(0.1),
               "Ftrl": lambda: af.train.FtrlOptimizer(0.1)}[optimizer]()
        opt.minimize(loss)
        biggest = max(np.asarray(op.get_attr("value")).nbytes
                      for op in graph.get_operations() if op.type == "Const")
        assert biggest < 1 << 16
        for slot in opt.variables():
            assert slot.device == "/job:ps/task:0", slot
        size = len(msgpack.packb(graph.as_graph_def(), default=lambda o: repr(o)))
        assert size < 1 << 20


def test_writable_is_the_stored_array_only_while_no_one_else_holds_it():
    from asyncflow.exec.resources import VariableResource
    resource = VariableResource("table", np.float32, (3, 2))
    resource.assign(np.zeros((3, 2), np.float32))
    array = resource.writable()
    assert array is resource.value and array.flags.writeable  # a sparse update costs its rows
    array[1] = 5.0
    resource.assign(array, fresh=True)
    assert not resource.value.flags.writeable
    del array
    reader = resource.read()  # a fetched value or a pending op's input
    copy = resource.writable()
    assert copy is not resource.value
    copy[0] = 7.0
    np.testing.assert_array_equal(reader[0], [0.0, 0.0])
    del reader, copy
    view = resource.value[1:]
    assert resource.writable() is not resource.value  # a view would see the write
    del view
    assert resource.writable() is resource.value


SLOTTED = sorted(op for op, (slots, _) in KERNELS.items() if op.startswith("Sparse") and slots)


@pytest.mark.parametrize("rows", [30, 70], ids=["fewer", "more"])
@pytest.mark.parametrize("op_type", SLOTTED)
def test_a_slot_of_another_shape_is_refused_before_anything_changes(op_type, rows):
    """A sparse apply whose slot no longer has the variable's shape (one assigned with
    ``validate_shape=False``: the graph cannot know) is refused, as TF1 refuses it ("var and
    accum do not have the same shape") and as the dense applies do (``check_slots``), before
    any stored array changes: the slot named, each array's bytes as they were. Before, the
    rule ran on it: a raw IndexError after an earlier slot was updated in place (fewer rows:
    index 40), or an update accepted (more rows)."""
    slots, arguments = KERNELS[op_type]
    values, grad, indices = initial(np.random.default_rng(5), op_type, slots)
    values[-1] = values[-1][:rows] if rows < len(values[-1]) else np.concatenate(
        [values[-1], values[-1][:rows - len(values[-1])]])
    refs = resources(values)
    ctx = ApplyContext(1)
    ctx.type = op_type
    with pytest.raises(af.errors.InvalidArgumentError,
                       match=rf"{op_type}: slot {refs[-1].name} has shape \[{rows}, 4\] but "
                       rf"the variable {refs[0].name} has shape \[50, 4\]"):
        get_kernel(op_type, ANY).fn(ctx, *arguments(refs, grad, indices))
    for ref, value in zip(refs, values):
        assert ref.read().tobytes() == value.tobytes(), ref.name


async def test_a_sparse_apply_refuses_a_slot_assigned_another_shape():
    """Through a session: an embedding table's RMSProp slot assigned with fewer rows (its
    variable's shape unknown to the graph) fails the sparse step with the slot named, and the
    table and both slots keep their values."""
    with af.Graph().as_default():
        var = af.Variable(TABLE)
        ids = af.placeholder(af.int32, [None])
        loss = af.reduce_sum(af.square(af.nn.embedding_lookup(var, ids)))
        optimizer = af.train.RMSPropOptimizer(0.05, momentum=0.3)
        train = optimizer.minimize(loss)
        slots = [optimizer.get_slot(var, name) for name in optimizer.get_slot_names()]
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            await sess.run(train, {ids: [1, 4]})
            await sess.run(af.assign(slots[-1], np.ones((4, 3), np.float32),
                                     validate_shape=False))
            before = await sess.run([var] + slots)
            with pytest.raises(af.errors.InvalidArgumentError,
                               match=rf"slot {slots[-1].op.name} has shape \[4, 3\]"):
                await sess.run(train, {ids: [1, 6]})
            after = await sess.run([var] + slots)
    for a, b in zip(before, after):
        assert a.shape == b.shape and a.tobytes() == b.tobytes()
