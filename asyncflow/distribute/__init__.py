"""``af.distribute``: where a cluster comes from, and how its job ends.

- ``af.distribute.cluster_resolver``: TF_CONFIG, Slurm and Kubernetes resolvers.
- ``await af.distribute.shutdown_cluster(cluster, jobs=["ps"])``: the chief's "job done" signal;
  each task (started with a token) stops serving and its process exits.
"""
from asyncflow.distribute import cluster_resolver  # noqa: F401
from asyncflow.cluster.server import shutdown_cluster  # noqa: F401
