"""A trio instrument installed for a block: how the cluster tests count the tasks a step
spawns (each test file keeps its own instrument class: what it counts differs)."""
import contextlib

import trio


@contextlib.contextmanager
def installed(instrument):
    """``with installed(counts) as counts:``: ``instrument`` sees the block's scheduling."""
    trio.lowlevel.add_instrument(instrument)
    try:
        yield instrument
    finally:
        trio.lowlevel.remove_instrument(instrument)
