"""A static form's variable reads without kernel calls (``codegen.Generator.read``, issue 37):
a VariableV2's line reads the resource bound to the plan (looked up again after a reset) and
an Identity of a variable's read is the read itself; every behaviour is the kernels' own,
checked here in both forms (``codegen.BIND_VARIABLES`` on and off)."""
import gc
import weakref

import numpy as np
import pytest

import asyncflow as af
from asyncflow.exec import codegen
from asyncflow.exec.resources import process_resources

import fake_cupy
from test_generated_code import _source_of


@pytest.fixture(params=[True, False], ids=["bound", "kernels"])
def bound(request, monkeypatch):
    monkeypatch.setattr(codegen, "BIND_VARIABLES", request.param)
    return request.param


def _static_fns(sess):
    plans = [plan for compiled in sess._cache.values() for plan in compiled.plans]
    assert plans and all(plan.static for plan in plans)
    return [plan.static_fn for plan in plans]


async def test_the_reads_lines_call_no_kernel_and_give_the_kernels_values(bound, cpu_only):
    with af.Graph().as_default():
        w = af.Variable(np.arange(4.0, dtype=np.float32).reshape(2, 2), name="w")
        b = af.Variable(np.ones(2, np.float32), name="b")
        x = af.placeholder(af.float32, [None, 2], name="x")
        y = af.add(af.matmul(x, w), b, name="y")
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            feed = {x: np.eye(2, dtype=np.float32)}
            for _ in range(2):  # (the first binds, the second reads the binding back)
                np.testing.assert_array_equal(await sess.run([y, w], feed),
                                              [[[1, 2], [3, 4]], [[0, 1], [2, 3]]])
            source = "".join(_source_of(fn) for fn in _static_fns(sess))
    kernels = "F_VariableV2(" in source or "F_Identity(" in source
    assert kernels != bound
    if bound:
        assert "# w (VariableV2)" in source and "# w/read (Identity)" in source
        assert "Vr_w() if Vm_w.epoch == Ve_w else None) or V_w()" in source


async def test_an_uninitialized_variable_raises_the_same_error_at_its_reader(bound):
    with af.Graph().as_default():
        v = af.Variable(np.zeros(3, np.float32), name="never_set")
        doubled = af.multiply(v, 2.0, name="doubled")
        async with af.Session() as sess:
            with pytest.raises(af.errors.FailedPreconditionError) as info:
                await sess.run(doubled)
            with pytest.raises(af.errors.FailedPreconditionError) as again:
                await sess.run(v.read_value())
    for error in (info.value, again.value):
        assert "Attempting to use uninitialized value never_set" in str(error)
    assert info.value.op.name == "never_set/read"  # located at the reader, as the kernel's


async def test_a_reshaping_assign_is_seen_by_the_next_read_in_the_step_and_after(bound):
    """``validate_shape=False`` replaces the buffer with one of another shape: the line holds
    the resource, not its array."""
    with af.Graph().as_default():
        v = af.Variable([1.0], validate_shape=False, name="grows")
        grow = af.assign(v, [1.0, 2.0, 3.0], validate_shape=False)
        with af.control_dependencies([grow]):
            after = v.read_value()
        before = af.identity(v.value(), name="before")
        async with af.Session() as sess:
            await sess.run(v.initializer)
            assert (await sess.run(before)).tolist() == [1.0]
            assert (await sess.run(after)).tolist() == [1.0, 2.0, 3.0]
            assert (await sess.run(before)).tolist() == [1.0, 2.0, 3.0]
            await sess.run(af.assign(v, [7.0, 8.0], validate_shape=False))
            assert (await sess.run(before)).tolist() == [7.0, 8.0]


async def test_reads_around_updates_in_one_step_keep_their_order(bound):
    with af.Graph().as_default():
        v = af.Variable(10.0, name="counter")
        first = v.read_value()
        with af.control_dependencies([first]):
            bump = v.assign_add(1.0)
        with af.control_dependencies([bump]):
            second = v.read_value()
        async with af.Session() as sess:
            await sess.run(v.initializer)
            assert await sess.run([first, second]) == [10.0, 11.0]
            assert await sess.run([first, second]) == [11.0, 12.0]
            assert await sess.run(v) == 12.0


async def test_a_reset_between_steps_rebinds_and_the_plan_keeps_no_buffer(bound, cpu_only):
    """A shared variable's step after ``Session.reset``: uninitialized (the fresh resource),
    then the fresh one's values; the step's globals hold the old resource by weak reference
    only."""
    name = f"c45var_bound_{bound}"
    with af.Graph().as_default():
        v = af.Variable(np.arange(3.0, dtype=np.float32), shared_name=name)
        read = af.identity(v.read_value(), name="copy")
        async with af.Session() as sess:
            await sess.run(v.initializer)
            np.testing.assert_array_equal(await sess.run(read), [0.0, 1.0, 2.0])
            old = weakref.ref(process_resources().lookup("", name))
            await af.Session.reset()
            gc.disable()
            try:
                assert old() is None  # freed by reference counting: no line keeps it
            finally:
                gc.enable()
            with pytest.raises(af.errors.FailedPreconditionError, match="uninitialized"):
                await sess.run(read)
            await sess.run(af.assign(v, np.full(3, 5.0, np.float32)))
            np.testing.assert_array_equal(await sess.run(read), [5.0, 5.0, 5.0])
    await af.Session.reset()



async def test_a_gpu_plans_variable_lines_keep_their_kernels(bound, monkeypatch):
    """A GPU's plan wraps every kernel to run with its device current and its arguments on
    the device (``GpuDevice.bind_plan``): its variable lines keep those calls, bound or not,
    and read the assigned values."""
    fake_cupy.install(monkeypatch)
    with af.Graph().as_default():
        with af.device("/gpu:0"):
            w = af.Variable(np.ones((2, 2), np.float32), name="w")
            y = af.add(w.value(), 1.0, name="y")
            grow = af.assign(w, np.full((2, 2), 3.0, np.float32))
        async with af.Session() as sess:
            await sess.run(af.global_variables_initializer())
            np.testing.assert_array_equal(await sess.run(y), np.full((2, 2), 2.0))
            await sess.run(grow)
            np.testing.assert_array_equal(await sess.run(y), np.full((2, 2), 4.0))
            plans = [plan for compiled in sess._cache.values() for plan in compiled.plans
                     if plan.device.kind == "GPU" and plan.static_fn is not None]
            sources = [_source_of(plan.static_fn) for plan in plans]
    read = [source for source in sources if "# w/read (Identity)" in source]
    assert read and all("F_VariableV2(c_w)" in source and "F_Identity(c_w_read, " in source
                        and "V_w()" not in source for source in read)
