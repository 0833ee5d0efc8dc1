"""A graph that reports whether two values were still alive when their last reader had run."""
import gc
import weakref

import numpy as np

import asyncflow as af


def lifetimes_graph(with_cond=False):
    """``(x, check, total)``: ``check`` is ``[first alive, second alive]`` once ``total``,
    the last reader of both, has run; ``with_cond`` puts a cond around ``total`` (a plan with
    control flow)."""
    made = {}

    def make(tag):
        def produce(x):
            array = np.full([4], float(tag), np.float32)
            made[tag] = weakref.ref(array)
            return array
        return produce

    def alive(x):
        gc.collect()
        return np.asarray([made[tag]() is not None for tag in (1, 2)])

    with af.Graph().as_default():
        x = af.placeholder(af.float32, [4], name="x")
        first = af.py_func(make(1), [x], af.float32)
        second = af.py_func(make(2), [x], af.float32)
        total = first + second  # the last reader of both
        if with_cond:
            total = af.cond(af.constant(True), lambda: total * 1.0, lambda: total * 2.0)
        check = af.py_func(alive, [total], af.bool)
    return x, check, total
