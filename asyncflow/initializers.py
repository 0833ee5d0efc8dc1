"""``af.initializers``: TF1-style variable initializers (classes live in ops/init_ops.py).

Each name is a class; instantiate it and pass the instance to ``af.get_variable`` or call it
as ``init(shape, dtype)`` to get the initial-value Tensor::

    w = af.get_variable("w", [784, 10], initializer=af.initializers.he_normal())
"""
from asyncflow.ops.init_ops import (  # noqa: F401
    Constant, GlorotNormal, GlorotUniform, HeNormal, HeUniform, Initializer, LecunNormal,
    LecunUniform, Ones, Orthogonal, RandomNormal, RandomUniform, TruncatedNormal, VarianceScaling, Zeros,
    compute_fans,
)

zeros = Zeros
ones = Ones
constant = Constant
random_normal = RandomNormal
truncated_normal = TruncatedNormal
random_uniform = RandomUniform
variance_scaling = VarianceScaling
glorot_uniform = GlorotUniform
glorot_normal = GlorotNormal
he_normal = HeNormal
he_uniform = HeUniform
lecun_normal = LecunNormal
lecun_uniform = LecunUniform
orthogonal = Orthogonal
