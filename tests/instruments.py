"""Probes for the tests that count what a step does (tasks spawned, task steps run): a trio
instrument installed for a block, and one long time slice so that a loaded machine never
makes a drain yield mid-count. Each test file keeps its own instrument class (what it counts
differs); ``tests/exec`` and ``tests/cluster`` share these two."""
import contextlib

import pytest
import trio

from asyncflow.exec import timeslice


@contextlib.contextmanager
def installed(instrument):
    """``with installed(counts) as counts:``: ``instrument`` sees the block's scheduling."""
    trio.lowlevel.add_instrument(instrument)
    try:
        yield instrument
    finally:
        trio.lowlevel.remove_instrument(instrument)


@pytest.fixture
def long_time_slice(monkeypatch):
    """One time slice of an hour: steps that count tasks or task steps to pin the inline
    paths never yield because a loaded machine made them cross a 1 ms slice (import it, and
    ``pytest.mark.usefixtures("long_time_slice")``)."""
    monkeypatch.setattr(timeslice, "TIME_SLICE_S", 3600.0)
    timeslice.restart()
    yield
    timeslice.restart()
