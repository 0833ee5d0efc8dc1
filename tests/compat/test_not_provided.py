"""docs/porting.md's "Not provided" list names only what ``asyncflow.compat.v1`` lacks: a name
added later (rfuzz's ``tf.sparse.segment_sum``, ...) must leave the list when it arrives.
What an entry suggests instead (``(use X)``, ``: use X``, ``; use X``) and a feature of a
provided name (```ExponentialMovingAverage`'s `zero_debias=True```) are not entries."""
import pathlib
import re

import asyncflow.compat.v1 as tf

PORTING = pathlib.Path(__file__).resolve().parents[2] / "docs" / "porting.md"


def _resolve(path):
    obj = tf
    for part in path.split(".")[1:]:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _entries():
    section = PORTING.read_text().split("\n## Not provided\n", 1)[1].split("\n## ", 1)[0]
    for block in re.split(r"\n(?=\*\*`tf)", section):
        header = re.match(r"\*\*`(tf[\w.]*)`", block)
        if not header:
            continue
        body = block[header.end():]
        body = re.sub(r"\([^()]*\buse\b[^()]*\)", "", body)
        body = re.sub(r"[:;]\s*use\b.*?(?=\n- |\Z)", "", body, flags=re.S)
        for name in re.findall(r"`([A-Za-z_][\w.]*)`(?!'s)", body):
            yield name if name.startswith("tf.") else f"{header.group(1)}.{name}"


def test_the_list_is_read():
    entries = list(_entries())
    assert len(entries) > 200 and "tf.random.gamma" in entries


def test_not_provided_names_nothing_provided():
    provided = [name for name in _entries() if _resolve(name) is not None]
    assert provided == [], f"docs/porting.md lists as not provided: {provided}"
