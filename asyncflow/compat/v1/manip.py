"""``tf.manip`` of ``asyncflow.compat.v1``: TF1's deprecated namespace of array manipulations,
the same builders as ``tf.roll``, ``tf.reshape``, ... (``tf.manip.roll`` is how TF 1.6-1.12
programs spelled ``tf.roll``)."""
from asyncflow.ops.array import reshape  # noqa: F401
from asyncflow.ops.indexing import gather_nd  # noqa: F401
from asyncflow.ops.layout import reverse  # noqa: F401
from asyncflow.ops.roll import roll  # noqa: F401
from asyncflow.ops.scatter_nd import scatter_nd  # noqa: F401
from asyncflow.ops.space_batch import batch_to_space_nd, space_to_batch_nd  # noqa: F401
from asyncflow.ops.tiling import tile  # noqa: F401
