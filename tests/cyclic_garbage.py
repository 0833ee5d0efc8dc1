"""What a block leaves for the cyclic GC: objects that only reference cycles keep alive.

A step's state (its rendezvous, runs, propagator and the values they hold) should be freed by
reference counting when the step ends; left in a cycle, it waits for a collection, which costs
the steps that trigger it and keeps the values' memory meanwhile.
"""
import contextlib
import gc

import pytest


@contextlib.contextmanager
def cyclic_garbage():
    """Collect before, pause the GC, and after the block keep what a collection finds
    unreachable (``gc.DEBUG_SAVEALL``): yields a list filled with those objects' type names."""
    found = []
    gc.collect()
    flags, enabled = gc.get_debug(), gc.isenabled()
    gc.disable()
    try:
        yield found
        gc.set_debug(flags | gc.DEBUG_SAVEALL)
        gc.collect()
        found.extend(type(o).__name__ for o in gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)
        if enabled:
            gc.enable()


async def failures_garbage(run, error_type, times=3):
    """Await ``run()``, a step that must fail with ``error_type``, ``times`` times under
    ``cyclic_garbage``: (the type names it found, the last error). The ``pytest.raises`` info
    is let go each time, so the error alone is kept."""
    with cyclic_garbage() as garbage:
        for _ in range(times):
            with pytest.raises(error_type) as caught:
                await run()
            error = caught.value
            del caught
    return garbage, error
