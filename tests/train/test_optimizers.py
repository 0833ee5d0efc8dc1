"""Optimizers: fused update kernels vs numpy references, slots, global step, minimize()."""
import numpy as np
import pytest

import asyncflow as af
from gradcheck import assert_close

W0 = np.array([[0.5, -1.0], [2.0, 0.25]])
B0 = np.array([0.1, -0.2])
X = np.array([[1.0, 2.0], [-1.0, 0.5], [0.3, -0.7]])


def numpy_grads(w, b):
    """Gradients of loss = sum(tanh(X @ w + b)^2) (the model below)."""
    h = np.tanh(X @ w + b)
    d = 2 * h * (1 - h ** 2)
    return X.T @ d, d.sum(axis=0)


def build_model(dtype=af.float64):
    w = af.Variable(W0.astype(dtype.np), name="w")
    b = af.Variable(B0.astype(dtype.np), name="b")
    h = af.tanh(af.matmul(af.constant(X, dtype), w) + b)
    return w, b, af.reduce_sum(af.square(h))


# numpy references: (state_init(shape), step(param, grad, state, t) -> param)
def sgd_ref(lr):
    def step(p, g, s, t):
        return p - lr * g
    return dict, step


def momentum_ref(lr, mu, nesterov):
    def step(p, g, s, t):
        s["a"] = mu * s.get("a", 0.0) + g
        return p - lr * g - lr * mu * s["a"] if nesterov else p - lr * s["a"]
    return dict, step


def adam_ref(lr, b1, b2, eps):
    def step(p, g, s, t):
        s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
        s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * g * g
        # The beta powers are float32 variables (TF1's), advanced in float32.
        b1_t, b2_t = np.float32(b1), np.float32(b2)
        for _ in range(t - 1):
            b1_t, b2_t = b1_t * np.float32(b1), b2_t * np.float32(b2)
        lr_t = lr * np.sqrt(1 - np.float64(b2_t)) / (1 - np.float64(b1_t))
        return p - lr_t * s["m"] / (np.sqrt(s["v"]) + eps)
    return dict, step


def adagrad_ref(lr, init):
    def step(p, g, s, t):
        s["a"] = s.get("a", init) + g * g
        return p - lr * g / np.sqrt(s["a"])
    return dict, step


def rmsprop_ref(lr, decay, mu, eps, centered):
    def step(p, g, s, t):
        s["ms"] = decay * s.get("ms", 1.0) + (1 - decay) * g * g
        denom = s["ms"]
        if centered:
            s["mg"] = decay * s.get("mg", 0.0) + (1 - decay) * g
            denom = denom - s["mg"] ** 2
        s["mom"] = mu * s.get("mom", 0.0) + lr * g / np.sqrt(denom + eps)
        return p - s["mom"]
    return dict, step


def f32(x):
    """A hyperparameter as TF1 (and asyncflow) give it to a float64 update: a Python float
    becomes a float32 tensor, cast to the variable's dtype."""
    return float(np.float32(x))


CASES = {
    "sgd": (lambda: af.train.GradientDescentOptimizer(0.1), sgd_ref(f32(0.1))),
    "momentum": (lambda: af.train.MomentumOptimizer(0.1, 0.9),
                 momentum_ref(f32(0.1), f32(0.9), False)),
    "nesterov": (lambda: af.train.MomentumOptimizer(0.1, 0.9, use_nesterov=True),
                 momentum_ref(f32(0.1), f32(0.9), True)),
    "adam": (lambda: af.train.AdamOptimizer(0.05),
             adam_ref(f32(0.05), f32(0.9), f32(0.999), f32(1e-8))),
    "adagrad": (lambda: af.train.AdagradOptimizer(0.2, initial_accumulator_value=0.1),
                adagrad_ref(f32(0.2), 0.1)),  # the slot starts at float64 0.1, as TF1's
    "rmsprop": (lambda: af.train.RMSPropOptimizer(0.01, momentum=0.5),
                rmsprop_ref(f32(0.01), f32(0.9), f32(0.5), f32(1e-10), False)),
    "rmsprop_centered": (lambda: af.train.RMSPropOptimizer(0.01, decay=0.8, momentum=0.3,
                                                           epsilon=1e-6, centered=True),
                         rmsprop_ref(f32(0.01), f32(0.8), f32(0.3), f32(1e-6), True)),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_update_rule_matches_numpy_reference(case):
    make_optimizer, (new_state, step) = CASES[case]
    with af.Graph().as_default():
        w, b, loss = build_model()
        global_step = af.train.get_or_create_global_step()
        train_op = make_optimizer().minimize(loss, global_step=global_step)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            params, states = [W0.copy(), B0.copy()], [new_state(), new_state()]
            for t in range(1, 5):
                grads = numpy_grads(*params)
                params = [step(p, g, s, t) for p, g, s in zip(params, grads, states)]
                await sess.run(train_op)
                w_value, b_value, step_value = await sess.run([w, b, global_step])
                assert_close(w_value, params[0], rtol=1e-9, atol=1e-12, what=f"w after step {t}")
                assert_close(b_value, params[1], rtol=1e-9, atol=1e-12, what=f"b after step {t}")
                assert step_value == t


@pytest.mark.parametrize("make_optimizer", [
    lambda: af.train.GradientDescentOptimizer(0.1),
    lambda: af.train.MomentumOptimizer(0.05, 0.9),
    lambda: af.train.AdamOptimizer(0.1),
    lambda: af.train.AdagradOptimizer(0.5),
    lambda: af.train.RMSPropOptimizer(0.05),
])
async def test_minimize_reduces_a_quadratic_loss_in_float32(make_optimizer):
    with af.Graph().as_default():
        x = af.Variable(np.array([3.0, -2.0, 1.0], np.float32))
        target = af.constant([1.0, 2.0, 3.0])
        loss = af.reduce_sum(af.square(x - target))
        train_op = make_optimizer().minimize(loss)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            before = await sess.run(loss)
            for _ in range(30):
                await sess.run(train_op)
            after = await sess.run(loss)
    assert after < 0.5 * before


def test_slots_are_colocated_non_trainable_global_variables():
    with af.Graph().as_default():
        with af.device("/device:CPU:1"):
            w, b, loss = build_model()
        optimizer = af.train.AdamOptimizer()
        with af.name_scope("outer"), af.control_dependencies([af.no_op()]):
            optimizer.minimize(loss)
        assert optimizer.get_slot_names() == ["m", "v"]
        m, v = optimizer.get_slot(w, "m"), optimizer.get_slot(w, "v")
        assert m.name == "w/Adam:0" and v.name == "w/Adam_1:0"
        assert m.op.device == w.op.device and m.op.colocation_groups == ("w",)
        assert not m.op.control_inputs
        assert m in af.global_variables() and m not in af.trainable_variables()
        assert optimizer.get_slot(w, "nope") is None
        names = {var.op.name for var in optimizer.variables()}
        # Non-slot variables take the caller's name scope (TF1's), slots their variable's.
        assert {"outer/beta1_power", "outer/beta2_power", "b/Adam", "b/Adam_1"} <= names
        beta1_power, _ = optimizer._get_beta_accumulators(w.graph)
        assert not beta1_power.op.control_inputs


def test_var_list_filters_the_updated_variables():
    with af.Graph().as_default():
        w, b, loss = build_model()
        optimizer = af.train.MomentumOptimizer(0.1, 0.9)
        grads_and_vars = optimizer.compute_gradients(loss, var_list=[b])
        assert [v for _, v in grads_and_vars] == [b]
        optimizer.apply_gradients(grads_and_vars)
        assert optimizer.get_slot(w, "momentum") is None
        assert optimizer.get_slot(b, "momentum") is not None
        types = [op.type for op in af.get_default_graph().get_operations()]
        assert types.count("ApplyMomentum") == 1


async def test_none_gradients_are_skipped_and_all_none_is_an_error():
    with af.Graph().as_default():
        w, b, loss = build_model()
        unused = af.Variable([1.0, 2.0], name="unused")
        optimizer = af.train.GradientDescentOptimizer(1.0)
        grads_and_vars = optimizer.compute_gradients(loss)
        assert grads_and_vars[-1] == (None, unused)
        train_op = optimizer.apply_gradients(grads_and_vars)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            await sess.run(train_op)
            assert_close(await sess.run(unused), [1.0, 2.0])
        with pytest.raises(ValueError, match="No gradients provided for any variable.*unused"):
            optimizer.minimize(af.reduce_sum(w) * 0.0 + af.stop_gradient(af.reduce_sum(w)),
                               var_list=[unused])
        with pytest.raises(ValueError, match="No gradients provided"):
            optimizer.apply_gradients([(None, w), (None, b)])


def test_global_step_is_an_int64_scalar_in_its_collection():
    with af.Graph().as_default():
        assert af.train.get_global_step() is None
        with af.name_scope("somewhere"):
            step = af.train.get_or_create_global_step()
        assert step.dtype is af.int64 and step.shape.as_list() == []
        assert step.name == "global_step:0" and not step.trainable
        assert af.get_collection(af.GraphKeys.GLOBAL_STEP) == [step]
        assert step in af.global_variables()
        assert af.train.get_or_create_global_step() is step
        assert af.train.get_global_step() is step
        with pytest.raises(ValueError, match="already exists"):
            af.train.create_global_step()


async def test_step_op_names_and_learning_rate_tensor():
    with af.Graph().as_default():
        w, b, loss = build_model(af.float32)
        lr = af.placeholder_with_default(np.float32(0.5), [])
        step = af.train.get_or_create_global_step()
        train_op = af.train.GradientDescentOptimizer(lr).minimize(loss, global_step=step)
        assert train_op.name == "GradientDescent"
        assert train_op in af.get_collection(af.GraphKeys.TRAIN_OP)
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            await sess.run(train_op, {lr: np.float32(0.0)})
            assert_close(await sess.run(w), W0)
            await sess.run(train_op)
            expected = W0 - 0.5 * numpy_grads(W0, B0)[0]
            assert_close(await sess.run(w), expected, rtol=1e-5)
            assert await sess.run(step) == 2


def test_apply_ops_reject_mismatched_shapes():
    from asyncflow.ops.training import apply_update
    with af.Graph().as_default():
        w = af.Variable(np.zeros((2, 2)))
        with pytest.raises(ValueError, match="ApplyGradientDescent.*shape"):
            apply_update("ApplyGradientDescent", [w._ref()], [0.1, af.constant(np.zeros(3))])
        with pytest.raises(TypeError, match="reference"):
            apply_update("ApplyGradientDescent", [w.value()], [0.1, af.constant(np.zeros((2, 2)))])
