"""Run a snippet under TensorFlow 1.x semantics (``tf.compat.v1``) in another interpreter.

TensorFlow is never a dependency: differential tests call ``tf1_run`` and skip when no
interpreter with TensorFlow is found. It is looked for in ``$ASYNCFLOW_TF_PYTHON`` (a path to
a Python that can ``import tensorflow``), then in the interpreter running the tests.

The snippet sees ``tf`` (``tensorflow.compat.v1`` with v2 behavior off), ``np``, and
``inputs`` (a dict of numpy arrays); it fills the dict ``outputs`` with arrays (or lists of
arrays, stored as ``name/0``, ``name/1``...), which ``tf1_run`` returns. TF >= 2.16 keeps
``tf.compat.v1.nn.rnn_cell`` and ``tf.compat.v1.layers`` only with the ``tf_keras`` package
(used through ``TF_USE_LEGACY_KERAS=1``); without it those tests skip.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

_PRELUDE = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()
tf.logging.set_verbosity(tf.logging.ERROR)
_data = np.load(sys.argv[1], allow_pickle=False)
inputs = {k: _data[k] for k in _data.files}
outputs = {}
"""

_EPILOGUE = """
_flat = {}
for _k, _v in outputs.items():
    if isinstance(_v, (list, tuple)):
        for _i, _item in enumerate(_v):
            _flat[f"{_k}/{_i}"] = np.asarray(_item)
    else:
        _flat[_k] = np.asarray(_v)
np.savez(sys.argv[2], **_flat)
"""


@functools.lru_cache(maxsize=1)
def _has_legacy_keras(python):
    probe = subprocess.run([python, "-c", "import tf_keras"], capture_output=True, timeout=300)
    return probe.returncode == 0


@functools.lru_cache(maxsize=1)
def tf_python():
    """A Python executable that imports tensorflow, or None."""
    candidates = [os.environ.get("ASYNCFLOW_TF_PYTHON"), sys.executable]
    for candidate in candidates:
        if not candidate or not os.path.exists(candidate):
            continue
        probe = subprocess.run([candidate, "-c", "import tensorflow"], capture_output=True,
                               timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        if probe.returncode == 0:
            return candidate
    return None


def tf1_run(snippet, tmp_path, **inputs):
    """Run ``snippet`` under TF1 and return its ``outputs`` (skips when TF is absent)."""
    python = tf_python()
    if python is None:
        pytest.skip("TensorFlow is not importable (set ASYNCFLOW_TF_PYTHON to a Python with it)")
    source = tmp_path / "tf1_snippet.py"
    source.write_text(_PRELUDE + textwrap.dedent(snippet) + _EPILOGUE)
    inputs_path, outputs_path = tmp_path / "tf1_inputs.npz", tmp_path / "tf1_outputs.npz"
    np.savez(inputs_path, **{k: np.asarray(v) for k, v in inputs.items()})
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    if _has_legacy_keras(python):  # TF1's rnn_cell and layers need Keras 2 under TF >= 2.16
        env["TF_USE_LEGACY_KERAS"] = "1"
    done = subprocess.run([python, str(source), str(inputs_path), str(outputs_path)],
                          capture_output=True, text=True, timeout=600, env=env)
    if done.returncode != 0 and "is not available with Keras 3" in done.stderr:
        pytest.skip("TF1's rnn_cell/layers need the tf_keras package next to TensorFlow")
    if done.returncode != 0:
        raise AssertionError(f"the TF1 snippet failed:\n{done.stderr[-4000:]}")
    with np.load(outputs_path, allow_pickle=False) as data:
        flat = {k: data[k] for k in data.files}
    out = {}
    for key, value in flat.items():
        if "/" in key:
            name, index = key.rsplit("/", 1)
            out.setdefault(name, {})[int(index)] = value
        else:
            out[key] = value
    return {k: [v[i] for i in sorted(v)] if isinstance(v, dict) else v for k, v in out.items()}


def compat_run(snippet, inputs):
    """Run ``snippet`` here under ``asyncflow.compat.v1`` (``tf``), with ``np`` and ``inputs``
    as ``tf1_run`` gives them; returns its ``outputs``: the same program as TF1's side."""
    import asyncflow.compat.v1 as tf  # here, not at import: this module also serves TF-only checks
    outputs = {}
    exec(compile(textwrap.dedent(snippet), "snippet", "exec"),  # noqa: S102
         {"tf": tf, "np": np, "inputs": inputs, "outputs": outputs})
    return outputs


def compare_groups(ours, theirs, groups, rtol=1e-12, atol=0.0, float32=None):
    """Assert that each group of our values is TF1's: ``ours`` holds one list of values per
    name in ``groups`` (in order), ``theirs`` is ``tf1_run``'s dict. A group has TF1's count
    of values, each of TF1's shape and dtype and within ``rtol``/``atol`` of TF1's, or within
    the pair ``float32`` (rtol, atol) where the value is float32 (where TF1 computes in
    float32 and ours rounds a float64 result once)."""
    assert len(ours) == len(groups), (len(ours), groups)
    for group, values in zip(groups, ours):
        expected_values = theirs[group]
        assert len(values) == len(expected_values), (group, len(values), len(expected_values))
        for i, (value, expected) in enumerate(zip(values, expected_values)):
            value = np.asarray(value)
            assert value.shape == expected.shape, (group, i, value.shape, expected.shape)
            assert value.dtype == expected.dtype, (group, i, value.dtype, expected.dtype)
            r, a = float32 if float32 is not None and value.dtype == np.float32 else (rtol, atol)
            np.testing.assert_allclose(value, expected, rtol=r, atol=a, err_msg=f"{group}[{i}]")
