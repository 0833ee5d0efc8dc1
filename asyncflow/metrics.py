"""``af.metrics``: TF1's ``tf.metrics`` (streaming metrics over local variables).

Builders live in their op family (ops/metrics.py); this module only gathers them.
"""
from asyncflow.ops.metrics import (  # noqa: F401
    accuracy, auc, mean, mean_squared_error, precision, recall,
)
