"""A convolution's input spectra kept from its forward for its backprop (a compile pass,
issue 37).

Theory of operation: by FFT (kernels/nn_conv_fft.py) a convolution's forward transforms its
input ``x`` (one 2-D transform per image and channel) and its fused backprop
(``_FusedConv2DBackprop``: both gradients on one output gradient) transforms the same ``x``
again for the filter gradient: 2.9 ms of CPU a step for the convnet's second layer
([128, 14, 14, 32]). ``share_conv_spectra`` has the forward keep them: where a
``_FusedConv2D`` and a ``_FusedConv2DBackprop`` read the very same ``x`` and filter tensors
with equal ``strides``/``padding``/``dilations``/``data_format``, on one device, outside any
loop, the forward becomes ``_FusedConv2DWithSpectra`` (its output, bit for bit, and the
spectra as real floats, with the filter's spectrum as the forward's GEMMs take it; an empty
array where the direct kernel ran) and the backprop ``_FusedConv2DBackpropWithSpectra``,
which uses them where the FFT algorithm runs there too and they fit its plan (the same input,
shapes and attrs give the same plan: the filter's matrix transposed, not transformed again,
1.8 ms of CPU a step), and transforms ``x`` and the filter itself otherwise: the same
transforms of the same values, so the same bits. The spectra live from the forward to the
backprop (4.7 MB for that layer at batch 128, and 4.7 MB for its filter's).

The forward keeps its name, inputs, control inputs and consumers (they read output 0 as
before); fetches and targets of either node move to its replacement. One backprop per
forward (a second one transforms ``x`` itself).

Pure data: no trio, no kernels.
"""
from __future__ import annotations

from asyncflow.compile.node_graph import Node, swap_nodes, topological
from asyncflow.graph.registry import get_op_def
from asyncflow.graph.shape import TensorShape

_CONV_ATTRS = ("strides", "padding", "dilations", "data_format", "explicit_paddings")


def _pairable(forward, backprop):
    return (forward.device == backprop.device and forward.control_flow_context is None
            and backprop.control_flow_context is None
            and all(forward.attrs.get(key) == backprop.attrs.get(key) for key in _CONV_ATTRS))


def share_conv_spectra(graph):
    """Pair ``_FusedConv2D`` with its ``_FusedConv2DBackprop`` (module docstring). ``graph``
    is rewired in place (pass a pass's own copy); returns it."""
    forwards = {}
    for node in graph.nodes:
        if node.type == "_FusedConv2D":
            forwards.setdefault((node.inputs[0], node.inputs[1]), node)
    replaced = {}
    for node in graph.nodes:
        if node.type != "_FusedConv2DBackprop":
            continue
        forward = forwards.get((node.inputs[3], node.inputs[1]))
        if forward is None or forward in replaced or not _pairable(forward, node):
            continue
        out_spec = forward.out_specs[0]
        keeping = Node(forward.name, "_FusedConv2DWithSpectra",
                       get_op_def("_FusedConv2DWithSpectra"), dict(forward.attrs),
                       forward.inputs, forward.control_inputs, forward.device,
                       (out_spec, (out_spec[0], TensorShape(None), False)), forward.traceback,
                       forward.seq, origin=forward.origin,
                       requested_device=forward.requested_device)
        keeping.colocation_groups = forward.colocation_groups
        using = Node(node.name, "_FusedConv2DBackpropWithSpectra",
                     get_op_def("_FusedConv2DBackpropWithSpectra"), dict(node.attrs),
                     list(node.inputs) + [(keeping, 1)], node.control_inputs, node.device,
                     node.out_specs, node.traceback, node.seq, origin=node.origin,
                     requested_device=node.requested_device)
        using.colocation_groups = node.colocation_groups
        replaced[forward], replaced[node] = keeping, using
    if not replaced:
        return graph
    graph.nodes = topological(swap_nodes(graph, replaced))
    graph.changed = True
    return graph
