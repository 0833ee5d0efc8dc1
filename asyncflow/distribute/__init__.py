"""``af.distribute``: where a cluster comes from (``af.distribute.cluster_resolver``)."""
from asyncflow.distribute import cluster_resolver  # noqa: F401
