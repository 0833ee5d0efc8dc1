"""The demos leave nothing behind in the temporary directory (issue 19).

Each demo runs as a user runs it, as a script, with ``TMPDIR`` pointing at a fresh empty
directory; afterwards that directory must be empty again.
"""
import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

DEMOS = pathlib.Path(__file__).resolve().parent.parent / "demos"
DEMO_DEADLINE_S = 300  # guards against a hang only
pytest.importorskip("sklearn")


def demo_env(tmpdir):
    return {**os.environ, "TMPDIR": str(tmpdir), "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1"}


@pytest.fixture
def tmpdir_for_demo(tmp_path):
    directory = tmp_path / "tmp"
    directory.mkdir()
    return directory


def test_train_digits_removes_its_log_and_checkpoint(tmpdir_for_demo):
    result = subprocess.run([sys.executable, str(DEMOS / "train_digits.py")],
                            env=demo_env(tmpdir_for_demo), capture_output=True, text=True,
                            timeout=DEMO_DEADLINE_S)
    assert result.returncode == 0, result.stdout + result.stderr
    checkpoint = re.search(r"^checkpoint: (\S+)$", result.stdout, re.M).group(1)
    assert checkpoint.startswith(str(tmpdir_for_demo))  # it did use the temporary directory
    assert "--logdir DIR" in result.stdout
    assert list(tmpdir_for_demo.iterdir()) == []


def test_input_pipeline_removes_its_shards_and_writes_a_timeline_only_when_asked(
        tmpdir_for_demo, tmp_path):
    timeline = tmp_path / "trace.json"
    result = subprocess.run([sys.executable, str(DEMOS / "input_pipeline.py"), "--epochs", "1",
                             "--timeline", str(timeline)],
                            env=demo_env(tmpdir_for_demo), capture_output=True, text=True,
                            timeout=DEMO_DEADLINE_S)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"timeline: {timeline}" in result.stdout and timeline.stat().st_size > 0
    assert list(tmpdir_for_demo.iterdir()) == []


def test_inference_service_removes_the_model_it_trained(tmpdir_for_demo):
    process = subprocess.Popen(
        [sys.executable, str(DEMOS / "inference_service.py"), "--port", "0",
         "--train-steps", "20"],
        env=demo_env(tmpdir_for_demo), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        lines = []
        for _ in range(20):  # a few progress lines come before "serving"
            lines.append(process.stdout.readline())
            if lines[-1].startswith("serving ") or not lines[-1]:
                break
        assert lines[0].startswith(f"no --model-dir: training a digits MLP into "
                                   f"{tmpdir_for_demo}"), lines
        assert lines[-1].startswith("serving "), lines
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=DEMO_DEADLINE_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, "".join(lines) + out
    assert list(tmpdir_for_demo.iterdir()) == []
