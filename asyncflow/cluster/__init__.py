"""asyncflow's cluster: specs, the master, the worker service, servers and channels.

Modules, lowest first: ``spec`` (ClusterSpec, ASYNCFLOW_CONFIG), ``remote_rendezvous`` (a
worker's per-step rendezvous that pulls remote tensors), ``status`` (a task's live status and
the cluster view; ``status_page`` serves it, ``status_cli`` prints it), ``worker`` (the worker
service behind every transport), ``channels`` (address -> transports Channel), ``master``
(compiles a run for a cluster and drives its steps, with ``step_monitor``),
``cluster_target`` (a Session's target on a cluster), ``server`` (``af.Server``). The
resolvers that find a cluster are TF's public ``asyncflow/distribute/``.
``docs/distributed.md`` tells the story; ``docs/protocol.md`` the wire.
"""
from asyncflow.cluster.spec import ClusterSpec  # noqa: F401
from asyncflow.cluster.server import Server  # noqa: F401
