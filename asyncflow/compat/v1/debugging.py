"""``tf.debugging``: TF1's checks under one name (1.15's ``tf.compat.v1.debugging``), each the
top-level function of the same name; ``assert_all_finite`` is ``verify_tensor_all_finite``."""
from asyncflow.ops.logging_ops import (
    Assert, assert_equal, assert_greater, assert_greater_equal, assert_integer, assert_less,
    assert_less_equal, assert_near, assert_negative, assert_non_negative, assert_non_positive,
    assert_none_equal, assert_positive, assert_proper_iterable, assert_rank,
    assert_rank_at_least, assert_rank_in, assert_same_float_dtype, assert_scalar, assert_type,
    is_non_decreasing, is_numeric_tensor, is_strictly_increasing,
)
from asyncflow.ops.math import is_finite, is_nan
from asyncflow.ops.numerics import check_numerics
from asyncflow.ops.numerics import verify_tensor_all_finite as assert_all_finite
from asyncflow.ops.trigonometric import is_inf

__all__ = [
    "Assert", "assert_all_finite", "assert_equal", "assert_greater", "assert_greater_equal",
    "assert_integer", "assert_less", "assert_less_equal", "assert_near", "assert_negative",
    "assert_non_negative", "assert_non_positive", "assert_none_equal", "assert_positive",
    "assert_proper_iterable", "assert_rank", "assert_rank_at_least", "assert_rank_in",
    "assert_same_float_dtype", "assert_scalar", "assert_type", "check_numerics", "is_finite",
    "is_inf", "is_nan", "is_non_decreasing", "is_numeric_tensor", "is_strictly_increasing",
]
