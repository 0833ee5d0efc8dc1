"""Hooks (imported by ``conftest.py``) that give back the loopback ports a test reserved once
their user is done: the ports a test draws while it runs, or its function-scoped fixtures draw,
when its teardown ends; those of a wider-scoped fixture (a module's cluster) when that fixture
is torn down. Without them every port stays reserved until the pytest process exits: a
descriptor per port, thousands over a long suite, and past a quarter of the descriptor limit
the reservations fall back to keeping out this user's processes only.

A port reserved at import time, or by anything outside a fixture or a test's call, stays
reserved for the process's life, as before.
"""
import pytest

from transports import loopback_ports

_call_ports = {}  # item's nodeid -> ports its call drew
_fixture_ports = []  # (fixturedef, ports its setup drew), until that fixture is torn down


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef, request):
    before = loopback_ports.reserved()
    try:
        return (yield)
    finally:
        drawn = loopback_ports.reserved() - before
        if drawn:
            _fixture_ports.append((fixturedef, drawn))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    before = loopback_ports.reserved()
    try:
        return (yield)
    finally:
        _call_ports[item.nodeid] = loopback_ports.reserved() - before


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:  # (every fixture this item ends is finished now, its processes gone)
        done = set(_call_ports.pop(item.nodeid, ()))
        for entry in list(_fixture_ports):
            if entry[0].cached_result is None:
                _fixture_ports.remove(entry)
                done |= entry[1]
        for port in done:
            loopback_ports.release(port)
