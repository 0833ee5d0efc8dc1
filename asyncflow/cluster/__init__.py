"""asyncflow's distributed runtime: clusters, worker services, the master, servers.

Modules, lowest first: ``cluster`` (ClusterSpec, ASYNCFLOW_CONFIG), ``rendezvous`` (a worker's
per-step rendezvous that pulls remote tensors), ``worker`` (the worker service behind every
transport), ``channels`` (address -> transports Channel), ``master`` (compiles a run for a
cluster and drives its steps), ``server`` (``af.Server``). ``docs/distributed.md`` tells the
story; ``docs/protocol.md`` the wire.
"""
from asyncflow.cluster.spec import ClusterSpec  # noqa: F401
from asyncflow.cluster.server import Server  # noqa: F401
