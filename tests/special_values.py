"""What the squared-error fusions' tests (tests/graph, tests/ops) share: a hypothesis strategy of
float32 arrays mixing special values (both zeros, huge values whose squares overflow,
subnormals, inf, NaN) with ordinary ones, and the check that a fused form's step results keep
the unfused form's bits."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

SPECIAL = [0.0, -0.0, 1.0, -1.5, 3e38, -3e38, 1e-45, -1e-45, np.inf, -np.inf, np.nan, 2.5e-3]


def special_arrays(shape):
    size = int(np.prod(shape))
    return st.lists(st.sampled_from(SPECIAL) | st.floats(-1e3, 1e3, width=32),
                    min_size=size, max_size=size).map(
        lambda items: np.asarray(items, np.float32).reshape(shape))


def assert_same_bits(fused, plain):
    """Each step's results (lists of arrays) of the two forms: the same dtype, shape and bits."""
    for fused_step, plain_step in zip(fused, plain):
        for got, want in zip(fused_step, plain_step):
            got, want = np.asarray(got), np.asarray(want)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert got.tobytes() == want.tobytes(), (got, want)
