"""``af.nn``: the public neural-network namespace (TF1's ``tf.nn``).

Builders live in their op families (ops/nn.py, ops/nn_conv.py, ops/math.py, ops/embedding.py);
this module only gathers them under one name.
"""
from asyncflow.ops.math import sigmoid, tanh  # noqa: F401
from asyncflow.ops.nn import (  # noqa: F401
    batch_normalization, bias_add, dropout, elu, l2_loss, leaky_relu, log_softmax, moments, relu,
    relu6, sigmoid_cross_entropy_with_logits, softmax, softmax_cross_entropy_with_logits,
    softmax_cross_entropy_with_logits_v2, sparse_softmax_cross_entropy_with_logits,
)
from asyncflow.ops.nn_conv import (  # noqa: F401
    avg_pool, conv2d, conv2d_backprop_filter, conv2d_backprop_input, conv2d_transpose, max_pool,
)
from asyncflow.ops.embedding import embedding_lookup  # noqa: F401
from asyncflow.ops.nn import l2_normalize  # noqa: F401
from asyncflow.ops.nn import gelu, log_sigmoid, softplus  # noqa: F401,E402  (issue 37)
from asyncflow.ops.selection import in_top_k, top_k  # noqa: F401

from asyncflow.ops import rnn_cell  # noqa: F401  (af.nn.rnn_cell.BasicLSTMCell ...)
from asyncflow.ops.rnn import (  # noqa: F401
    bidirectional_dynamic_rnn, dynamic_rnn, static_bidirectional_rnn, static_rnn,
)
from asyncflow.ops.candidate_sampling import (  # noqa: F401,E402  (samplers, issue 31)
    compute_accidental_hits, fixed_unigram_candidate_sampler, learned_unigram_candidate_sampler,
    log_uniform_candidate_sampler, uniform_candidate_sampler,
)
from asyncflow.ops.sampled_losses import nce_loss, sampled_softmax_loss  # noqa: F401,E402
from asyncflow.ops.sparse_ops import embedding_lookup_sparse  # noqa: F401,E402
from asyncflow.ops.nn import selu, silu, softsign, swish  # noqa: F401,E402  (issue 36)
from asyncflow.ops.nn_conv import atrous_conv2d  # noqa: F401,E402  (issue 36)
from asyncflow.ops.nn_conv1d import avg_pool1d, conv1d, max_pool1d  # noqa: F401,E402
from asyncflow.ops.normalization import (  # noqa: F401,E402  (issue 36)
    fused_batch_norm, local_response_normalization, lrn,
)
from asyncflow.ops.nn_conv import depthwise_conv2d, separable_conv2d  # noqa: F401,E402
from asyncflow.ops.nn_composite import crelu, weighted_cross_entropy_with_logits  # noqa: F401,E402
from asyncflow.ops.nn_composite import relu_layer, xw_plus_b  # noqa: F401,E402
from asyncflow.ops.numerics import zero_fraction  # noqa: F401,E402
from asyncflow.ops.space_batch import (  # noqa: F401,E402  (tf.nn's spellings)
    depth_to_space, space_to_batch, space_to_depth,
)
from asyncflow.ops.nn_pool_v2 import (  # noqa: F401,E402  (TF1's pool spellings)
    avg_pool2d, avg_pool_v2, max_pool2d, max_pool_v2,
)
