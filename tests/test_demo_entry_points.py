"""Demos and the deploy trainer start trio through ``asyncflow.aio.run_trio`` (issue 36): run
inside a running asyncio loop (a notebook), they say to use ``asyncflow.aio`` or the
synchronous surface instead of failing with trio's internal message."""
import ast
import asyncio
import pathlib
import runpy
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ENTRY_POINTS = sorted(ROOT.glob("demos/*.py")) + [ROOT / "deploy" / "train.py"]


def _trio_run_calls(path):
    tree = ast.parse(path.read_text(), str(path))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "run" and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "trio"]


@pytest.mark.parametrize("path", ENTRY_POINTS, ids=lambda p: p.name)
def test_entry_points_start_trio_through_run_trio(path):
    assert _trio_run_calls(path) == [], f"{path.name}: use asyncflow.aio.run_trio, not trio.run"


def test_a_demo_inside_a_running_asyncio_loop_names_asyncflow_aio(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["control_flow.py", "--steps", "1"])

    async def notebook_cell():
        runpy.run_path(str(ROOT / "demos" / "control_flow.py"), run_name="__main__")

    with pytest.raises(RuntimeError, match=r"running asyncio event loop.*asyncflow\.aio"):
        asyncio.run(notebook_cell())
