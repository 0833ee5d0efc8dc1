"""``demos/inference_service.py --model-dir`` with a wrong folder: one line that says what is
missing, exit status 2, no traceback."""
import os
import pathlib
import subprocess
import sys

import pytest

DEMO = pathlib.Path(__file__).resolve().parents[1] / "demos" / "inference_service.py"


@pytest.mark.parametrize("make, expected", [
    (lambda tmp: tmp / "missing", "no such folder"),
    (lambda tmp: (tmp / "file.txt").write_text("x") and tmp / "file.txt", "not a folder"),
    (lambda tmp: tmp, "no checkpoint in it"),
])
def test_a_wrong_model_dir_says_what_is_missing(tmp_path, make, expected):
    model_dir = make(tmp_path)
    done = subprocess.run([sys.executable, str(DEMO), "--model-dir", str(model_dir)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(DEMO.parents[1])})
    assert done.returncode == 2
    assert expected in done.stderr and str(model_dir) in done.stderr
    assert "Traceback" not in done.stderr

