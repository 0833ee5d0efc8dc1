"""What a block of code leaves to the cyclic garbage collector."""
import contextlib
import gc


@contextlib.contextmanager
def cyclic_garbage():
    """Collect before, keep what the cyclic GC finds unreachable after (``gc.DEBUG_SAVEALL``,
    the GC paused in between): yields a list filled with those objects' type names."""
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
