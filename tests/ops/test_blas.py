"""kernels/blas.py: MKL's GEMMs against numpy's (the reference), on the views the kernels pass
(transposed, strided, sliced, non-contiguous), empty and odd shapes, float32 and float64, split
over the intra-op pool, and through the kernels (MatMul, the fused MatMul, the convolutions).

Tolerance: MKL sums a product's K terms in another order than OpenBLAS, so an element may differ
by the rounding of a K-term sum: ``2 K eps (|a| @ |b|)`` an element (``close``). Where K is 1
each element is one rounded product: the same bits. Tests of MKL's form skip, saying why,
where the ``mkl`` wheel (the ``[mkl]`` extra) is not installed.
"""
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from asyncflow.exec import intra_op
from asyncflow.exec.devices import Device
from asyncflow.kernels import blas, intra_op as kernel_intra_op, math as math_kernels, nn_conv
from asyncflow.kernels.registry import Preload
from test_gemm_split_bits import operands

needs_mkl = pytest.mark.skipif(
    blas.CHOICE == "numpy" or not blas.available(),
    reason="MKL is not installed (the [mkl] extra) or ASYNCFLOW_BLAS=numpy: numpy's GEMMs only")
LAYOUTS = ("C", "F", "transposed", "strided", "sliced", "reversed rows", "broadcast rows")


@pytest.fixture(autouse=True)
def _mkl_wherever_it_applies(monkeypatch):
    monkeypatch.setattr(blas, "CHOICE", "mkl" if blas.CHOICE != "numpy" else "numpy")
    monkeypatch.setattr(blas, "_vendor", ["GenuineIntel"])  # (``auto``'s table, measured there)


def _ctx(threads=None, name="MatMul", **attrs):
    device = SimpleNamespace(intra_op=intra_op.shared_pool(threads) if threads else None)
    return SimpleNamespace(device=device, xp=np, name=name,
                           attrs={"transpose_a": False, "transpose_b": False, **attrs})


def close(value, a, b):
    """``value`` within a GEMM's rounding bound of numpy's ``a @ b`` (see the docstring)."""
    reference = np.matmul(a, b)
    assert value.dtype == reference.dtype and value.shape == reference.shape
    bound = 2 * max(a.shape[1], 1) * np.finfo(value.dtype).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(value - reference) <= bound)


def test_choice_numpy_keeps_numpy_s_matmul(monkeypatch):
    monkeypatch.setattr(blas, "CHOICE", "numpy")
    a, b = operands(0, np.float32, 200, 300, 100)
    assert not blas.available() and blas.name() == "numpy"
    assert blas.gemm(_ctx(), a, b) is not blas.mkl_matmul
    np.testing.assert_array_equal(blas.matmul(_ctx(), a, b), a @ b)


def test_an_unknown_choice_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(blas, "CHOICE", "openblas")
    with pytest.raises(ValueError, match="ASYNCFLOW_BLAS='openblas'.*auto, numpy, mkl"):
        blas.available()


def test_without_the_library_numpy_s_form_runs(monkeypatch):
    monkeypatch.setattr(blas, "_mkl", [])
    monkeypatch.setattr(blas, "_path", [None])
    monkeypatch.setattr(blas, "CHOICE", "mkl")
    with pytest.warns(RuntimeWarning, match="ASYNCFLOW_BLAS=mkl but MKL is not installed"):
        assert not blas.available()
    monkeypatch.setattr(blas, "CHOICE", "auto")
    a, b = operands(1, np.float32, 300, 300, 300)
    assert blas.name() == "numpy" and blas.gemm(_ctx(), a, b) is not blas.mkl_matmul
    np.testing.assert_array_equal(math_kernels._matmul(_ctx(), a, b)[0], a @ b)


def test_an_unloadable_library_warns_and_gives_none(tmp_path):
    broken = tmp_path / "libmkl_rt.so"
    broken.write_bytes(b"not a library")
    with pytest.warns(RuntimeWarning, match="cannot be loaded.*numpy's BLAS"):
        assert blas._open(str(broken)) is None  # (blas's own helper: tested here)


def test_other_dtypes_gpu_arrays_and_batches_stay_numpy_s():
    ctx = _ctx()
    for a, b in [(np.ones((64, 64), np.float16), np.ones((64, 64), np.float16)),
                 (np.ones((64, 64), np.complex64), np.ones((64, 64), np.complex64)),
                 (np.ones((64, 64), np.float32), np.ones((64, 64), np.float64)),
                 (np.ones((2, 64, 64), np.float32), np.ones((2, 64, 64), np.float32))]:
        assert blas.gemm(ctx, a, b) is not blas.mkl_matmul
    gpu = SimpleNamespace(device=None, xp=SimpleNamespace(matmul=None))
    assert blas.gemm(gpu, *operands(2, np.float32, 64, 64, 64)) is not blas.mkl_matmul


def test_auto_takes_mkl_for_the_shapes_it_measured_faster_on(monkeypatch):
    monkeypatch.setattr(blas, "CHOICE", "auto")
    monkeypatch.setattr(blas, "available", lambda: True)
    for m, k, n, mkl in [(128, 256, 10, False),   # (327 k multiply-adds: the call's cost)
                         (128, 256, 256, False), (256, 784, 256, False),  # (the dense models)
                         (25088, 25, 32, True), (25, 25088, 32, True), (128, 10, 1024, True),
                         (128, 3136, 1024, True), (3136, 128, 1024, True)]:
        assert (blas.gemm(_ctx(), *operands(3, np.float32, m, k, n)) is blas.mkl_matmul) is mkl


def test_auto_gives_mkl_nothing_on_a_cpu_it_was_not_measured_on(monkeypatch):
    """On an AMD CPU MKL measured no faster than numpy's OpenBLAS (``MKL_VENDORS``): ``auto``
    takes numpy's form for every product, has no Preload of MKL's and never loads it (a spy
    stands for the loader), while ``mkl`` still takes MKL there."""
    monkeypatch.setattr(blas, "CHOICE", "auto")
    monkeypatch.setattr(blas, "_vendor", ["AuthenticAMD"])
    monkeypatch.setattr(blas, "_mkl", [])
    monkeypatch.setattr(blas, "_path", ["libmkl_rt.so.3"])  # (found, not loaded yet)
    loads = []
    monkeypatch.setattr(blas, "_load", lambda: loads.append(1) or (None, None))
    for m, k, n in [(25088, 25, 32), (25, 25088, 32), (128, 10, 1024), (128, 3136, 1024),
                    (256, 784, 256)]:
        a, b = operands(3, np.float32, m, k, n)
        assert not blas.prefers(m, k, n) and blas.gemm(_ctx(), a, b) is not blas.mkl_matmul
    cpu = SimpleNamespace(xp=np, output_dtypes=[np.dtype(np.float32)])
    assert blas.preload(cpu) is None and loads == []
    assert blas.name() == "numpy" and loads == []  # (what bench_models reports as "gemm")
    monkeypatch.setattr(blas, "CHOICE", "mkl")
    assert blas.name() == "mkl" and loads == [1]
    assert isinstance(blas.preload(cpu), Preload)
    assert blas.gemm(_ctx(), *operands(3, np.float32, 128, 256, 256)) is blas.mkl_matmul
    monkeypatch.setattr(blas, "CHOICE", "auto")
    monkeypatch.setattr(blas, "_vendor", [None])  # (not readable: the measured table)
    assert blas.prefers(25088, 25, 32) and not blas.prefers(256, 784, 256)


def test_the_cpu_vendor_is_read_from_cpuinfo_s_head(monkeypatch, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert blas.vendor_of(str(cpuinfo)) == "AuthenticAMD"
    cpuinfo.write_text("processor\t: 0\nBogoMIPS\t: 50.00\n")  # (an ARM core: no vendor_id)
    assert blas.vendor_of(str(cpuinfo)) is None
    assert blas.vendor_of(str(tmp_path / "missing")) is None
    monkeypatch.setattr(blas, "_vendor", [])
    assert blas.cpu_vendor(str(cpuinfo)) is None and blas._vendor == [None]


def test_a_gram_product_stays_numpy_s_syrk(monkeypatch):
    monkeypatch.setattr(blas, "available", lambda: True)
    (x,) = operands(4, np.float32, 256, 300, 1)[:1]
    assert blas.gram(x, x.T) and blas.gemm(_ctx(), x, x.T) is not blas.mkl_matmul
    assert not blas.gram(x, x.T.copy())


def test_import_asyncflow_does_not_load_mkl():
    code = ("import sys, asyncflow, asyncflow.kernels.blas as b; "
            "assert not b._mkl, 'MKL loaded at import'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout_a", LAYOUTS)
@pytest.mark.parametrize("layout_b", LAYOUTS)
def test_mkl_against_numpy_on_every_layout(dtype, layout_a, layout_b):
    a, b = operands(5, dtype, 67, 131, 45, (layout_a, layout_b))
    out = np.full((67, 45), np.nan, dtype)
    assert blas.mkl_matmul(a, b, out) is out
    close(out, a, b)


@needs_mkl
def test_transposed_views_are_passed_as_they_are_not_copied(monkeypatch):
    calls = []
    real = blas._load()

    def spy(fn):
        def call(*args):
            calls.append(args)
            return fn(*args)
        return call
    monkeypatch.setattr(blas, "_mkl", [tuple(spy(fn) for fn in real)])
    monkeypatch.setattr(np, "matmul", None)  # (numpy's form must not run)
    a = np.ones((40, 30), np.float32).T  # [30, 40], transposed
    b = np.ones((50, 40), np.float32)[:, ::1].T  # [40, 50], transposed
    out = np.empty((60, 50), np.float32)[5:35]  # rows of a wider buffer: ldc 50
    blas.mkl_matmul(a, b, out)
    (args,) = calls
    assert args[:6] == (101, 112, 112, 30, 50, 40)  # row-major, both CblasTrans, m n k
    assert args[7] == a.ctypes.data and args[8] == 30 and args[10] == 40 and args[13] == 50
    monkeypatch.undo()
    np.testing.assert_array_equal(out, np.full((30, 50), 40, np.float32))


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", [(0, 5, 3), (4, 0, 3), (4, 5, 0), (0, 0, 0), (1, 1, 1),
                                     (1, 77, 1), (1, 77, 33), (33, 77, 1), (7, 1, 9),
                                     (513, 3, 257)])
def test_empty_and_odd_shapes(dtype, m, k, n):
    a, b = operands(m * 100 + k * 10 + n, dtype, m, k, n)
    out = np.full((m, n), np.nan, dtype)
    blas.mkl_matmul(a, b, out)
    if k <= 1:  # (one rounded product an element, or none: numpy's bits)
        np.testing.assert_array_equal(out, a @ b)
    close(out, a, b)


@needs_mkl
def test_views_blas_cannot_take_go_to_numpy_and_mismatches_are_refused():
    a, b = operands(6, np.float32, 20, 30, 10)
    out = np.empty((20, 20), np.float32)[:, ::2]  # (an output without a unit stride)
    blas.mkl_matmul(a, b, out)
    close(out, a, b)
    both = np.zeros((30, 30), np.float32)  # (an output overlapping an input)
    both[:, :10] = b
    blas.mkl_matmul(both[:20, :], both[:, :10], both[:20, 10:20])
    np.testing.assert_array_equal(both[:, :10], b)
    with pytest.raises(ValueError, match="mkl_matmul: float32.*float64"):
        blas.mkl_matmul(a, b.astype(np.float64), np.empty((20, 10), np.float32))
    with pytest.raises(ValueError, match=r"into float32\[20, 11\]"):
        blas.mkl_matmul(a, b, np.empty((20, 11), np.float32))


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n, threads", [(700, 300, 200, 2), (128, 3136, 1024, 2),
                                              (128, 784, 256, 3), (60, 200, 2000, 2)])
def test_split_over_the_intra_op_pool(dtype, m, k, n, threads):
    """The MatMul kernel split by rows or columns, each chunk one MKL call: close to numpy's
    whole product; the same bits whatever runs the chunks (a pair's GEMM, ``run_alone``,
    runs them one after the other: MKL's row blocks round by their block)."""
    a, b = operands(m + n, dtype, m, k, n, ("C", "transposed"))
    pool = intra_op.shared_pool(threads)
    splits = pool.splits
    split = math_kernels._matmul(_ctx(threads), a, b)[0]
    assert pool.splits > splits
    close(split, a, b)
    in_pair = []
    pool.run_alone(lambda start, stop: in_pair.append(
        math_kernels._matmul(_ctx(threads), a, b)[0]), [(0, 1)])
    np.testing.assert_array_equal(in_pair[0], split)


@needs_mkl
@pytest.mark.parametrize("transpose_a, transpose_b", [(False, False), (True, False),
                                                      (False, True), (True, True)])
def test_the_matmul_kernels_transposes(transpose_a, transpose_b):
    a, b = operands(7, np.float32, 150, 220, 90)
    a_in = np.ascontiguousarray(a.T) if transpose_a else a
    b_in = np.ascontiguousarray(b.T) if transpose_b else b
    ctx = _ctx(2, transpose_a=transpose_a, transpose_b=transpose_b)
    close(math_kernels._matmul(ctx, a_in, b_in)[0], a, b)
    bias = np.linspace(-1, 1, 90).astype(np.float32)
    fused = math_kernels._fused_matmul(
        _ctx(2, name="_FusedMatMul", transpose_a=transpose_a, transpose_b=transpose_b,
             fused_ops=["BiasAdd", "Relu"]), a_in, b_in, bias)[0]
    reference = np.maximum(a @ b + bias, 0)
    assert np.all(np.abs(fused - reference)
                  <= 2 * 220 * np.finfo(np.float32).eps * (np.abs(a) @ np.abs(b)))


@needs_mkl
@pytest.mark.parametrize("depth_in", [1, 3])
def test_the_convolutions_patch_gemms(depth_in, monkeypatch):
    """Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter (their patch GEMMs, the direct
    form) with MKL against the same kernels with numpy's GEMMs, split over two threads."""
    monkeypatch.setattr(nn_conv.nn_conv_fft, "choose", lambda *args: None)
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 13, 11, depth_in)).astype(np.float32)
    filters = rng.standard_normal((5, 5, depth_in, 32)).astype(np.float32)
    grad = rng.standard_normal((6, 13, 11, 32)).astype(np.float32)
    ctx = SimpleNamespace(attrs={"strides": (1, 1, 1, 1), "dilations": (1, 1, 1, 1),
                                 "padding": "SAME"}, name="conv", xp=np,
                          device=Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, 2,
                                        intra_op_threads=2))
    used = []
    real = blas.mkl_matmul
    monkeypatch.setattr(blas, "mkl_matmul", lambda a, b, out: used.append(1) or real(a, b, out))

    def run():
        return (nn_conv._conv2d(ctx, x, filters)[0],
                nn_conv._conv2d_backprop_input(ctx, np.array(x.shape), filters, grad)[0],
                nn_conv._conv2d_backprop_filter(ctx, x, np.array(filters.shape), grad)[0])
    with_mkl = run()
    assert used  # (MKL ran the patch GEMMs)
    monkeypatch.setattr(blas, "CHOICE", "numpy")
    for value, reference in zip(with_mkl, run()):
        np.testing.assert_allclose(value, reference, rtol=0,
                                   atol=1e-5 * np.abs(reference).max())


def test_a_convolutions_chunks_take_the_library_chosen_for_the_whole_product(monkeypatch):
    """``auto`` chooses by the whole product's shape (``blas.gemm``'s ``whole``): a thin patch
    GEMM of 5 M multiply-adds goes to MKL in every batch chunk, though each chunk (one image,
    0.6 M) is below ``MKL_FROM_MACS`` alone; one of 0.6 M in all stays numpy's. MKL's form is
    a spy here (numpy's product), so this runs without the wheel."""
    from asyncflow.kernels import jit
    monkeypatch.setattr(blas, "CHOICE", "auto")
    monkeypatch.setattr(blas, "available", lambda: True)
    used = []
    monkeypatch.setattr(blas, "mkl_matmul",
                        lambda a, b, out: used.append(a.shape) or np.matmul(a, b, out=out))
    monkeypatch.setattr(nn_conv.nn_conv_fft, "choose", lambda *args: None)
    monkeypatch.setattr(jit, "ENABLED", False)  # (the one-channel loops: the numpy forms)
    monkeypatch.setattr(kernel_intra_op, "MIN_SPLIT_WORK", 0)
    monkeypatch.setattr(kernel_intra_op, "CHUNK_BYTES", 1)  # (one image a chunk)
    ctx = SimpleNamespace(attrs={"strides": (1, 1, 1, 1), "dilations": (1, 1, 1, 1),
                                 "padding": "SAME"}, name="conv", xp=np,
                          device=Device("/job:localhost/replica:0/task:0/device:CPU:0", 0, 2,
                                        intra_op_threads=2))
    rng = np.random.default_rng(9)
    filters = rng.standard_normal((5, 5, 1, 32)).astype(np.float32)
    for images, chunks in ((8, 8), (1, 0)):
        x = rng.standard_normal((images, 28, 28, 1)).astype(np.float32)
        grad = rng.standard_normal((images, 28, 28, 32)).astype(np.float32)
        used.clear()
        nn_conv._conv2d(ctx, x, filters)
        assert used == [(784, 25)] * chunks
        used.clear()
        nn_conv._conv2d_backprop_filter(ctx, x, np.array(filters.shape), grad)
        assert used == [(25, 784)] * chunks


def test_preload_only_where_mkl_may_run_and_is_not_loaded(monkeypatch):
    cpu = SimpleNamespace(xp=np, output_dtypes=[np.dtype(np.float32)])
    monkeypatch.setattr(blas, "CHOICE", "auto")  # (whatever ASYNCFLOW_BLAS this run has)
    monkeypatch.setattr(blas, "_mkl", [])
    monkeypatch.setattr(blas, "_path", ["libmkl_rt.so.3"])  # (found, not loaded yet)
    assert isinstance(blas.preload(cpu), Preload)
    assert blas.preload(SimpleNamespace(xp=object(), output_dtypes=cpu.output_dtypes)) is None
    assert blas.preload(SimpleNamespace(xp=np, output_dtypes=[np.dtype(np.float16)])) is None
    monkeypatch.setattr(blas, "CHOICE", "numpy")
    assert blas.preload(cpu) is None
    monkeypatch.setattr(blas, "CHOICE", "mkl")
    monkeypatch.setattr(blas, "_path", [None])  # (not installed: nothing to preload)
    assert blas.preload(cpu) is None
    monkeypatch.setattr(blas, "_mkl", [None])  # (tried: not loadable)
    assert blas.preload(cpu) is None and blas.name() == "numpy"


@needs_mkl
def test_the_preload_loads_mkl_and_makes_its_first_call(monkeypatch):
    monkeypatch.setattr(blas, "_mkl", [])
    calls = []
    real = blas.mkl_matmul
    monkeypatch.setattr(blas, "mkl_matmul", lambda a, b, out: calls.append(a.dtype) or
                        real(a, b, out))
    blas.preload(SimpleNamespace(xp=np, output_dtypes=[np.dtype(np.float32)])).load(None)
    assert blas._mkl[0] is not None and set(calls) == set(blas.DTYPES)


@needs_mkl
async def test_a_session_s_matmul_runs_on_mkl(monkeypatch):
    import asyncflow as af
    calls = []
    real = blas.mkl_matmul
    monkeypatch.setattr(blas, "mkl_matmul", lambda a, b, out: calls.append(a.shape) or
                        real(a, b, out))
    a, b = operands(9, np.float32, 200, 300, 100)
    graph = af.Graph()
    with graph.as_default(), af.device("/cpu:0"):  # MKL is the CPU's (a GPU visible or not)
        x = af.placeholder(af.float32, [None, 300])
        y = af.matmul(x, af.constant(b.T.copy()), transpose_b=True)
    async with af.Session(graph=graph) as session:
        value = await session.run(y, {x: a})
    assert (200, 300) in calls
    close(value, a, b)


@needs_mkl
def test_an_ilp64_interface_set_before_is_refused_with_a_warning():
    """A library of the process that loaded MKL first on its ILP64 interface (64-bit ints):
    MKL keeps it, and the c_int argtypes would pass half-read ints: numpy's form, a warning."""
    code = ("import ctypes, warnings, numpy as np\n"
            "from asyncflow.kernels import blas\n"
            "blas.CHOICE = 'mkl'  # (auto on a CPU outside MKL_VENDORS would not load it)\n"
            "assert ctypes.CDLL(blas.mkl_library_path()).MKL_Set_Interface_Layer(1) == 1\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always')\n"
            "    assert blas.name() == 'numpy', 'MKL taken on its ILP64 interface'\n"
            "assert any('ILP64' in str(w.message) for w in caught), caught\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@needs_mkl
async def test_a_convolution_only_plan_loads_mkl_off_the_event_loop(monkeypatch):
    """A plan with convolutions and no MatMul: their prepare hook has MKL loaded on a worker
    thread (a small Conv2D runs on the loop, and would load it there on its first call)."""
    import threading

    import asyncflow as af
    monkeypatch.setattr(blas, "_mkl", [])
    opened = []
    real = blas._open
    monkeypatch.setattr(blas, "_open", lambda path: opened.append(
        threading.current_thread()) or real(path))
    graph = af.Graph()
    with graph.as_default(), af.device("/cpu:0"):  # MKL is the CPU's (a GPU visible or not)
        x = af.placeholder(af.float32, [2, 8, 8, 3])
        y = af.nn.conv2d(x, af.constant(np.ones((5, 5, 3, 32), np.float32)), [1, 1, 1, 1],
                         "SAME")
    async with af.Session(graph=graph) as session:
        value = await session.run(y, {x: np.ones((2, 8, 8, 3), np.float32)})
    assert value.shape == (2, 8, 8, 32)
    assert opened and threading.main_thread() not in opened


def test_auto_s_lookup_is_cheap_enough_for_the_event_loop(monkeypatch, tmp_path):
    """The prepare hook (on the event loop, at plan building) asks whether MKL is installed:
    ``auto`` looks for the wheel's file only, never importlib.metadata's scan nor
    ``find_library``'s ``ldconfig`` subprocess (the common case: MKL not installed)."""
    import ctypes.util
    import site

    def refused(*args):
        raise AssertionError("the full lookup ran on the prepare hook's thread")
    monkeypatch.setattr(ctypes.util, "find_library", refused)
    monkeypatch.setattr(blas, "mkl_library_path", refused)
    monkeypatch.setattr(blas.sys, "prefix", str(tmp_path))
    monkeypatch.setattr(site, "getuserbase", lambda: str(tmp_path / "user"))
    monkeypatch.setattr(blas.glob, "glob", lambda pattern: [] if not pattern.startswith(
        str(tmp_path)) else sorted(str(p) for p in tmp_path.glob("lib/libmkl_rt.so*")))
    monkeypatch.setattr(blas, "CHOICE", "auto")
    monkeypatch.setattr(blas, "_mkl", [])
    monkeypatch.setattr(blas, "_path", [])
    cpu = SimpleNamespace(xp=np, output_dtypes=[np.dtype(np.float32)])
    assert blas.preload(cpu) is None and blas._path == [None]
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libmkl_rt.so.3").write_bytes(b"")
    monkeypatch.setattr(blas, "_path", [])
    assert isinstance(blas.preload(cpu), Preload)
    assert blas._path == [str(tmp_path / "lib" / "libmkl_rt.so.3")]
    monkeypatch.setattr(blas, "CHOICE", "mkl")  # (asked for: the full lookup, in the Preload)
    monkeypatch.setattr(blas, "_path", [])
    assert isinstance(blas.preload(cpu), Preload) and blas._path == []


def test_auto_finds_the_wheel_of_another_environment_on_sys_path(monkeypatch, tmp_path):
    """A venv made with ``--system-site-packages``, or one that adds another environment's
    packages by a ``.pth``, imports the ``mkl`` wheel's packages from that environment: its
    ``libmkl_rt`` is in that environment's ``lib``, not under ``sys.prefix``."""
    import site
    other = tmp_path / "other"
    packages = other / "lib" / "python3.11" / "site-packages"
    packages.mkdir(parents=True)
    monkeypatch.setattr(blas.sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setattr(site, "getuserbase", lambda: str(tmp_path / "user"))
    monkeypatch.setattr(blas.sys, "path", [str(tmp_path / "venv" / "lib"), str(packages)])
    real_glob = blas.glob.glob
    monkeypatch.setattr(blas.glob, "glob", lambda pattern: real_glob(pattern) if
                        pattern.startswith(str(tmp_path)) else [])
    assert blas.wheel_library_path() is None
    (other / "lib" / "libmkl_rt.so.2").write_bytes(b"")
    assert blas.wheel_library_path() == str(other / "lib" / "libmkl_rt.so.2")


def test_a_nodes_two_preloads_chain_in_order():
    # (blas.preload's ``other``, the conv loops' and the sigmoid epilogue's: one Preload)
    seen = []
    first = Preload(lambda node: seen.append(("first", node)))
    second = Preload(lambda node: seen.append(("second", node)))
    assert Preload.chained(None, None) is None
    assert Preload.chained(first, None) is first and Preload.chained(None, second) is second
    Preload.chained(first, second).load("n")
    assert seen == [("first", "n"), ("second", "n")]
