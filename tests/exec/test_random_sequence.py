"""A seeded stateful random op keeps one sequence per session, whichever fetches run it (TF1:
its kernel, and the generator in it, lives once per op and session): a run of other fetches
continues the sequence, never starts it over; a new session starts it over."""
from __future__ import annotations

import numpy as np

import asyncflow as af
from asyncflow.exec.resources import ResourceManager


def _graph():
    graph = af.Graph()
    with graph.as_default():
        af.set_random_seed(7)
        u = af.random_uniform([4], name="u")
        v = af.random_normal([3], name="v")
        w = af.nn.dropout(af.ones([64]), keep_prob=0.5, name="w")
    return graph, u, v, w


async def _draws(fetch_lists):
    graph, u, v, w = _graph()
    ops = {"u": u, "v": v, "w": w}
    async with af.Session(graph=graph) as sess:
        return [await sess.run([ops[name] for name in names]) for names in fetch_lists]


async def test_a_run_of_other_fetches_continues_the_sequence():
    alone = await _draws([["u"], ["u"], ["u"]])
    mixed = await _draws([["u", "v"], ["u"], ["v", "u", "w"]])
    for step in range(3):
        np.testing.assert_array_equal(mixed[step][0 if step < 2 else 1], alone[step][0])
    assert not np.array_equal(alone[0][0], alone[1][0])


async def test_each_op_keeps_its_own_sequence_and_a_new_session_starts_over():
    first = await _draws([["v"], ["u", "v"], ["w"], ["w", "v"]])
    again = await _draws([["v"], ["u", "v"], ["w"], ["w", "v"]])
    for a, b in zip(first, again):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    v_alone = await _draws([["v"], ["v"], ["v"]])
    np.testing.assert_array_equal(first[1][1], v_alone[1][0])  # u's draws took none of v's
    np.testing.assert_array_equal(first[3][1], v_alone[2][0])
    w_alone = await _draws([["w"], ["w"]])
    np.testing.assert_array_equal(first[3][0], w_alone[1][0])  # dropout's mask too


def test_a_workers_session_keeps_its_generators_until_its_last_graph_goes():
    resources = ResourceManager(local=False)
    key = ("u", 7, 3)
    assert resources.random_generator(key, np.random.default_rng, "s1") is not \
        resources.random_generator(key, np.random.default_rng, "s1")  # no graph: kept nowhere
    resources.open_session("s1")
    resources.open_session("s1")  # a second signature's graph (or one registered again)
    resources.open_session("s2")
    first = resources.random_generator(key, np.random.default_rng, "s1")
    assert resources.random_generator(key, np.random.default_rng, "s1") is first
    assert resources.random_generator(key, np.random.default_rng, "s2") is not first
    resources.release_session("s1")  # one of its graphs expired: the other still runs it
    assert resources.random_generator(key, np.random.default_rng, "s1") is first
    resources.release_session("s1")
    assert resources.sessions_with_generators() == ["s2"]
    resources.release_all_sessions()
    assert resources.sessions_with_generators() == []
