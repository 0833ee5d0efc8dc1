"""Compile pruned ops into one CPU plan, as the compiler does for a single-device run: the
ops become the compile-time nodes (``compile/node_graph.py``) that ``compile_plan`` reads."""
from asyncflow.compile.node_graph import NodeGraph
from asyncflow.exec.devices import make_local_devices
from asyncflow.exec.plan import compile_plan
from asyncflow.exec.resources import ResourceManager


def plan_of_ops(ops, feeds, fetches):
    """The ExecutionPlan of ``ops`` (topological) on this process's first CPU device."""
    device = make_local_devices()[0]
    nodes = NodeGraph.from_ops(ops, list(feeds), list(fetches), [],
                               {op: device.name for op in ops})
    return compile_plan(nodes.nodes, nodes.feeds, nodes.fetches, device,
                        ResourceManager(local=True))
