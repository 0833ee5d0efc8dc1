"""Every in-place apply kernel is one update with respect to a Ctrl-C, split or not
(``kernels/sigint_hold.py``): a SIGINT delivered between two of its passes, or between the
assign of a slot and the variable's, goes up only after the variable and every slot hold the
whole step's values, the same bits as an uninterrupted apply. With the hold off
(``sigint_hold.hold`` taking none: the behaviour before) the same SIGINT leaves a slot stepped
and the variable not: each test shows the defect it pins.

The forms: the numpy passes updating the stored arrays in place (one block, not split); the
applies that write new arrays (a reader holds the values: the compiled loops' copies, the
numpy form's new arrays, the sparse applies' private copies, FTRL, Adadelta, the proximal
and dual-averaging rules) and assign them one after the other; the grouped RMSProp applies
(``_FusedApplyRMSPropGroup``) between two members; the fused weight gradient and apply; a
pair's group of applies (``exec/pairs.run_group``) whose second side no worker took."""
from __future__ import annotations

import _thread
import threading
import types

import numpy as np
import pytest

from asyncflow.exec import pairs
from asyncflow.exec.resources import VariableResource
from asyncflow.kernels import jit, matmul_apply, sigint_hold, training
from asyncflow.kernels.registry import ANY, get_kernel

from apply_context import ApplyContext, resources  # same folder

SIZE = 20000  # float32: past SMALL_BYTES (in place when nothing else holds it), one block
ROWS, COLUMNS = 50, 4  # a sparse variable's


@pytest.fixture(params=[True, False], ids=["held", "before"])
def held(request, monkeypatch):
    """True: the tree as it is; False: no hold taken anywhere (the behaviour before)."""
    if not request.param:
        monkeypatch.setattr(sigint_hold, "hold", lambda: None)
    return request.param


class Variable(VariableResource):
    """A variable whose next ``assign`` after ``arm()`` interrupts the main thread as a
    Ctrl-C would (SIGINT's handler runs at the next bytecode)."""

    armed = False

    def arm(self):
        self.armed = True

    def assign(self, *args, **kwargs):
        value = super().assign(*args, **kwargs)
        if self.armed:
            self.armed = False
            _thread.interrupt_main()
        return value


def variables(values):
    return resources(values, Variable)


def s(value):
    return np.float32(value)


HYPER = (s(0.01), s(0.9), s(0.5), s(1e-6))  # RMSProp's lr, rho, momentum, epsilon
# op type -> (slots, the kernel's arguments after ``ctx`` from the variables, the gradient and
# the indices (sparse) or None (dense))
KERNELS = {
    "ApplyMomentum": (1, lambda r, g, i: (*r, s(0.1), g, s(0.9))),
    "ApplyAdam": (2, lambda r, g, i: (*r, s(0.5), s(0.25), s(0.01), s(0.9), s(0.999), s(1e-7),
                                      g)),
    "ApplyAdagrad": (1, lambda r, g, i: (*r, s(0.1), g)),
    "ApplyRMSProp": (2, lambda r, g, i: (*r, s(0.01), s(0.9), s(0.5), s(1e-6), g)),
    "ApplyCenteredRMSProp": (3, lambda r, g, i: (*r, s(0.01), s(0.9), s(0.5), s(1e-6), g)),
    "ApplyFtrlV2": (2, lambda r, g, i: (*r, g, s(0.1), s(0.01), s(0.02), s(0.0), s(-0.5))),
    "ApplyAdadelta": (2, lambda r, g, i: (*r, s(1.0), s(0.95), s(1e-6), g)),
    "ApplyProximalAdagrad": (1, lambda r, g, i: (*r, s(0.1), s(0.01), s(0.02), g)),
    "ApplyAdagradDA": (2, lambda r, g, i: (*r, g, s(0.1), s(0.01), s(0.02), np.int64(3))),
    "SparseApplyMomentum": (1, lambda r, g, i: (*r, s(0.1), g, i, s(0.9))),
    "SparseApplyAdam": (2, lambda r, g, i: (*r, s(0.5), s(0.25), s(0.01), s(0.9), s(0.999),
                                            s(1e-7), g, i)),
    "SparseApplyAdagrad": (1, lambda r, g, i: (*r, s(0.1), g, i)),
    "SparseApplyRMSProp": (2, lambda r, g, i: (*r, s(0.01), s(0.9), s(0.5), s(1e-6), g, i)),
    "SparseApplyCenteredRMSProp": (3, lambda r, g, i: (*r, s(0.01), s(0.9), s(0.5), s(1e-6),
                                                       g, i)),
    "SparseApplyFtrlV2": (2, lambda r, g, i: (*r, g, i, s(0.1), s(0.01), s(0.02), s(0.0),
                                              s(-0.5))),
    "SparseApplyAdadelta": (2, lambda r, g, i: (*r, s(1.0), s(0.95), s(1e-6), g, i)),
    "SparseApplyProximalAdagrad": (1, lambda r, g, i: (*r, s(0.1), s(0.01), s(0.02), g, i)),
    "SparseApplyAdagradDA": (2, lambda r, g, i: (*r, g, i, s(0.1), s(0.01), s(0.02),
                                                 np.int64(3))),
}


def initial(rng, op_type, slots):
    """The variable's and slots' values (slots positive: accumulators), the gradient and the
    indices (None for a dense apply)."""
    sparse = op_type.startswith("Sparse")
    shape = (ROWS, COLUMNS) if sparse else (SIZE,)
    values = [rng.standard_normal(shape).astype(np.float32)]
    values += [(np.abs(rng.standard_normal(shape)) + 1).astype(np.float32)
               for _ in range(slots)]
    if "Centered" in op_type:  # (mg small: ms - mg^2 stays positive)
        values[1] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    if not sparse:
        return values, rng.standard_normal(shape).astype(np.float32), None
    indices = np.array([3, 17, 3, 40, 9], np.int64)
    grad = rng.standard_normal((len(indices), COLUMNS)).astype(np.float32)
    return values, grad, indices


def assert_whole(refs, expected):
    for ref, want in zip(refs, expected):
        assert ref.read().tobytes() == want.tobytes(), ref.name


def expected_values(kernel, ctx, op_type, values, grad, indices):
    refs = variables(values)
    kernel(ctx, *KERNELS[op_type][1](refs, grad, indices))
    return [ref.read().copy() for ref in refs]


@pytest.mark.parametrize("compiled", [True, False], ids=["jit", "numpy"])
@pytest.mark.parametrize("op_type", sorted(KERNELS))
def test_a_ctrl_c_between_an_apply_s_assigns_waits_for_the_variable_s(
        op_type, compiled, held, main_thread, monkeypatch):
    """A reader holds every value, so each apply writes new arrays (the compiled loops on
    copies) and assigns the slots before the variable: the SIGINT lands after the first
    slot's assign."""
    if compiled and not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    monkeypatch.setattr(jit, "ENABLED", compiled)
    slots, arguments = KERNELS[op_type]
    kernel = get_kernel(op_type, ANY).fn  # (the registry's, as the executor calls it)
    values, grad, indices = initial(np.random.default_rng(3), op_type, slots)
    ctx = ApplyContext(1)
    expected = expected_values(kernel, ctx, op_type, values, grad, indices)
    refs = variables(values)
    readers = [ref.read() for ref in refs]  # noqa: F841 -- held: no array reused in place
    refs[1].arm()
    with pytest.raises(KeyboardInterrupt):
        kernel(ctx, *arguments(refs, grad, indices))
    if held:
        assert_whole(refs, expected)
    else:  # the first slot stepped, the variable not
        assert refs[1].read().tobytes() == expected[1].tobytes()
        assert refs[0].read().tobytes() == values[0].tobytes()


class InterruptingNumpy:
    """numpy as ``ctx.xp``, whose ``at``th call writing into an ``out=`` array (a pass of an
    apply's update) interrupts the main thread after it as a Ctrl-C would."""

    def __init__(self, at):
        self._at, self._calls = at, 0

    def __getattr__(self, name):
        function = getattr(np, name)
        if not callable(function) or isinstance(function, type):
            return function

        def call(*args, **kwargs):
            result = function(*args, **kwargs)
            if "out" in kwargs:
                self._calls += 1
                if self._calls == self._at:
                    _thread.interrupt_main()
            return result
        return call


@pytest.mark.parametrize("op_type", ["ApplyMomentum", "ApplyAdam", "ApplyAdagrad",
                                     "ApplyRMSProp", "ApplyCenteredRMSProp"])
def test_a_ctrl_c_between_an_in_place_apply_s_passes_waits_for_the_last(
        op_type, held, main_thread, monkeypatch):
    """The numpy form updating the stored arrays in place, one block, not split: the SIGINT
    lands after the second pass (a slot written: accum, m or ms)."""
    monkeypatch.setattr(jit, "ENABLED", False)
    slots, arguments = KERNELS[op_type]
    kernel = get_kernel(op_type, ANY).fn
    values, grad, _ = initial(np.random.default_rng(4), op_type, slots)
    expected = expected_values(kernel, ApplyContext(1), op_type, values, grad, None)
    ctx = ApplyContext(1)
    ctx.xp = InterruptingNumpy(at=2)
    refs = variables(values)
    stored = [id(ref.read()) for ref in refs]
    with pytest.raises(KeyboardInterrupt):
        kernel(ctx, *arguments(refs, grad, None))
    assert [id(ref.read()) for ref in refs] == stored  # (updated in place)
    if held:
        assert_whole(refs, expected)
        assert all(ref.writer is None for ref in refs)  # (every one assigned)
    else:  # a slot (m, accum, ms) written, the variable not
        assert refs[0].read().tobytes() == values[0].tobytes()
        assert any(ref.read().tobytes() != before.tobytes()
                   for ref, before in zip(refs[1:], values[1:]))


@pytest.mark.parametrize("by_rows", [True, False], ids=["fused", "unfused"])
def test_a_ctrl_c_in_a_fused_weight_gradient_apply_waits_for_the_variable_s(
        by_rows, held, main_thread, monkeypatch):
    """``_FusedMatMulApplyRMSProp`` not split (its fused loop, or the two kernels it falls
    back to), a reader holding the values: the SIGINT lands after the first slot's assign."""
    if not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    monkeypatch.setattr(matmul_apply, "_by_rows", lambda a, b: by_rows)
    kernel = get_kernel("_FusedMatMulApplyRMSProp", ANY).fn
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((16, 8)), rng.standard_normal((8, 12))
    values = [rng.standard_normal((16, 12))] + [np.abs(rng.standard_normal((16, 12))) + 1
                                                for _ in range(2)]
    ctx = ApplyContext(1)
    ctx.attrs = {"transpose_a": False, "transpose_b": False}
    hyper = [np.float64(h) for h in HYPER]
    refs = variables(values)
    kernel(ctx, *refs, *hyper, a, b)
    expected = [ref.read().copy() for ref in refs]
    refs = variables(values)
    readers = [ref.read() for ref in refs]  # noqa: F841 -- copies, assigned one by one
    refs[1].arm()
    with pytest.raises(KeyboardInterrupt):
        kernel(ctx, *refs, *hyper, a, b)
    if held:
        assert_whole(refs, expected)
    else:
        assert refs[1].read().tobytes() == expected[1].tobytes()
        assert refs[0].read().tobytes() == values[0].tobytes()


def rms_prop_members(rng, count, size):
    members = [initial(rng, "ApplyRMSProp", 2) for _ in range(count)]
    for values, _, _ in members:
        for index in range(len(values)):
            values[index] = values[index][:size].copy()
    return [(values, grad[:size].copy()) for values, grad, _ in members]


@pytest.mark.parametrize("compiled", [True, False], ids=["jit", "numpy"])
def test_a_ctrl_c_in_a_group_of_applies_waits_for_every_member(
        compiled, held, main_thread, monkeypatch):
    """``_FusedApplyRMSPropGroup`` of three members: the SIGINT lands in the first member
    (after its compiled loop, or its first assign in the numpy form)."""
    if compiled and not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    monkeypatch.setattr(jit, "ENABLED", compiled)
    kernel = get_kernel("_FusedApplyRMSPropGroup", ANY).fn
    members = rms_prop_members(np.random.default_rng(5), 3, 3000)
    ctx = ApplyContext(1)

    def run(interrupt):
        refs = [variables(values) for values, _ in members]
        inputs = [x for (_, grad), r in zip(members, refs) for x in (*r, grad)]
        if interrupt:
            if compiled:
                original = training.rms_prop_loop

                def loop(*args):
                    monkeypatch.setattr(training, "rms_prop_loop", original)
                    original(*args)
                    _thread.interrupt_main()
                monkeypatch.setattr(training, "rms_prop_loop", loop)
            else:
                refs[0][1].arm()
            with pytest.raises(KeyboardInterrupt):
                kernel(ctx, *HYPER, *inputs)
        else:
            kernel(ctx, *HYPER, *inputs)
        return refs
    expected = [[ref.read().copy() for ref in refs] for refs in run(False)]
    got = run(True)
    if held:
        for refs, want in zip(got, expected):
            assert_whole(refs, want)
    else:  # the first member (or its slot) applied, the last not
        assert got[0][1].read().tobytes() == expected[0][1].tobytes()
        assert got[2][0].read().tobytes() == members[2][0][0].tobytes()


def test_a_ctrl_c_in_a_pair_s_first_apply_waits_for_the_side_handed_back(
        held, main_thread, monkeypatch):
    """``pairs.run_group`` with the pool's one worker busy: the second side is not taken by
    a worker, so the caller runs it (inside the hold) once the first apply ended; the SIGINT
    lands in the first apply, between its slots' assigns and the variable's."""
    monkeypatch.setattr(jit, "ENABLED", False)
    kernel = get_kernel("ApplyRMSProp", ANY).fn
    members = rms_prop_members(np.random.default_rng(6), 3, SIZE)
    ctx = ApplyContext(2)
    refs = [variables(values) for values, _ in members]
    readers = [ref.read() for r in refs for ref in r]  # noqa: F841 -- new arrays, assigns
    nodes = [types.SimpleNamespace(ctx=ctx, fn=kernel) for _ in members]
    args = [[*r, *HYPER, grad] for r, (_, grad) in zip(refs, members)]
    expected = [expected_values(kernel, ctx, "ApplyRMSProp", values, grad, None)
                for values, grad in members]
    busy, release = threading.Event(), threading.Event()
    ctx.device.intra_op._workers().submit(lambda: (busy.set(), release.wait(30)))
    assert busy.wait(30)
    refs[0][1].arm()
    try:
        with pytest.raises(KeyboardInterrupt):
            pairs.run_group(nodes[0], args[0], list(zip(nodes[1:], args[1:])))
    finally:
        release.set()
    if held:
        for r, want in zip(refs, expected):
            assert_whole(r, want)
    else:  # the first apply's slot stepped; its variable and the other side not
        assert refs[0][1].read().tobytes() == expected[0][1].tobytes()
        for r, (values, _) in zip(refs, members):
            assert r[0].read().tobytes() == values[0].tobytes()


def test_a_pair_s_side_no_worker_took_is_handed_back_without_a_ctrl_c(monkeypatch):
    """Uninterrupted: the side no worker took is handed back undone (its own line runs it,
    after a slice check: the loop is not held for both sides), the first applied."""
    monkeypatch.setattr(jit, "ENABLED", False)
    kernel = get_kernel("ApplyRMSProp", ANY).fn
    members = rms_prop_members(np.random.default_rng(7), 2, SIZE)
    ctx = ApplyContext(2)
    refs = [variables(values) for values, _ in members]
    nodes = [types.SimpleNamespace(ctx=ctx, fn=kernel) for _ in members]
    args = [[*r, *HYPER, grad] for r, (_, grad) in zip(refs, members)]
    busy, release = threading.Event(), threading.Event()
    ctx.device.intra_op._workers().submit(lambda: (busy.set(), release.wait(30)))
    assert busy.wait(30)
    try:
        results = pairs.run_group(nodes[0], args[0], [(nodes[1], args[1])])
    finally:
        release.set()
    assert pairs.done(results, 0) and not pairs.done(results, 1)
    want = expected_values(kernel, ctx, "ApplyRMSProp", *members[0], None)
    assert_whole(refs[0], want)
    for ref, value in zip(refs[1], members[1][0]):  # the second not stepped here
        assert ref.read().tobytes() == value.tobytes()


async def test_a_step_interrupted_in_its_group_of_applies_steps_every_member(
        held, main_thread, monkeypatch, cpu_only):
    """Through a session: the SIGINT lands in the first member of the step's
    ``_FusedApplyRMSPropGroup`` (a bias's compiled loop) in the second step; the step raises
    it, and every member's variable and slots hold the second step's values, as two
    uninterrupted steps give (before: the members after the first not stepped)."""
    if not jit.available():
        pytest.skip("numba is not installed (or ASYNCFLOW_JIT=0)")
    import asyncflow as af
    rng = np.random.default_rng(9)
    images, labels = rng.random((32, 20)), rng.random((32, 3))

    async def two_steps(interrupt):
        with af.Graph().as_default():
            x, y = af.placeholder(np.float64, [None, 20]), af.placeholder(np.float64, [None, 3])
            h, members = x, []
            for i, (n_in, n_out) in enumerate(((20, 7), (7, 5), (5, 3))):
                w = af.Variable(np.random.default_rng(i).standard_normal((n_in, n_out)) * 0.3,
                                name=f"w{i}")
                b = af.Variable(np.full(n_out, 0.1), name=f"b{i}")
                h = af.matmul(h, w) + b
                members += [b] if i == 0 else [w, b]
            loss = af.reduce_mean(af.square(h - y))
            train = af.train.RMSPropOptimizer(0.01, momentum=0.5).minimize(loss)
            names = {v.op.name for v in members}
            grouped = [v for v in af.global_variables() if v.op.name.split("/")[0] in names]
            async with af.Session() as session:
                await session.run(af.global_variables_initializer())
                await session.run(train, {x: images, y: labels})
                if interrupt:
                    original = training.rms_prop_loop

                    def loop(xs, *args):
                        original(xs, *args)
                        if xs.size == 7:  # b0's: the group's first member
                            monkeypatch.setattr(training, "rms_prop_loop", original)
                            _thread.interrupt_main()
                    monkeypatch.setattr(training, "rms_prop_loop", loop)
                    with pytest.raises(KeyboardInterrupt):
                        await session.run(train, {x: images, y: labels})
                else:
                    await session.run(train, {x: images, y: labels})
                return [np.asarray(v) for v in await session.run(grouped)]
    expected = await two_steps(False)
    got = await two_steps(True)
    assert len(got) == 3 * 5  # (five members, each with its two slots)
    same = [a.tobytes() == b.tobytes() for a, b in zip(got, expected)]
    assert all(same) if held else not all(same)
