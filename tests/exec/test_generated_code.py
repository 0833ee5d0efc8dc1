"""Generated step and loop functions are debuggable: their own file name in ``linecache``,
names from the ops, and ``ASYNCFLOW_DUMP_CODE`` writing their source to a directory."""
import gc
import linecache
import traceback

import numpy as np
import pytest

import asyncflow as af
from asyncflow.exec import codegen


def _source_of(fn):
    """The generated source of a step or loop function, read back through ``linecache``."""
    return "".join(linecache.getlines(fn.__code__.co_filename)) or None


def _failing_graph():
    x = af.placeholder(af.float32, [None], name="x")
    y = af.multiply(x, 2.0, name="twice")
    bad = af.reshape(y, [3], name="bad_reshape")
    return x, af.add(bad, 1.0, name="out")


async def test_a_traceback_shows_the_generated_source_with_op_names():
    with af.Graph().as_default():
        x, out = _failing_graph()
        async with af.Session() as sess:
            np.testing.assert_array_equal(await sess.run(out, {x: np.ones(3, np.float32)}),
                                          np.full(3, 3.0))
            with pytest.raises(af.errors.InvalidArgumentError) as info:
                await sess.run(out, {x: np.ones(4, np.float32)})
    text = "".join(traceback.format_exception(info.value))
    # The generated frame names its file, and the line that raised is shown with the op's
    # own names: the kernel, the node's context, and a comment naming op and type.
    assert "<asyncflow " in text and "static schedule of" in text
    assert "F_Reshape(c_bad_reshape, " in text
    assert "# bad_reshape (Reshape)" in text


async def test_each_function_has_its_own_file_dropped_with_it():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [2], name="x")
        first, second = af.add(x, 1.0, name="first"), af.multiply(x, 3.0, name="second")
        async with af.Session() as sess:
            await sess.run(first, {x: np.zeros(2, np.float32)})
            await sess.run(second, {x: np.zeros(2, np.float32)})
            fns = [compiled.plans[0].static_fn for compiled in sess._cache.values()]
    names = {fn.__code__.co_filename for fn in fns}
    assert len(names) == len(fns) == 2
    for fn in fns:
        source = _source_of(fn)
        assert source.startswith("async def _step(") and linecache.getlines(
            fn.__code__.co_filename)
    assert "F_Add(c_first, " in "".join(_source_of(fn) for fn in fns)
    del fns, fn, sess
    gc.collect()
    assert not any(name in linecache.cache for name in names)


async def test_dump_switch_writes_step_and_loop_sources(tmp_path, monkeypatch):
    monkeypatch.setenv(codegen.DUMP_ENV, str(tmp_path / "code"))
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [], name="x")
        y = af.multiply(x, 2.0, name="double_it")
        i, total = af.while_loop(lambda i, t: i < 5, lambda i, t: (i + 1, t + 2.0),
                                 [af.constant(0), af.constant(0.0)], name="counting")
        async with af.Session() as sess:
            assert await sess.run(y, {x: 2.0}) == 4.0
            assert await sess.run(total) == 10.0
            dumped = sorted((tmp_path / "code").glob("*.py"))
            step_fn = next(c.plans[0].static_fn for c in sess._cache.values()
                           if c.plans[0].static_fn is not None)
            texts = [path.read_text() for path in dumped]
            assert any("F_Mul(c_double_it, " in text for text in texts)
            assert any("while True:" in text and "# counting/" in text for text in texts)
            # A dumped function's file name is the real file: any tool can open it.
            assert step_fn.__code__.co_filename in {str(path) for path in dumped}
