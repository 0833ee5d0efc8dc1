"""The graph layer: building dataflow graphs. Pure Python; never imports trio."""
from asyncflow.graph.conversion import (  # noqa: F401
    convert_to_tensor, register_constant_builder,
)
from asyncflow.graph.graph import (  # noqa: F401
    Graph, GraphKeys, Operation, Tensor, get_default_graph, register_tensor_operators,
    reset_default_graph,
)
from asyncflow.graph.registry import (  # noqa: F401
    OpDef, get_op_def, not_differentiable, register_gradient, register_op,
)
from asyncflow.graph.shape import TensorShape, as_shape, broadcast_shapes  # noqa: F401
