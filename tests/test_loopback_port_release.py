"""Reserved loopback ports are given back when their user is done with them, not held for the
process's life: a long suite (or a benchmark that starts one cluster per model) draws thousands
of ports, each reservation a descriptor, and past a quarter of the descriptor limit the names
run out and reservations quietly keep out this user's processes only."""
import os
import subprocess
import sys

import pytest

import transports.loopback_ports as ports

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def local_cluster(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(_ROOT, "demos"))
    from local_cluster import local_cluster
    return local_cluster


def test_a_demo_cluster_gives_its_ports_back_when_it_ends(local_cluster):
    # A real worker binds its TCP port while this process holds the port's reservation (an
    # abstract Unix name: another namespace), and the reservation ends with the cluster.
    with local_cluster({"worker": 1}) as spec:
        port = int(spec["worker"][0].rsplit(":", 1)[1])
        assert port in ports.reserved()
        assert not ports.bindable(port)  # the worker listens on it
    assert port not in ports.reserved()
    assert ports.reserve(port)  # free for anyone again
    ports.release(port)
