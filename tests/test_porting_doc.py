"""Every Python block of docs/porting.md runs as written (each in a fresh default graph)."""
import pathlib
import re

import pytest

import asyncflow as af

DOC = pathlib.Path(__file__).resolve().parents[1] / "docs" / "porting.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_guide_has_runnable_blocks_and_is_linked_from_the_readme():
    assert len(BLOCKS) >= 3
    readme = (DOC.parents[1] / "README.md").read_text()
    assert "docs/porting.md" in readme
    assert "## Deliberate differences from TF1" in DOC.read_text()


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs(index, capsys):
    af.reset_default_graph()
    namespace = {"__name__": f"porting_block_{index}"}
    exec(compile(BLOCKS[index], f"docs/porting.md block {index}", "exec"), namespace)  # noqa: S102
