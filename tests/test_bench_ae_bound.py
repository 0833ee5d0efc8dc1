"""bench_ae_bound's shapes and arithmetic: the autoencoder's eleven GEMMs and their balanced
lists, the eight variables, the bound against 0.8x TF1 and TF's GEMM floor; a run with
neither TF nor MKL, and one with a stand-in ``tensorflow`` on the children's path (which TF
sessions each child process opens)."""
import os
import subprocess
import sys

import pytest

BENCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench")
sys.path.append(BENCH)
ae_bound = pytest.importorskip("bench_ae_bound")


def test_the_eleven_gemms_are_the_steps_307_2_m_multiply_adds():
    items = ae_bound.gemm_list()
    kinds = [label.split()[0] for label, *_ in items]
    assert (kinds.count("fwd"), kinds.count("dW"), kinds.count("dx")) == (4, 4, 3)
    macs = [m for *_, m in items]
    assert sum(macs) == ae_bound.KNOWN_MACS == 307_232_768
    assert f"{sum(macs) / 1e6:.1f}" == "307.2"
    assert sorted(macs) == [256 * 256 * 128] * 6 + [256 * 784 * 256] * 5
    for label, a, b, m in items:  # the label's m x k x n is the operands'
        assert label.split()[1] == f"{a.shape[0]}x{a.shape[1]}x{b.shape[1]}"
        assert a.shape[1] == b.shape[0] and m == a.shape[0] * a.shape[1] * b.shape[1]


def test_the_two_lists_take_every_gemm_once_and_balance_the_multiply_adds():
    macs = [m for *_, m in ae_bound.gemm_list()]
    first, second = ae_bound.balanced_lists(macs)
    assert sorted(first + second) == list(range(11))
    sums = sorted(sum(macs[i] for i in side) for side in (first, second))
    assert sums == [153_092_096, 154_140_672]  # 2 x 51.4 M + 6 x 8.4 M against 3 x 51.4 M
    assert ae_bound.balanced_lists([5, 1, 1, 1, 1, 1]) == ([0], [1, 2, 3, 4, 5])


def test_the_bound_is_the_gemm_floor_and_half_the_rest_against_0_8_of_tf1():
    value, target, ratio = ae_bound.bound(3.0, 1.0, 5.0)
    assert (value, target) == (3.5, pytest.approx(4.0))
    assert ratio == pytest.approx(0.875)
    assert ae_bound.bound(3.2, 0.8, 4.5)[2] == pytest.approx(3.6 / 3.6)


def test_tfs_gemm_floor_scales_ours_by_tfs_one_thread_rate_not_halves_its_total():
    # TF 5% faster on one thread: our two-core floor 5% lower, not TF's one-core total / 2
    # (2.85 ms: a second core at no cost, against a floor that paid for it).
    assert ae_bound.tf_gemm_floor(3.2, 6.0, tf_one=5.7) == pytest.approx(3.04)
    assert ae_bound.tf_gemm_floor(3.2, 6.0, tf_one=5.7, tf_two=3.0) == 3.0
    assert ae_bound.tf_gemm_floor(3.2, 6.0, tf_two=4.0) == 4.0
    assert ae_bound.tf_gemm_floor(3.2, 6.0) is None


def test_the_eight_variables_hold_468_368_values():
    sizes = ae_bound.param_sizes()
    assert sizes == [200704, 256, 32768, 128, 32768, 256, 200704, 784]
    assert sum(sizes) == 468_368


def test_a_run_without_tf_nor_mkl_skips_them_and_says_why():
    env = {k: v for k, v in os.environ.items() if k != "ASYNCFLOW_TF_PYTHON"}
    env["ASYNCFLOW_BLAS"] = "numpy"
    done = subprocess.run([sys.executable, os.path.join(BENCH, "bench_ae_bound.py"),
                           "--rounds", "1", "--repeat", "2"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "MKL skipped: ASYNCFLOW_BLAS=numpy" in out
    assert "skipped: no --tf-python nor ASYNCFLOW_TF_PYTHON given" in out
    assert "eleven GEMMs, 307.2 M multiply-adds" in out
    assert "GEMM floor on two cores (ours)" in out and "d. bound:" in out
    assert "MKL" not in out.split("a. per GEMM")[1].split("GEMM floor")[0]


FAKE_TF = '''"""tensorflow.compat.v1 as far as bench_ae_bound's TF children use it: each Session's
intra-op setting written to $FAKE_TF_LOG with the process's id; everything else a Node."""
import os

__version__ = "fake"


class Node:
    def __getattr__(self, name):
        return Node()

    def __call__(self, *args, **kwargs):
        return Node()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    __add__ = __sub__ = __mul__ = __radd__ = __rsub__ = __call__


class ConfigProto(Node):
    def __init__(self, intra_op_parallelism_threads=0, **kwargs):
        self.intra_op = intra_op_parallelism_threads


class Session(Node):
    def __init__(self, graph=None, config=None):
        with open(os.environ["FAKE_TF_LOG"], "a") as log:
            log.write(f"{os.getpid()} {config.intra_op if config else 0}\\n")

    def run(self, *args, **kwargs):
        return None


def __getattr__(name):
    return Node()
'''


def fake_tf(tmp_path):
    """``FAKE_TF`` as a ``tensorflow`` package under ``tmp_path``; its session log's path and an
    environment without ``ASYNCFLOW_TF_PYTHON`` (the package not yet on its path)."""
    package = tmp_path / "tensorflow"
    (package / "compat").mkdir(parents=True)
    (package / "__init__.py").write_text("from tensorflow import compat\n")
    (package / "compat" / "__init__.py").write_text("from tensorflow.compat import v1\n")
    (package / "compat" / "v1.py").write_text(FAKE_TF)
    env = {k: v for k, v in os.environ.items() if k != "ASYNCFLOW_TF_PYTHON"}
    return tmp_path / "sessions.log", env


def test_each_tf_matmul_setting_runs_in_a_process_whose_sessions_all_share_it(tmp_path):
    # TF sizes a process's intra-op pool by its first session and ignores a later session's
    # setting: MatMuls "at intra-op 1" in the process of the step's default session ran on
    # the step's pool of two threads (77 G multiply-adds/s, CPU/wall 1.7).
    log, env = fake_tf(tmp_path)
    env.update(ASYNCFLOW_BLAS="numpy", FAKE_TF_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, os.path.join(BENCH, "bench_ae_bound.py"),
                           "--rounds", "1", "--repeat", "2", "--steps", "1", "--chain", "2",
                           "--tf-python", sys.executable], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    settings = {}
    for line in log.read_text().splitlines():
        pid, intra_op = line.split()
        settings.setdefault(pid, []).append(int(intra_op))
    # the step (default config) before and after ours, MatMuls at 1 and at 2: four processes
    assert sorted(sorted(set(values)) for values in settings.values()) == [[0], [0], [1], [2]]
    assert sorted(len(values) for values in settings.values()) == [1, 1, 11, 11]
    out = done.stdout
    assert "MatMul eleven, intra-op 1 (a process of its own)" in out
    assert "MatMul eleven, intra-op 2 (a process of its own)" in out
    assert "OpenBLAS's one thread / TF's intra-op 1" in out and "d. bound " in out
    assert "step before ours and after " in out


def test_the_tf_gemm_ab_opens_one_session_at_intra_op_1_and_prints_both_ratios(tmp_path):
    log, env = fake_tf(tmp_path)
    script = os.path.join(BENCH, "bench_tf_gemm_ab.py")
    done = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode != 0 and "no --tf-python nor ASYNCFLOW_TF_PYTHON" in done.stderr
    env.update(FAKE_TF_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, script, "--rounds", "3", "--repeat", "1", "--chain",
                           "1", "--tf-python", sys.executable], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [line.split()[1] for line in log.read_text().splitlines()] == ["1"]
    out = done.stdout
    assert out.count("TF/numpy") == 3 and "(TF, numpy, numpy A/A)" in out
    assert "(numpy, numpy A/A, TF)" in out and "(numpy A/A, TF, numpy)" in out
    assert "TF / numpy: median" in out and "numpy A/A / numpy: median" in out
