"""``af.math``: TF1's ``tf.math`` namespace.

Builders live in their op families (ops/math.py, ops/cumulative.py, ops/numerics.py,
ops/nn.py, ops/selection.py, ops/special.py, ops/indexing.py, ops/segment.py); this module
only gathers them under TF1's ``tf.math`` names.
"""
from asyncflow.ops.math import (  # noqa: F401
    abs, add, add_n, argmax, argmin, ceil, cos, divide, equal, exp, floor, floordiv, floormod,
    greater, greater_equal, is_finite, is_nan, less, less_equal, log, log1p, logical_and,
    logical_not, logical_or, logical_xor, maximum, minimum, multiply, negative, not_equal, pow,
    reciprocal, reduce_all, reduce_any, reduce_max, reduce_mean, reduce_min, reduce_prod,
    reduce_sum, round, rsqrt, sigmoid, sign, sin, sqrt, square, squared_difference, subtract,
    tanh, truediv,
)
from asyncflow.ops.cumulative import cumprod, cumsum  # noqa: F401
from asyncflow.ops.nn import log_sigmoid, softplus  # noqa: F401
from asyncflow.ops.numerics import (  # noqa: F401
    count_nonzero, reduce_euclidean_norm, reduce_logsumexp, reduce_std, reduce_variance,
)
from asyncflow.ops.selection import in_top_k, top_k  # noqa: F401
from asyncflow.ops.special import digamma, erf, lgamma  # noqa: F401
from asyncflow.ops.indexing import segment_sum, unsorted_segment_sum  # noqa: F401
from asyncflow.ops.segment import (  # noqa: F401
    segment_max, segment_mean, segment_min, segment_prod, unsorted_segment_max,
    unsorted_segment_mean, unsorted_segment_min, unsorted_segment_prod, unsorted_segment_sqrt_n,
)
from asyncflow.ops.trigonometric import (  # noqa: F401
    acos, acosh, asin, asinh, atan, atan2, atanh, cosh, expm1, is_inf, rint, sinh, tan,
)
from asyncflow.ops.numerics import div_no_nan as divide_no_nan, scalar_mul, zero_fraction  # noqa: F401,E501
from asyncflow.ops.math import floormod as mod  # noqa: F401
from asyncflow.ops.nn import l2_normalize, log_softmax, softmax, softsign  # noqa: F401
from asyncflow.ops.layout import invert_permutation  # noqa: F401
from asyncflow.ops.unique import bincount  # noqa: F401
from asyncflow.ops.numerics import reciprocal_no_nan, xdivy, xlogy  # noqa: F401
from asyncflow.ops.math import accumulate_n  # noqa: F401,E402
from asyncflow.ops.special import erfc  # noqa: F401,E402
from asyncflow.ops.confusion_matrix import confusion_matrix  # noqa: F401,E402
from asyncflow.ops.special import igamma, igammac  # noqa: F401,E402
