"""Executor bookkeeping as data: plans, frame tables, and the frame propagator driven by hand.

Nothing here runs a step through the session: the plan is compiled directly and the
frames propagator is stepped one entry at a time, so whole states can be compared.
"""
import subprocess
import sys

import numpy as np
import pytest

import asyncflow as af
from asyncflow.compile import prune
from asyncflow.ops import control_flow as cf
from asyncflow.exec import dispatch, frames
from asyncflow.exec.plan import ENTER, EXIT, MERGE, NEXT_ITERATION, NORMAL, SWITCH
from asyncflow.exec.step import Step
from asyncflow.rendezvous_keys import frame_id
from lifetimes import lifetimes_graph
from one_device import plan_of_ops


def compile_for(fetches, feeds=(), compile_loops=True):
    ops = prune.prune(list(fetches), [], list(feeds), skip_edge=cf.is_loop_back_edge)
    return dispatch.generate_forms(plan_of_ops(ops, feeds, fetches), compile_loops)


def loop_graph(limit=3, parallel_iterations=10):
    graph = af.Graph()
    with graph.as_default():
        result = af.while_loop(lambda i: i < limit, lambda i: i + 1, [af.constant(0)],
                               parallel_iterations=parallel_iterations)
    return graph, result


def by_name(plan):
    return {node.op.name: node for node in plan.nodes}


def test_plan_of_a_loop_as_data():
    _, result = loop_graph()
    plan = compile_for([result])
    assert plan.control_flow and not plan.static
    nodes = by_name(plan)
    kinds = {name: node.kind for name, node in nodes.items()}
    assert kinds == {
        "Const": NORMAL, "while/Enter": ENTER, "while/Merge": MERGE, "while/Const": NORMAL,
        "while/Less": NORMAL, "while/LoopCond": NORMAL, "while/Switch": SWITCH,
        "while/Identity": NORMAL, "while/Const_1": NORMAL, "while/add": NORMAL,
        "while/NextIteration": NEXT_ITERATION, "while/Exit": EXIT}
    merge = nodes["while/Merge"]
    assert merge.pending == 0           # a Merge waits only for control inputs
    assert merge.num_inputs == 2
    assert merge.index not in plan.roots  # and never starts on its own
    index = {name: node.index for name, node in nodes.items()}
    # The back edge is a data edge into the Merge's input 1.
    assert (0, index["while/Merge"], 1) in nodes["while/NextIteration"].out_edges
    # Switch: port 1 feeds the body, port 0 the Exit.
    assert sorted(nodes["while/Switch"].out_edges) == sorted(
        [(1, index["while/Identity"], 0), (0, index["while/Exit"], 0)])
    # Input-less body op: a control edge from the pivot (the body's first Identity).
    assert nodes["while/Identity"].control_out == (index["while/Const_1"],)
    assert nodes["while/Const_1"].pending == 1
    assert plan.enter_counts == {"while": 1}
    assert plan.fetch_names == ("while/Exit:0",)


def test_plan_without_control_flow_keeps_the_static_path():
    with af.Graph().as_default():
        x = af.placeholder(af.float32, [1])
        y = (x + 1.0) * 2.0
    plan = compile_for([y], [x])
    assert plan.static and not plan.control_flow
    assert all(node.kind == NORMAL for node in plan.nodes)


def test_frame_ids_are_stable_across_processes():
    here = frame_id(0, 3, "while/inner")
    assert here == frame_id(0, 3, "while/inner")
    assert here != frame_id(0, 4, "while/inner")
    assert here != frame_id(1, 3, "while/inner")
    code = ("from asyncflow.rendezvous_keys import frame_id; "
            "print(frame_id(0, 3, 'while/inner'))")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""})
    assert int(other.stdout) == here


def test_simple_loop_compiles_to_cond_and_body_parts():
    _, result = loop_graph()
    plan = compile_for([result])
    runner = plan.frame_tables.runners["while"]
    assert [node.op.name for node in runner.cond_part] == ["while/Less", "while/LoopCond"]
    assert [node.op.name for node in runner.body_part] == ["while/Identity", "while/add"]
    # Constants give the same value in every iteration: folded into the loop's code.
    assert [node.op.name for node in runner.constants] == ["while/Const", "while/Const_1"]
    # Run by hand from the Enter's value (resumed whenever it yields at a slice's end): the
    # Exit's value, and the iterations it took.
    exits, iterations = yield_from(runner.run({by_name(plan)["while/Enter"].index: np.int32(0)}))
    assert [(node.op.name, int(value)) for node, value in exits] == [("while/Exit", 3)]
    assert iterations == 3


def test_a_failure_inside_a_compiled_loop_names_its_op():
    with af.Graph().as_default():
        result = af.while_loop(
            lambda i: i < 3,
            lambda i: af.reshape(af.py_func(_fail, [i], af.int32, name="in_the_body"), []),
            [af.constant(0)])
    plan = compile_for([result])
    runner = plan.frame_tables.runners["while"]
    enter = next(node for node in plan.nodes if node.kind == ENTER)
    with pytest.raises(af.errors.InvalidArgumentError, match="PyFunc 'while/in_the_body'"):
        yield_from(runner.run({enter.index: np.int32(0)}))


def _fail(value):
    raise ValueError(f"boom at {value}")


def yield_from(generator):
    """The return value of ``generator``, resumed every time it yields."""
    while True:
        try:
            next(generator)
        except StopIteration as done:
            return done.value


def test_a_loop_with_a_cond_inside_is_not_compiled():
    with af.Graph().as_default():
        result = af.while_loop(
            lambda i: i < 5,
            lambda i: af.cond(af.equal(af.mod(i, 2), 0), lambda: i + 1, lambda: i + 3), [af.constant(0)])
    plan = compile_for([result])
    assert plan.frame_tables.runners == {}


class Driver:
    """Steps the frames propagator by hand: pop a ready entry, run it, complete it."""

    def __init__(self, plan):
        self.plan = plan
        self.propagator = frames.Frames(plan, [], Step(1))
        self.ready = self.propagator.ready
        self.stats = self.propagator.stats
        self.root = self.propagator.root

    def step(self):
        node, args, where = self.ready.pop()
        if node is self.propagator.dead_entry:  # the propagator's own: a dead node
            node.fn(args, where)
            return args.op.name, True
        self.propagator.complete(node, where, node.fn(node.ctx, *args))
        return node.op.name, False

    def run(self):
        trace = []
        while self.ready:
            trace.append(self.step())
        return trace


def test_dynamic_loop_bookkeeping_step_by_step():
    _, result = loop_graph(limit=2, parallel_iterations=1)
    plan = compile_for([result], compile_loops=False)
    driver = Driver(plan)
    trace = driver.run()
    # Every iteration runs the cond part; the body runs twice; the third pass exits.
    names = [name for name, dead in trace if not dead]
    assert names.count("while/Less") == 3
    assert names.count("while/add") == 2
    assert names.count("while/Exit") == 1
    dead = [name for name, dead in trace if dead]
    # Dead Exits in iterations 0 and 1; a dead body (Identity, Const_1, add, NextIteration)
    # in the last iteration, whose dead NextIteration ends the loop.
    assert sorted(dead) == sorted(["while/Exit", "while/Exit", "while/Identity",
                                   "while/Const_1", "while/add", "while/NextIteration"])
    # All loop state is gone: the frame was deleted, the root holds only the result.
    root_iteration = driver.root.iterations[0]
    assert root_iteration.frames == {}
    assert root_iteration.outstanding == 0
    exit_slot = by_name(plan)["while/Exit"].outputs[0]
    assert root_iteration.values[exit_slot] == 2
    assert driver.stats.iterations_created == 3  # iterations 0, 1 and 2 of the frame
    assert driver.propagator.live_iterations == 1


def test_window_parks_next_iteration_values():
    _, result = loop_graph(limit=5, parallel_iterations=1)
    plan = compile_for([result], compile_loops=False)
    driver = Driver(plan)
    started_from_parked = []
    new_iteration = driver.propagator._new_iteration

    def recording(frame):
        started_from_parked.append(len(frame.next_iter_roots))
        assert frame.outstanding_iterations == 0  # the previous iteration is gone
        return new_iteration(frame)
    driver.propagator._new_iteration = recording
    driver.run()
    # Every new iteration started from the parked NextIteration value, once the only
    # iteration of the window had finished.
    assert started_from_parked == [1] * 5


async def test_dead_fetch_is_invalid_argument_naming_the_tensor():
    with af.Graph().as_default():
        false_out, _ = cf.switch(af.constant(1.0), af.constant(True))
    plan = compile_for([false_out])
    with pytest.raises(af.errors.InvalidArgumentError, match="Switch:0 was not valid"):
        await dispatch.run_plan(plan, [], Step(1))


def test_the_compiled_loops_are_chosen_when_the_plan_is_built():
    _, result = loop_graph()
    assert set(compile_for([result]).frame_tables.runners) == {"while"}
    assert compile_for([result], compile_loops=False).frame_tables.runners == {}


@pytest.mark.parametrize("propagator", ["Flat", "Frames"])
async def test_the_core_frees_a_value_after_its_last_reader(propagator):
    import numpy as np

    from asyncflow.exec import core

    x, check, total = lifetimes_graph(with_cond=propagator == "Frames")
    plan = compile_for([check, total], [x])
    feeds = [np.zeros([4], np.float32)]
    if propagator == "Frames":
        assert plan.control_flow
        prop = frames.Frames(plan, feeds, Step(1))
    else:
        prop = core.Flat(plan, dispatch._slots(plan, feeds))
    checked, summed = await core.finish(core.start(plan, prop, Step(1)))
    assert summed.tolist() == [3.0] * 4
    assert checked.tolist() == [False, False]  # both buffers were gone when ``check`` ran


def test_a_failure_outside_any_kernel_is_still_one_located_op_error():
    err = af.errors.located(ValueError("bad table"), None, "/device:CPU:0")
    assert isinstance(err, af.errors.InvalidArgumentError)
    assert "on /device:CPU:0: ValueError: bad table" in err.message
    assert af.errors.located(err, None, "/device:CPU:1") is err  # located once
