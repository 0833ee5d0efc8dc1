"""Compiled direct loops for convolutions of one input channel (see kernels/nn_conv.py).

A grayscale convnet's first layer ([128, 28, 28, 1] 5x5 -> 32) is a GEMM with K = 25 once
its patch matrix is built: a poor GEMM shape, plus the patches' copy and a separate
BiasAdd + Relu pass over the [N*OH*OW, 32] output. The loops here compute it directly from
the zero-padded input (numba, ``kernels/jit.py``), never building the patches:

- ``_forward``: for each block of 4 output pixels and 32 output channels, 128 accumulators
  (scalars that LLVM's SLP vectorizer packs into vector registers, hence ``slp=True``) take
  the taps in the patch matrix's column order (row-major over KH, KW, C), each tap one
  fused multiply-add per accumulator; then the bias, then the Relu (``x <= 0`` gives +0, as
  numpy's ``maximum(x, 0)``; NaN stays), and one store per output. The sums run in the
  order of a GEMM's sequential FMAs over K: for the convnet's layer, float32, they matched
  OpenBLAS's SkylakeX sgemm bit for bit (bench/RESULTS.md); in general they are close to the
  numpy form, not equal (tests/ops/test_conv_loops.py states the tolerance).
- ``_filter_grad``: for each image, blocks of 4 taps x 32 output channels accumulate over
  the image's output pixels, then add into the chunk's ``[taps, O]`` sum: the per-image
  sums are a different order than the GEMM ``patches.T @ grad`` (close, not equal).

Each tap reads ``xf[b, s + offsets[t]]``: ``xf`` the chunk's padded images flattened, ``s``
the output pixel's first cell (``y * row_step + x * col_step``, strides included) and
``offsets[t]`` the tap's distance from it (dilations included): every geometry the direct
kernel takes. Padded cells are zeros multiplied like the patch matrix's (a 0 * inf filter
gives NaN in both), and a NaN input reaches only the outputs whose windows hold it.

Used where ``jit.usable`` (CPU numpy arrays, float32/float64, numba present, not
``ASYNCFLOW_JIT=0``), the input depth is 1, the output depth a multiple of 32, the dtypes
agree and the fused activation is none or Relu; elsewhere the numpy form in nn_conv.py runs
and stays the reference. Chunks are nn_conv.py's (``intra_op.for_batch`` by images, the
same bounds), one loop call each with the GIL released, so a split gives one thread's bits
in the forward, and the filter gradient adds the chunks' sums in chunk order as before.
"""
from __future__ import annotations

import numpy as np

from asyncflow.kernels import intra_op, jit
from asyncflow.kernels.registry import Preload

BLOCK = 32  # output channels a loop call's accumulators cover (the loops' unrolled width)
TAP_BLOCK = 4  # pixels (forward) or taps (filter gradient) per accumulator block

@jit.loop(slp=True, fastmath={"contract"})
def _forward(xf, offsets, row_step, col_step, packed, bias, floor, out):
    """Conv2D of one input channel, block by block (module docstring): ``xf`` [n, padded
    cells], ``packed`` [O / 32, taps, 32] the filter, ``bias`` [O / 32, 32] (-0 where none:
    x + -0 is x, signed zeros and NaN payloads included), ``floor`` 0 for a Relu (outputs <= 0
    become +0), NaN for none (no comparison holds); ``out`` [n, OH, OW, O]. Branch-free, so
    the accumulators stay in vector registers up to the stores."""
    n, oh, ow, depth_out = out.shape
    pixels = oh * ow
    zero = out.dtype.type(0)
    for b in range(n):
        image = xf[b]
        flat = out[b].reshape(pixels, depth_out // 32, 32)
        for q in range(0, pixels, 4):
            y, x = divmod(min(q + 0, pixels - 1), ow)
            s0 = y * row_step + x * col_step
            y, x = divmod(min(q + 1, pixels - 1), ow)
            s1 = y * row_step + x * col_step
            y, x = divmod(min(q + 2, pixels - 1), ow)
            s2 = y * row_step + x * col_step
            y, x = divmod(min(q + 3, pixels - 1), ow)
            s3 = y * row_step + x * col_step
            for block in range(depth_out // 32):
                wb = packed[block]
                a0_0 = a0_1 = a0_2 = a0_3 = a0_4 = a0_5 = a0_6 = a0_7 = zero
                a0_8 = a0_9 = a0_10 = a0_11 = a0_12 = a0_13 = a0_14 = a0_15 = zero
                a0_16 = a0_17 = a0_18 = a0_19 = a0_20 = a0_21 = a0_22 = a0_23 = zero
                a0_24 = a0_25 = a0_26 = a0_27 = a0_28 = a0_29 = a0_30 = a0_31 = zero
                a1_0 = a1_1 = a1_2 = a1_3 = a1_4 = a1_5 = a1_6 = a1_7 = zero
                a1_8 = a1_9 = a1_10 = a1_11 = a1_12 = a1_13 = a1_14 = a1_15 = zero
                a1_16 = a1_17 = a1_18 = a1_19 = a1_20 = a1_21 = a1_22 = a1_23 = zero
                a1_24 = a1_25 = a1_26 = a1_27 = a1_28 = a1_29 = a1_30 = a1_31 = zero
                a2_0 = a2_1 = a2_2 = a2_3 = a2_4 = a2_5 = a2_6 = a2_7 = zero
                a2_8 = a2_9 = a2_10 = a2_11 = a2_12 = a2_13 = a2_14 = a2_15 = zero
                a2_16 = a2_17 = a2_18 = a2_19 = a2_20 = a2_21 = a2_22 = a2_23 = zero
                a2_24 = a2_25 = a2_26 = a2_27 = a2_28 = a2_29 = a2_30 = a2_31 = zero
                a3_0 = a3_1 = a3_2 = a3_3 = a3_4 = a3_5 = a3_6 = a3_7 = zero
                a3_8 = a3_9 = a3_10 = a3_11 = a3_12 = a3_13 = a3_14 = a3_15 = zero
                a3_16 = a3_17 = a3_18 = a3_19 = a3_20 = a3_21 = a3_22 = a3_23 = zero
                a3_24 = a3_25 = a3_26 = a3_27 = a3_28 = a3_29 = a3_30 = a3_31 = zero
                for t in range(offsets.size):
                    at = offsets[t]
                    v0, v1, v2, v3 = image[s0 + at], image[s1 + at], image[s2 + at], image[s3 + at]
                    w0 = wb[t, 0]; w1 = wb[t, 1]; w2 = wb[t, 2]; w3 = wb[t, 3]
                    w4 = wb[t, 4]; w5 = wb[t, 5]; w6 = wb[t, 6]; w7 = wb[t, 7]
                    w8 = wb[t, 8]; w9 = wb[t, 9]; w10 = wb[t, 10]; w11 = wb[t, 11]
                    w12 = wb[t, 12]; w13 = wb[t, 13]; w14 = wb[t, 14]; w15 = wb[t, 15]
                    w16 = wb[t, 16]; w17 = wb[t, 17]; w18 = wb[t, 18]; w19 = wb[t, 19]
                    w20 = wb[t, 20]; w21 = wb[t, 21]; w22 = wb[t, 22]; w23 = wb[t, 23]
                    w24 = wb[t, 24]; w25 = wb[t, 25]; w26 = wb[t, 26]; w27 = wb[t, 27]
                    w28 = wb[t, 28]; w29 = wb[t, 29]; w30 = wb[t, 30]; w31 = wb[t, 31]
                    a0_0 += v0 * w0; a0_1 += v0 * w1; a0_2 += v0 * w2; a0_3 += v0 * w3
                    a0_4 += v0 * w4; a0_5 += v0 * w5; a0_6 += v0 * w6; a0_7 += v0 * w7
                    a0_8 += v0 * w8; a0_9 += v0 * w9; a0_10 += v0 * w10; a0_11 += v0 * w11
                    a0_12 += v0 * w12; a0_13 += v0 * w13; a0_14 += v0 * w14; a0_15 += v0 * w15
                    a0_16 += v0 * w16; a0_17 += v0 * w17; a0_18 += v0 * w18; a0_19 += v0 * w19
                    a0_20 += v0 * w20; a0_21 += v0 * w21; a0_22 += v0 * w22; a0_23 += v0 * w23
                    a0_24 += v0 * w24; a0_25 += v0 * w25; a0_26 += v0 * w26; a0_27 += v0 * w27
                    a0_28 += v0 * w28; a0_29 += v0 * w29; a0_30 += v0 * w30; a0_31 += v0 * w31
                    a1_0 += v1 * w0; a1_1 += v1 * w1; a1_2 += v1 * w2; a1_3 += v1 * w3
                    a1_4 += v1 * w4; a1_5 += v1 * w5; a1_6 += v1 * w6; a1_7 += v1 * w7
                    a1_8 += v1 * w8; a1_9 += v1 * w9; a1_10 += v1 * w10; a1_11 += v1 * w11
                    a1_12 += v1 * w12; a1_13 += v1 * w13; a1_14 += v1 * w14; a1_15 += v1 * w15
                    a1_16 += v1 * w16; a1_17 += v1 * w17; a1_18 += v1 * w18; a1_19 += v1 * w19
                    a1_20 += v1 * w20; a1_21 += v1 * w21; a1_22 += v1 * w22; a1_23 += v1 * w23
                    a1_24 += v1 * w24; a1_25 += v1 * w25; a1_26 += v1 * w26; a1_27 += v1 * w27
                    a1_28 += v1 * w28; a1_29 += v1 * w29; a1_30 += v1 * w30; a1_31 += v1 * w31
                    a2_0 += v2 * w0; a2_1 += v2 * w1; a2_2 += v2 * w2; a2_3 += v2 * w3
                    a2_4 += v2 * w4; a2_5 += v2 * w5; a2_6 += v2 * w6; a2_7 += v2 * w7
                    a2_8 += v2 * w8; a2_9 += v2 * w9; a2_10 += v2 * w10; a2_11 += v2 * w11
                    a2_12 += v2 * w12; a2_13 += v2 * w13; a2_14 += v2 * w14; a2_15 += v2 * w15
                    a2_16 += v2 * w16; a2_17 += v2 * w17; a2_18 += v2 * w18; a2_19 += v2 * w19
                    a2_20 += v2 * w20; a2_21 += v2 * w21; a2_22 += v2 * w22; a2_23 += v2 * w23
                    a2_24 += v2 * w24; a2_25 += v2 * w25; a2_26 += v2 * w26; a2_27 += v2 * w27
                    a2_28 += v2 * w28; a2_29 += v2 * w29; a2_30 += v2 * w30; a2_31 += v2 * w31
                    a3_0 += v3 * w0; a3_1 += v3 * w1; a3_2 += v3 * w2; a3_3 += v3 * w3
                    a3_4 += v3 * w4; a3_5 += v3 * w5; a3_6 += v3 * w6; a3_7 += v3 * w7
                    a3_8 += v3 * w8; a3_9 += v3 * w9; a3_10 += v3 * w10; a3_11 += v3 * w11
                    a3_12 += v3 * w12; a3_13 += v3 * w13; a3_14 += v3 * w14; a3_15 += v3 * w15
                    a3_16 += v3 * w16; a3_17 += v3 * w17; a3_18 += v3 * w18; a3_19 += v3 * w19
                    a3_20 += v3 * w20; a3_21 += v3 * w21; a3_22 += v3 * w22; a3_23 += v3 * w23
                    a3_24 += v3 * w24; a3_25 += v3 * w25; a3_26 += v3 * w26; a3_27 += v3 * w27
                    a3_28 += v3 * w28; a3_29 += v3 * w29; a3_30 += v3 * w30; a3_31 += v3 * w31
                z = zero
                b0 = bias[block, 0]; b1 = bias[block, 1]; b2 = bias[block, 2]
                b3 = bias[block, 3]; b4 = bias[block, 4]; b5 = bias[block, 5]
                b6 = bias[block, 6]; b7 = bias[block, 7]; b8 = bias[block, 8]
                b9 = bias[block, 9]; b10 = bias[block, 10]; b11 = bias[block, 11]
                b12 = bias[block, 12]; b13 = bias[block, 13]; b14 = bias[block, 14]
                b15 = bias[block, 15]; b16 = bias[block, 16]; b17 = bias[block, 17]
                b18 = bias[block, 18]; b19 = bias[block, 19]; b20 = bias[block, 20]
                b21 = bias[block, 21]; b22 = bias[block, 22]; b23 = bias[block, 23]
                b24 = bias[block, 24]; b25 = bias[block, 25]; b26 = bias[block, 26]
                b27 = bias[block, 27]; b28 = bias[block, 28]; b29 = bias[block, 29]
                b30 = bias[block, 30]; b31 = bias[block, 31]
                a0_0 += b0; a0_1 += b1; a0_2 += b2; a0_3 += b3; a0_4 += b4
                a0_5 += b5; a0_6 += b6; a0_7 += b7; a0_8 += b8; a0_9 += b9
                a0_10 += b10; a0_11 += b11; a0_12 += b12; a0_13 += b13; a0_14 += b14
                a0_15 += b15; a0_16 += b16; a0_17 += b17; a0_18 += b18; a0_19 += b19
                a0_20 += b20; a0_21 += b21; a0_22 += b22; a0_23 += b23; a0_24 += b24
                a0_25 += b25; a0_26 += b26; a0_27 += b27; a0_28 += b28; a0_29 += b29
                a0_30 += b30; a0_31 += b31
                a1_0 += b0; a1_1 += b1; a1_2 += b2; a1_3 += b3; a1_4 += b4
                a1_5 += b5; a1_6 += b6; a1_7 += b7; a1_8 += b8; a1_9 += b9
                a1_10 += b10; a1_11 += b11; a1_12 += b12; a1_13 += b13; a1_14 += b14
                a1_15 += b15; a1_16 += b16; a1_17 += b17; a1_18 += b18; a1_19 += b19
                a1_20 += b20; a1_21 += b21; a1_22 += b22; a1_23 += b23; a1_24 += b24
                a1_25 += b25; a1_26 += b26; a1_27 += b27; a1_28 += b28; a1_29 += b29
                a1_30 += b30; a1_31 += b31
                a2_0 += b0; a2_1 += b1; a2_2 += b2; a2_3 += b3; a2_4 += b4
                a2_5 += b5; a2_6 += b6; a2_7 += b7; a2_8 += b8; a2_9 += b9
                a2_10 += b10; a2_11 += b11; a2_12 += b12; a2_13 += b13; a2_14 += b14
                a2_15 += b15; a2_16 += b16; a2_17 += b17; a2_18 += b18; a2_19 += b19
                a2_20 += b20; a2_21 += b21; a2_22 += b22; a2_23 += b23; a2_24 += b24
                a2_25 += b25; a2_26 += b26; a2_27 += b27; a2_28 += b28; a2_29 += b29
                a2_30 += b30; a2_31 += b31
                a3_0 += b0; a3_1 += b1; a3_2 += b2; a3_3 += b3; a3_4 += b4
                a3_5 += b5; a3_6 += b6; a3_7 += b7; a3_8 += b8; a3_9 += b9
                a3_10 += b10; a3_11 += b11; a3_12 += b12; a3_13 += b13; a3_14 += b14
                a3_15 += b15; a3_16 += b16; a3_17 += b17; a3_18 += b18; a3_19 += b19
                a3_20 += b20; a3_21 += b21; a3_22 += b22; a3_23 += b23; a3_24 += b24
                a3_25 += b25; a3_26 += b26; a3_27 += b27; a3_28 += b28; a3_29 += b29
                a3_30 += b30; a3_31 += b31
                a0_0 = z if a0_0 <= floor else a0_0; a0_1 = z if a0_1 <= floor else a0_1
                a0_2 = z if a0_2 <= floor else a0_2; a0_3 = z if a0_3 <= floor else a0_3
                a0_4 = z if a0_4 <= floor else a0_4; a0_5 = z if a0_5 <= floor else a0_5
                a0_6 = z if a0_6 <= floor else a0_6; a0_7 = z if a0_7 <= floor else a0_7
                a0_8 = z if a0_8 <= floor else a0_8; a0_9 = z if a0_9 <= floor else a0_9
                a0_10 = z if a0_10 <= floor else a0_10; a0_11 = z if a0_11 <= floor else a0_11
                a0_12 = z if a0_12 <= floor else a0_12; a0_13 = z if a0_13 <= floor else a0_13
                a0_14 = z if a0_14 <= floor else a0_14; a0_15 = z if a0_15 <= floor else a0_15
                a0_16 = z if a0_16 <= floor else a0_16; a0_17 = z if a0_17 <= floor else a0_17
                a0_18 = z if a0_18 <= floor else a0_18; a0_19 = z if a0_19 <= floor else a0_19
                a0_20 = z if a0_20 <= floor else a0_20; a0_21 = z if a0_21 <= floor else a0_21
                a0_22 = z if a0_22 <= floor else a0_22; a0_23 = z if a0_23 <= floor else a0_23
                a0_24 = z if a0_24 <= floor else a0_24; a0_25 = z if a0_25 <= floor else a0_25
                a0_26 = z if a0_26 <= floor else a0_26; a0_27 = z if a0_27 <= floor else a0_27
                a0_28 = z if a0_28 <= floor else a0_28; a0_29 = z if a0_29 <= floor else a0_29
                a0_30 = z if a0_30 <= floor else a0_30; a0_31 = z if a0_31 <= floor else a0_31
                a1_0 = z if a1_0 <= floor else a1_0; a1_1 = z if a1_1 <= floor else a1_1
                a1_2 = z if a1_2 <= floor else a1_2; a1_3 = z if a1_3 <= floor else a1_3
                a1_4 = z if a1_4 <= floor else a1_4; a1_5 = z if a1_5 <= floor else a1_5
                a1_6 = z if a1_6 <= floor else a1_6; a1_7 = z if a1_7 <= floor else a1_7
                a1_8 = z if a1_8 <= floor else a1_8; a1_9 = z if a1_9 <= floor else a1_9
                a1_10 = z if a1_10 <= floor else a1_10; a1_11 = z if a1_11 <= floor else a1_11
                a1_12 = z if a1_12 <= floor else a1_12; a1_13 = z if a1_13 <= floor else a1_13
                a1_14 = z if a1_14 <= floor else a1_14; a1_15 = z if a1_15 <= floor else a1_15
                a1_16 = z if a1_16 <= floor else a1_16; a1_17 = z if a1_17 <= floor else a1_17
                a1_18 = z if a1_18 <= floor else a1_18; a1_19 = z if a1_19 <= floor else a1_19
                a1_20 = z if a1_20 <= floor else a1_20; a1_21 = z if a1_21 <= floor else a1_21
                a1_22 = z if a1_22 <= floor else a1_22; a1_23 = z if a1_23 <= floor else a1_23
                a1_24 = z if a1_24 <= floor else a1_24; a1_25 = z if a1_25 <= floor else a1_25
                a1_26 = z if a1_26 <= floor else a1_26; a1_27 = z if a1_27 <= floor else a1_27
                a1_28 = z if a1_28 <= floor else a1_28; a1_29 = z if a1_29 <= floor else a1_29
                a1_30 = z if a1_30 <= floor else a1_30; a1_31 = z if a1_31 <= floor else a1_31
                a2_0 = z if a2_0 <= floor else a2_0; a2_1 = z if a2_1 <= floor else a2_1
                a2_2 = z if a2_2 <= floor else a2_2; a2_3 = z if a2_3 <= floor else a2_3
                a2_4 = z if a2_4 <= floor else a2_4; a2_5 = z if a2_5 <= floor else a2_5
                a2_6 = z if a2_6 <= floor else a2_6; a2_7 = z if a2_7 <= floor else a2_7
                a2_8 = z if a2_8 <= floor else a2_8; a2_9 = z if a2_9 <= floor else a2_9
                a2_10 = z if a2_10 <= floor else a2_10; a2_11 = z if a2_11 <= floor else a2_11
                a2_12 = z if a2_12 <= floor else a2_12; a2_13 = z if a2_13 <= floor else a2_13
                a2_14 = z if a2_14 <= floor else a2_14; a2_15 = z if a2_15 <= floor else a2_15
                a2_16 = z if a2_16 <= floor else a2_16; a2_17 = z if a2_17 <= floor else a2_17
                a2_18 = z if a2_18 <= floor else a2_18; a2_19 = z if a2_19 <= floor else a2_19
                a2_20 = z if a2_20 <= floor else a2_20; a2_21 = z if a2_21 <= floor else a2_21
                a2_22 = z if a2_22 <= floor else a2_22; a2_23 = z if a2_23 <= floor else a2_23
                a2_24 = z if a2_24 <= floor else a2_24; a2_25 = z if a2_25 <= floor else a2_25
                a2_26 = z if a2_26 <= floor else a2_26; a2_27 = z if a2_27 <= floor else a2_27
                a2_28 = z if a2_28 <= floor else a2_28; a2_29 = z if a2_29 <= floor else a2_29
                a2_30 = z if a2_30 <= floor else a2_30; a2_31 = z if a2_31 <= floor else a2_31
                a3_0 = z if a3_0 <= floor else a3_0; a3_1 = z if a3_1 <= floor else a3_1
                a3_2 = z if a3_2 <= floor else a3_2; a3_3 = z if a3_3 <= floor else a3_3
                a3_4 = z if a3_4 <= floor else a3_4; a3_5 = z if a3_5 <= floor else a3_5
                a3_6 = z if a3_6 <= floor else a3_6; a3_7 = z if a3_7 <= floor else a3_7
                a3_8 = z if a3_8 <= floor else a3_8; a3_9 = z if a3_9 <= floor else a3_9
                a3_10 = z if a3_10 <= floor else a3_10; a3_11 = z if a3_11 <= floor else a3_11
                a3_12 = z if a3_12 <= floor else a3_12; a3_13 = z if a3_13 <= floor else a3_13
                a3_14 = z if a3_14 <= floor else a3_14; a3_15 = z if a3_15 <= floor else a3_15
                a3_16 = z if a3_16 <= floor else a3_16; a3_17 = z if a3_17 <= floor else a3_17
                a3_18 = z if a3_18 <= floor else a3_18; a3_19 = z if a3_19 <= floor else a3_19
                a3_20 = z if a3_20 <= floor else a3_20; a3_21 = z if a3_21 <= floor else a3_21
                a3_22 = z if a3_22 <= floor else a3_22; a3_23 = z if a3_23 <= floor else a3_23
                a3_24 = z if a3_24 <= floor else a3_24; a3_25 = z if a3_25 <= floor else a3_25
                a3_26 = z if a3_26 <= floor else a3_26; a3_27 = z if a3_27 <= floor else a3_27
                a3_28 = z if a3_28 <= floor else a3_28; a3_29 = z if a3_29 <= floor else a3_29
                a3_30 = z if a3_30 <= floor else a3_30; a3_31 = z if a3_31 <= floor else a3_31
                last = min(4, pixels - q)
                flat[q + 0, block, 0] = a0_0; flat[q + 0, block, 1] = a0_1
                flat[q + 0, block, 2] = a0_2; flat[q + 0, block, 3] = a0_3
                flat[q + 0, block, 4] = a0_4; flat[q + 0, block, 5] = a0_5
                flat[q + 0, block, 6] = a0_6; flat[q + 0, block, 7] = a0_7
                flat[q + 0, block, 8] = a0_8; flat[q + 0, block, 9] = a0_9
                flat[q + 0, block, 10] = a0_10; flat[q + 0, block, 11] = a0_11
                flat[q + 0, block, 12] = a0_12; flat[q + 0, block, 13] = a0_13
                flat[q + 0, block, 14] = a0_14; flat[q + 0, block, 15] = a0_15
                flat[q + 0, block, 16] = a0_16; flat[q + 0, block, 17] = a0_17
                flat[q + 0, block, 18] = a0_18; flat[q + 0, block, 19] = a0_19
                flat[q + 0, block, 20] = a0_20; flat[q + 0, block, 21] = a0_21
                flat[q + 0, block, 22] = a0_22; flat[q + 0, block, 23] = a0_23
                flat[q + 0, block, 24] = a0_24; flat[q + 0, block, 25] = a0_25
                flat[q + 0, block, 26] = a0_26; flat[q + 0, block, 27] = a0_27
                flat[q + 0, block, 28] = a0_28; flat[q + 0, block, 29] = a0_29
                flat[q + 0, block, 30] = a0_30; flat[q + 0, block, 31] = a0_31
                if 1 < last:
                    flat[q + 1, block, 0] = a1_0; flat[q + 1, block, 1] = a1_1
                    flat[q + 1, block, 2] = a1_2; flat[q + 1, block, 3] = a1_3
                    flat[q + 1, block, 4] = a1_4; flat[q + 1, block, 5] = a1_5
                    flat[q + 1, block, 6] = a1_6; flat[q + 1, block, 7] = a1_7
                    flat[q + 1, block, 8] = a1_8; flat[q + 1, block, 9] = a1_9
                    flat[q + 1, block, 10] = a1_10; flat[q + 1, block, 11] = a1_11
                    flat[q + 1, block, 12] = a1_12; flat[q + 1, block, 13] = a1_13
                    flat[q + 1, block, 14] = a1_14; flat[q + 1, block, 15] = a1_15
                    flat[q + 1, block, 16] = a1_16; flat[q + 1, block, 17] = a1_17
                    flat[q + 1, block, 18] = a1_18; flat[q + 1, block, 19] = a1_19
                    flat[q + 1, block, 20] = a1_20; flat[q + 1, block, 21] = a1_21
                    flat[q + 1, block, 22] = a1_22; flat[q + 1, block, 23] = a1_23
                    flat[q + 1, block, 24] = a1_24; flat[q + 1, block, 25] = a1_25
                    flat[q + 1, block, 26] = a1_26; flat[q + 1, block, 27] = a1_27
                    flat[q + 1, block, 28] = a1_28; flat[q + 1, block, 29] = a1_29
                    flat[q + 1, block, 30] = a1_30; flat[q + 1, block, 31] = a1_31
                if 2 < last:
                    flat[q + 2, block, 0] = a2_0; flat[q + 2, block, 1] = a2_1
                    flat[q + 2, block, 2] = a2_2; flat[q + 2, block, 3] = a2_3
                    flat[q + 2, block, 4] = a2_4; flat[q + 2, block, 5] = a2_5
                    flat[q + 2, block, 6] = a2_6; flat[q + 2, block, 7] = a2_7
                    flat[q + 2, block, 8] = a2_8; flat[q + 2, block, 9] = a2_9
                    flat[q + 2, block, 10] = a2_10; flat[q + 2, block, 11] = a2_11
                    flat[q + 2, block, 12] = a2_12; flat[q + 2, block, 13] = a2_13
                    flat[q + 2, block, 14] = a2_14; flat[q + 2, block, 15] = a2_15
                    flat[q + 2, block, 16] = a2_16; flat[q + 2, block, 17] = a2_17
                    flat[q + 2, block, 18] = a2_18; flat[q + 2, block, 19] = a2_19
                    flat[q + 2, block, 20] = a2_20; flat[q + 2, block, 21] = a2_21
                    flat[q + 2, block, 22] = a2_22; flat[q + 2, block, 23] = a2_23
                    flat[q + 2, block, 24] = a2_24; flat[q + 2, block, 25] = a2_25
                    flat[q + 2, block, 26] = a2_26; flat[q + 2, block, 27] = a2_27
                    flat[q + 2, block, 28] = a2_28; flat[q + 2, block, 29] = a2_29
                    flat[q + 2, block, 30] = a2_30; flat[q + 2, block, 31] = a2_31
                if 3 < last:
                    flat[q + 3, block, 0] = a3_0; flat[q + 3, block, 1] = a3_1
                    flat[q + 3, block, 2] = a3_2; flat[q + 3, block, 3] = a3_3
                    flat[q + 3, block, 4] = a3_4; flat[q + 3, block, 5] = a3_5
                    flat[q + 3, block, 6] = a3_6; flat[q + 3, block, 7] = a3_7
                    flat[q + 3, block, 8] = a3_8; flat[q + 3, block, 9] = a3_9
                    flat[q + 3, block, 10] = a3_10; flat[q + 3, block, 11] = a3_11
                    flat[q + 3, block, 12] = a3_12; flat[q + 3, block, 13] = a3_13
                    flat[q + 3, block, 14] = a3_14; flat[q + 3, block, 15] = a3_15
                    flat[q + 3, block, 16] = a3_16; flat[q + 3, block, 17] = a3_17
                    flat[q + 3, block, 18] = a3_18; flat[q + 3, block, 19] = a3_19
                    flat[q + 3, block, 20] = a3_20; flat[q + 3, block, 21] = a3_21
                    flat[q + 3, block, 22] = a3_22; flat[q + 3, block, 23] = a3_23
                    flat[q + 3, block, 24] = a3_24; flat[q + 3, block, 25] = a3_25
                    flat[q + 3, block, 26] = a3_26; flat[q + 3, block, 27] = a3_27
                    flat[q + 3, block, 28] = a3_28; flat[q + 3, block, 29] = a3_29
                    flat[q + 3, block, 30] = a3_30; flat[q + 3, block, 31] = a3_31


@jit.loop(slp=True, fastmath={"contract"})
def _filter_grad(xf, offsets, row_step, col_step, grad, out):
    """Adds to ``out`` [taps, O] the filter gradient of the images ``xf`` [n, padded cells]
    and ``grad`` [n, OH, OW, O] (module docstring)."""
    n, oh, ow, depth_out = grad.shape
    taps = offsets.size
    zero = out.dtype.type(0)
    total = out.reshape(taps, depth_out // 32, 32)
    for b in range(n):
        image = xf[b]
        rows = grad[b].reshape(oh * ow, depth_out // 32, 32)
        for t0 in range(0, taps, 4):
            at0 = offsets[min(t0 + 0, taps - 1)]
            at1 = offsets[min(t0 + 1, taps - 1)]
            at2 = offsets[min(t0 + 2, taps - 1)]
            at3 = offsets[min(t0 + 3, taps - 1)]
            for block in range(depth_out // 32):
                a0_0 = a0_1 = a0_2 = a0_3 = a0_4 = a0_5 = a0_6 = a0_7 = zero
                a0_8 = a0_9 = a0_10 = a0_11 = a0_12 = a0_13 = a0_14 = a0_15 = zero
                a0_16 = a0_17 = a0_18 = a0_19 = a0_20 = a0_21 = a0_22 = a0_23 = zero
                a0_24 = a0_25 = a0_26 = a0_27 = a0_28 = a0_29 = a0_30 = a0_31 = zero
                a1_0 = a1_1 = a1_2 = a1_3 = a1_4 = a1_5 = a1_6 = a1_7 = zero
                a1_8 = a1_9 = a1_10 = a1_11 = a1_12 = a1_13 = a1_14 = a1_15 = zero
                a1_16 = a1_17 = a1_18 = a1_19 = a1_20 = a1_21 = a1_22 = a1_23 = zero
                a1_24 = a1_25 = a1_26 = a1_27 = a1_28 = a1_29 = a1_30 = a1_31 = zero
                a2_0 = a2_1 = a2_2 = a2_3 = a2_4 = a2_5 = a2_6 = a2_7 = zero
                a2_8 = a2_9 = a2_10 = a2_11 = a2_12 = a2_13 = a2_14 = a2_15 = zero
                a2_16 = a2_17 = a2_18 = a2_19 = a2_20 = a2_21 = a2_22 = a2_23 = zero
                a2_24 = a2_25 = a2_26 = a2_27 = a2_28 = a2_29 = a2_30 = a2_31 = zero
                a3_0 = a3_1 = a3_2 = a3_3 = a3_4 = a3_5 = a3_6 = a3_7 = zero
                a3_8 = a3_9 = a3_10 = a3_11 = a3_12 = a3_13 = a3_14 = a3_15 = zero
                a3_16 = a3_17 = a3_18 = a3_19 = a3_20 = a3_21 = a3_22 = a3_23 = zero
                a3_24 = a3_25 = a3_26 = a3_27 = a3_28 = a3_29 = a3_30 = a3_31 = zero
                for y in range(oh):
                    for x in range(ow):
                        s = y * row_step + x * col_step
                        v0, v1, v2, v3 = image[s + at0], image[s + at1], image[s + at2], image[s + at3]
                        pixel = y * ow + x
                        g0 = rows[pixel, block, 0]; g1 = rows[pixel, block, 1]
                        g2 = rows[pixel, block, 2]; g3 = rows[pixel, block, 3]
                        g4 = rows[pixel, block, 4]; g5 = rows[pixel, block, 5]
                        g6 = rows[pixel, block, 6]; g7 = rows[pixel, block, 7]
                        g8 = rows[pixel, block, 8]; g9 = rows[pixel, block, 9]
                        g10 = rows[pixel, block, 10]; g11 = rows[pixel, block, 11]
                        g12 = rows[pixel, block, 12]; g13 = rows[pixel, block, 13]
                        g14 = rows[pixel, block, 14]; g15 = rows[pixel, block, 15]
                        g16 = rows[pixel, block, 16]; g17 = rows[pixel, block, 17]
                        g18 = rows[pixel, block, 18]; g19 = rows[pixel, block, 19]
                        g20 = rows[pixel, block, 20]; g21 = rows[pixel, block, 21]
                        g22 = rows[pixel, block, 22]; g23 = rows[pixel, block, 23]
                        g24 = rows[pixel, block, 24]; g25 = rows[pixel, block, 25]
                        g26 = rows[pixel, block, 26]; g27 = rows[pixel, block, 27]
                        g28 = rows[pixel, block, 28]; g29 = rows[pixel, block, 29]
                        g30 = rows[pixel, block, 30]; g31 = rows[pixel, block, 31]
                        a0_0 += v0 * g0; a0_1 += v0 * g1; a0_2 += v0 * g2; a0_3 += v0 * g3
                        a0_4 += v0 * g4; a0_5 += v0 * g5; a0_6 += v0 * g6; a0_7 += v0 * g7
                        a0_8 += v0 * g8; a0_9 += v0 * g9; a0_10 += v0 * g10; a0_11 += v0 * g11
                        a0_12 += v0 * g12; a0_13 += v0 * g13; a0_14 += v0 * g14; a0_15 += v0 * g15
                        a0_16 += v0 * g16; a0_17 += v0 * g17; a0_18 += v0 * g18; a0_19 += v0 * g19
                        a0_20 += v0 * g20; a0_21 += v0 * g21; a0_22 += v0 * g22; a0_23 += v0 * g23
                        a0_24 += v0 * g24; a0_25 += v0 * g25; a0_26 += v0 * g26; a0_27 += v0 * g27
                        a0_28 += v0 * g28; a0_29 += v0 * g29; a0_30 += v0 * g30; a0_31 += v0 * g31
                        a1_0 += v1 * g0; a1_1 += v1 * g1; a1_2 += v1 * g2; a1_3 += v1 * g3
                        a1_4 += v1 * g4; a1_5 += v1 * g5; a1_6 += v1 * g6; a1_7 += v1 * g7
                        a1_8 += v1 * g8; a1_9 += v1 * g9; a1_10 += v1 * g10; a1_11 += v1 * g11
                        a1_12 += v1 * g12; a1_13 += v1 * g13; a1_14 += v1 * g14; a1_15 += v1 * g15
                        a1_16 += v1 * g16; a1_17 += v1 * g17; a1_18 += v1 * g18; a1_19 += v1 * g19
                        a1_20 += v1 * g20; a1_21 += v1 * g21; a1_22 += v1 * g22; a1_23 += v1 * g23
                        a1_24 += v1 * g24; a1_25 += v1 * g25; a1_26 += v1 * g26; a1_27 += v1 * g27
                        a1_28 += v1 * g28; a1_29 += v1 * g29; a1_30 += v1 * g30; a1_31 += v1 * g31
                        a2_0 += v2 * g0; a2_1 += v2 * g1; a2_2 += v2 * g2; a2_3 += v2 * g3
                        a2_4 += v2 * g4; a2_5 += v2 * g5; a2_6 += v2 * g6; a2_7 += v2 * g7
                        a2_8 += v2 * g8; a2_9 += v2 * g9; a2_10 += v2 * g10; a2_11 += v2 * g11
                        a2_12 += v2 * g12; a2_13 += v2 * g13; a2_14 += v2 * g14; a2_15 += v2 * g15
                        a2_16 += v2 * g16; a2_17 += v2 * g17; a2_18 += v2 * g18; a2_19 += v2 * g19
                        a2_20 += v2 * g20; a2_21 += v2 * g21; a2_22 += v2 * g22; a2_23 += v2 * g23
                        a2_24 += v2 * g24; a2_25 += v2 * g25; a2_26 += v2 * g26; a2_27 += v2 * g27
                        a2_28 += v2 * g28; a2_29 += v2 * g29; a2_30 += v2 * g30; a2_31 += v2 * g31
                        a3_0 += v3 * g0; a3_1 += v3 * g1; a3_2 += v3 * g2; a3_3 += v3 * g3
                        a3_4 += v3 * g4; a3_5 += v3 * g5; a3_6 += v3 * g6; a3_7 += v3 * g7
                        a3_8 += v3 * g8; a3_9 += v3 * g9; a3_10 += v3 * g10; a3_11 += v3 * g11
                        a3_12 += v3 * g12; a3_13 += v3 * g13; a3_14 += v3 * g14; a3_15 += v3 * g15
                        a3_16 += v3 * g16; a3_17 += v3 * g17; a3_18 += v3 * g18; a3_19 += v3 * g19
                        a3_20 += v3 * g20; a3_21 += v3 * g21; a3_22 += v3 * g22; a3_23 += v3 * g23
                        a3_24 += v3 * g24; a3_25 += v3 * g25; a3_26 += v3 * g26; a3_27 += v3 * g27
                        a3_28 += v3 * g28; a3_29 += v3 * g29; a3_30 += v3 * g30; a3_31 += v3 * g31
                last = min(4, taps - t0)
                total[t0 + 0, block, 0] += a0_0; total[t0 + 0, block, 1] += a0_1
                total[t0 + 0, block, 2] += a0_2; total[t0 + 0, block, 3] += a0_3
                total[t0 + 0, block, 4] += a0_4; total[t0 + 0, block, 5] += a0_5
                total[t0 + 0, block, 6] += a0_6; total[t0 + 0, block, 7] += a0_7
                total[t0 + 0, block, 8] += a0_8; total[t0 + 0, block, 9] += a0_9
                total[t0 + 0, block, 10] += a0_10; total[t0 + 0, block, 11] += a0_11
                total[t0 + 0, block, 12] += a0_12; total[t0 + 0, block, 13] += a0_13
                total[t0 + 0, block, 14] += a0_14; total[t0 + 0, block, 15] += a0_15
                total[t0 + 0, block, 16] += a0_16; total[t0 + 0, block, 17] += a0_17
                total[t0 + 0, block, 18] += a0_18; total[t0 + 0, block, 19] += a0_19
                total[t0 + 0, block, 20] += a0_20; total[t0 + 0, block, 21] += a0_21
                total[t0 + 0, block, 22] += a0_22; total[t0 + 0, block, 23] += a0_23
                total[t0 + 0, block, 24] += a0_24; total[t0 + 0, block, 25] += a0_25
                total[t0 + 0, block, 26] += a0_26; total[t0 + 0, block, 27] += a0_27
                total[t0 + 0, block, 28] += a0_28; total[t0 + 0, block, 29] += a0_29
                total[t0 + 0, block, 30] += a0_30; total[t0 + 0, block, 31] += a0_31
                if 1 < last:
                    total[t0 + 1, block, 0] += a1_0; total[t0 + 1, block, 1] += a1_1
                    total[t0 + 1, block, 2] += a1_2; total[t0 + 1, block, 3] += a1_3
                    total[t0 + 1, block, 4] += a1_4; total[t0 + 1, block, 5] += a1_5
                    total[t0 + 1, block, 6] += a1_6; total[t0 + 1, block, 7] += a1_7
                    total[t0 + 1, block, 8] += a1_8; total[t0 + 1, block, 9] += a1_9
                    total[t0 + 1, block, 10] += a1_10; total[t0 + 1, block, 11] += a1_11
                    total[t0 + 1, block, 12] += a1_12; total[t0 + 1, block, 13] += a1_13
                    total[t0 + 1, block, 14] += a1_14; total[t0 + 1, block, 15] += a1_15
                    total[t0 + 1, block, 16] += a1_16; total[t0 + 1, block, 17] += a1_17
                    total[t0 + 1, block, 18] += a1_18; total[t0 + 1, block, 19] += a1_19
                    total[t0 + 1, block, 20] += a1_20; total[t0 + 1, block, 21] += a1_21
                    total[t0 + 1, block, 22] += a1_22; total[t0 + 1, block, 23] += a1_23
                    total[t0 + 1, block, 24] += a1_24; total[t0 + 1, block, 25] += a1_25
                    total[t0 + 1, block, 26] += a1_26; total[t0 + 1, block, 27] += a1_27
                    total[t0 + 1, block, 28] += a1_28; total[t0 + 1, block, 29] += a1_29
                    total[t0 + 1, block, 30] += a1_30; total[t0 + 1, block, 31] += a1_31
                if 2 < last:
                    total[t0 + 2, block, 0] += a2_0; total[t0 + 2, block, 1] += a2_1
                    total[t0 + 2, block, 2] += a2_2; total[t0 + 2, block, 3] += a2_3
                    total[t0 + 2, block, 4] += a2_4; total[t0 + 2, block, 5] += a2_5
                    total[t0 + 2, block, 6] += a2_6; total[t0 + 2, block, 7] += a2_7
                    total[t0 + 2, block, 8] += a2_8; total[t0 + 2, block, 9] += a2_9
                    total[t0 + 2, block, 10] += a2_10; total[t0 + 2, block, 11] += a2_11
                    total[t0 + 2, block, 12] += a2_12; total[t0 + 2, block, 13] += a2_13
                    total[t0 + 2, block, 14] += a2_14; total[t0 + 2, block, 15] += a2_15
                    total[t0 + 2, block, 16] += a2_16; total[t0 + 2, block, 17] += a2_17
                    total[t0 + 2, block, 18] += a2_18; total[t0 + 2, block, 19] += a2_19
                    total[t0 + 2, block, 20] += a2_20; total[t0 + 2, block, 21] += a2_21
                    total[t0 + 2, block, 22] += a2_22; total[t0 + 2, block, 23] += a2_23
                    total[t0 + 2, block, 24] += a2_24; total[t0 + 2, block, 25] += a2_25
                    total[t0 + 2, block, 26] += a2_26; total[t0 + 2, block, 27] += a2_27
                    total[t0 + 2, block, 28] += a2_28; total[t0 + 2, block, 29] += a2_29
                    total[t0 + 2, block, 30] += a2_30; total[t0 + 2, block, 31] += a2_31
                if 3 < last:
                    total[t0 + 3, block, 0] += a3_0; total[t0 + 3, block, 1] += a3_1
                    total[t0 + 3, block, 2] += a3_2; total[t0 + 3, block, 3] += a3_3
                    total[t0 + 3, block, 4] += a3_4; total[t0 + 3, block, 5] += a3_5
                    total[t0 + 3, block, 6] += a3_6; total[t0 + 3, block, 7] += a3_7
                    total[t0 + 3, block, 8] += a3_8; total[t0 + 3, block, 9] += a3_9
                    total[t0 + 3, block, 10] += a3_10; total[t0 + 3, block, 11] += a3_11
                    total[t0 + 3, block, 12] += a3_12; total[t0 + 3, block, 13] += a3_13
                    total[t0 + 3, block, 14] += a3_14; total[t0 + 3, block, 15] += a3_15
                    total[t0 + 3, block, 16] += a3_16; total[t0 + 3, block, 17] += a3_17
                    total[t0 + 3, block, 18] += a3_18; total[t0 + 3, block, 19] += a3_19
                    total[t0 + 3, block, 20] += a3_20; total[t0 + 3, block, 21] += a3_21
                    total[t0 + 3, block, 22] += a3_22; total[t0 + 3, block, 23] += a3_23
                    total[t0 + 3, block, 24] += a3_24; total[t0 + 3, block, 25] += a3_25
                    total[t0 + 3, block, 26] += a3_26; total[t0 + 3, block, 27] += a3_27
                    total[t0 + 3, block, 28] += a3_28; total[t0 + 3, block, 29] += a3_29
                    total[t0 + 3, block, 30] += a3_30; total[t0 + 3, block, 31] += a3_31


def _applies(ctx, x, filters_shape, *arrays):
    return (x.ndim == 4 and x.shape[3] == 1 and filters_shape[3] % BLOCK == 0
            and jit.usable(ctx, x, *arrays) and all(a.dtype == x.dtype for a in arrays))


def _geometry(ctx, x, kernel_hw, rows, cols):
    """(tap offsets, row step, column step) in the padded images flattened (``_flat``);
    ``rows``/``cols``: (out, pad before, pad after) as nn_conv's ``_spatial`` gives them."""
    strides = ctx.attrs["strides"]
    dilations = ctx.attrs.get("dilations", (1, 1, 1, 1))
    width = x.shape[2] + cols[1] + cols[2]
    offsets = np.array([i * dilations[1] * width + j * dilations[2]
                        for i in range(kernel_hw[0]) for j in range(kernel_hw[1])], np.int64)
    return jit.readonly(offsets), int(width * strides[1]), int(strides[2])


def _flat(x, rows, cols):
    padded = np.pad(x[..., 0], ((0, 0), (rows[1], rows[2]), (cols[1], cols[2])))
    return jit.readonly(padded.reshape(x.shape[0], -1))


def forward(ctx, x, filters, rows, cols, out, fused=None):
    """Conv2D [+ BiasAdd [+ Relu]] of ``x`` into ``out`` by ``_forward``, True; False (nothing
    done) where the loop does not apply. ``fused``: (the fused ops, the bias) or None."""
    activation = None if fused is None or len(fused[0]) < 2 else fused[0][1]
    bias = () if fused is None else (fused[1],)
    if (activation not in (None, "Relu") or out.dtype != x.dtype
            or not _applies(ctx, x, filters.shape, filters, *bias)):
        return False
    kh, kw, _, depth_out = filters.shape
    offsets, row_step, col_step = _geometry(ctx, x, (kh, kw), rows, cols)
    packed = jit.readonly(np.ascontiguousarray(  # (a view of the filter where O is 32)
        filters.reshape(kh * kw, depth_out // BLOCK, BLOCK).transpose(1, 0, 2)))
    blocks = (np.ascontiguousarray(fused[1]) if bias else np.full(depth_out, -0.0, x.dtype))
    blocks = jit.readonly(blocks.reshape(depth_out // BLOCK, BLOCK))
    floor = x.dtype.type(0 if activation == "Relu" else np.nan)

    def chunk(start, stop):
        _forward(_flat(x[start:stop], rows, cols), offsets, row_step, col_step, packed,
                 blocks, floor, out[start:stop])
    per_image = rows[0] * cols[0]
    intra_op.for_batch(ctx, x.shape[0], per_image * kh * kw * depth_out
                       // intra_op.MACS_PER_WORK, chunk, per_image * kh * kw * x.itemsize)
    return True


def filter_grad(ctx, x, grad, f_shape, rows, cols):
    """Conv2DBackpropFilter by ``_filter_grad``: the ``f_shape`` gradient, or None where the
    loop does not apply."""
    if grad.ndim != 4 or not _applies(ctx, x, f_shape, grad):
        return None
    kh, kw, _, depth_out = f_shape
    offsets, row_step, col_step = _geometry(ctx, x, (kh, kw), rows, cols)
    partials = {}

    def chunk(start, stop):
        total = np.zeros((kh * kw, depth_out), dtype=x.dtype)
        _filter_grad(_flat(x[start:stop], rows, cols), offsets, row_step, col_step,
                     jit.readonly(np.ascontiguousarray(grad[start:stop])), total)
        partials[start] = total
    per_image = rows[0] * cols[0]
    intra_op.for_batch(ctx, x.shape[0], per_image * kh * kw * depth_out
                       // intra_op.MACS_PER_WORK, chunk, per_image * kh * kw * x.itemsize)
    ordered = [partials[start] for start in sorted(partials)]
    total = ordered[0]
    for partial in ordered[1:]:
        total += partial
    return total.reshape(f_shape)


def _warmer(dtype):
    def warm():
        """Compile (or load from the disk cache) both loops for ``dtype``: ~10 s each the
        first time on this machine (their unrolled blocks), ~0.1 s from the cache. The
        inputs read-only, as ``forward`` and ``filter_grad`` pass them (``jit.readonly``)."""
        ro = jit.readonly
        images, offsets = ro(np.zeros((1, 3 * 3), dtype)), ro(np.zeros(1, np.int64))
        _forward(images, offsets, 3, 1, ro(np.zeros((1, 1, BLOCK), dtype)),
                 ro(np.zeros((1, BLOCK), dtype)), dtype(0), np.zeros((1, 3, 3, BLOCK), dtype))
        _filter_grad(images, offsets, 3, 1, ro(np.zeros((1, 3, 3, BLOCK), dtype)),
                     np.zeros((1, BLOCK), dtype))
    return warm


_WARM = {np.dtype(dtype): _warmer(dtype) for dtype in (np.float32, np.float64)}


def preload(ctx, f_shape, other=None):
    """A prepare hook's value for a convolution node whose static filter shape ``f_shape``
    (HWIO, None where unknown) may take the loops: ``jit.preload`` of their warm-up, with
    ``other`` (the node's other ``Preload``, or None) run first; ``other`` alone where the
    loops cannot run (input depth known and not 1, output depth known and not a multiple of
    ``BLOCK``, a dtype they do not take, a device that is not numpy's) or are warm."""
    warm = _WARM.get(np.dtype(ctx.output_dtypes[0]))
    if (ctx.xp is not np or warm is None or f_shape[2] not in (1, None)
            or (f_shape[3] is not None and f_shape[3] % BLOCK)):
        return other
    return Preload.chained(other, jit.preload(warm))
