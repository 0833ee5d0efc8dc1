"""TF1's standard collection names (``tf.GraphKeys``).

Pure data: no trio, no runtime.
"""
from __future__ import annotations


class GraphKeys:
    """Standard collection names, as in TF1."""

    GLOBAL_VARIABLES = "variables"
    LOCAL_VARIABLES = "local_variables"
    TRAINABLE_VARIABLES = "trainable_variables"
    SUMMARIES = "summaries"
    QUEUE_RUNNERS = "queue_runners"
    UPDATE_OPS = "update_ops"
    GLOBAL_STEP = "global_step"
    SAVERS = "savers"
    INIT_OP = "init_op"
    LOCAL_INIT_OP = "local_init_op"
    TRAIN_OP = "train_op"
    LOSSES = "losses"
    REGULARIZATION_LOSSES = "regularization_losses"
    METRIC_VARIABLES = "metric_variables"
    MOVING_AVERAGE_VARIABLES = "moving_average_variables"
