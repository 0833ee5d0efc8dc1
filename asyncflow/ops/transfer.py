"""Transfer ops: ``_Send`` and ``_Recv``, inserted by the partitioner on cross-device edges.

Users never build these; ``compile/partition.py`` does, one Send per crossing edge on the
producer's device and one Recv per (tensor, destination device) on the consumer's side.
Both carry the same attrs, from which the kernels build the rendezvous key:

- ``tensor_name``: unique name of the edge (``edge_<id>_<producer>_<slot>``),
- ``send_device``, ``send_device_incarnation``, ``recv_device``: full device names and the
  sender's incarnation,
- ``client_terminated``: False (reserved for client feeds/fetches, as in TF),
- ``compress``: ``""``, ``"truncate"`` or ``"round"``: float32 travels as bfloat16 bits.

The Recv also records the value's ``dtype`` and static ``shape`` so shape inference of its
consumers in a partition matches the original graph. Both ops are stateful (never CSE'd,
folded or pruned as pure) and not differentiable.
"""
from __future__ import annotations

from asyncflow.graph import not_differentiable, register_op

COMPRESSION_MODES = ("", "truncate", "round")


def _infer_send(op):
    return []


def _infer_recv(op):
    return [(op.get_attr("dtype"), op.get_attr("shape"))]


register_op("_Send", infer=_infer_send, stateful=True)
register_op("_Recv", infer=_infer_recv, stateful=True)
not_differentiable("_Send", "_Recv")
