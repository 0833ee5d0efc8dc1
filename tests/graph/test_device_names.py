"""Device names are parsed in one place (``asyncflow/device_names.py``): specs, tasks, devices."""
from __future__ import annotations

import pathlib
import re

import pytest

from asyncflow import device_names
from asyncflow.device_names import DeviceSpec, device_of, device_type_of, task_of

ROOT = pathlib.Path(__file__).resolve().parents[2]
FULL = "/job:worker/replica:0/task:1/device:GPU:2"


def test_a_full_name_splits_into_its_task_and_device():
    assert task_of(FULL) == "/job:worker/replica:0/task:1"
    assert device_of(FULL) == "GPU:2" and device_type_of(FULL) == "GPU"
    assert task_of("/job:ps/task:0") == "/job:ps/task:0"  # no device: the whole name
    assert task_of(None) == task_of("") == ""
    assert device_of("CPU:0") == "CPU:0" and device_type_of("CPU:0") == "CPU"


@pytest.mark.parametrize("spec, canonical", [
    ("/job:w/task:1/device:CPU:0", "/job:w/task:1/device:CPU:0"),
    ("/gpu:1", "/device:GPU:1"),
    ("/job:w/replica:0/task:1/device:GPU:*", "/job:w/replica:0/task:1/device:GPU:*"),
    ("", ""),
])
def test_specs_parse_and_print(spec, canonical):
    assert device_names.canonical_name(spec) == canonical


def test_specs_merge_inner_over_outer_and_bad_ones_are_named():
    assert device_names.merge("/device:GPU:0", "/job:ps/task:2/device:CPU:0") == \
        "/job:ps/task:2/device:GPU:0"
    assert DeviceSpec.from_string(FULL).task == 1
    with pytest.raises(ValueError, match="bogus"):
        DeviceSpec.from_string("/bogus:1")


def test_no_module_splits_a_device_name_by_hand():
    by_hand = re.compile(r"""(?:split|partition)\(\s*["']/(?:device|task|job):""")
    found = [f"{path.relative_to(ROOT)}:{number}" for base in ("asyncflow", "transports")
             for path in sorted((ROOT / base).rglob("*.py")) if path.name != "device_names.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if by_hand.search(line)]
    assert not found, f"use asyncflow.device_names (task_of, device_of): {found}"
