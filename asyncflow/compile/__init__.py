"""Compiling a run: the graph-to-graph passes between a ``sess.run`` signature and its plans.

Pure Python over the user's graph (never trio, never a kernel or a device), in pipeline order:
``prune`` (the ops the fetches need), ``placement`` (a device for every op), ``node_graph``
(the rewritable compile-time copy the next passes edit), ``optimize`` (CSE, constant folding,
fusion), ``partition`` with ``partition_loops`` (one graph per device, Send/Recv on each
crossing edge, control loops for loops across devices). For a cluster the master also runs
``control_edges`` (cross-task control edges it need not carry), ``transfer_order`` (which
pulls may share one request, and the order partitions start) and ``task_graph`` (one task's
share as the graph_def it registers). ``exec/compiled_run.py`` drives the pipeline;
``docs/architecture.md`` ("One run") walks it.
"""
