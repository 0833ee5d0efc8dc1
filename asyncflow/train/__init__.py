"""``af.train``: optimizers, checkpoints (Saver) and meta graphs, as in TF1's ``tf.train``."""
from asyncflow.train.meta_graph import (  # noqa: F401
    export_meta_graph, import_meta_graph, read_graph, write_graph,
)
from asyncflow.train.saver import (  # noqa: F401
    CheckpointState, Saver, checkpoint_exists, get_checkpoint_state, latest_checkpoint,
)
