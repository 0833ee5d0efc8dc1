"""Loop forms for the tests that run every loop twice: compiled, and on the frame path.

A test module's ``loop_mode`` fixture calls ``use(mode)``; its sessions take ``config(base)``,
the SessionConfig asking for that form (``SessionConfig.compile_loops``, chosen when a run
is compiled).
"""
from __future__ import annotations

import dataclasses

import asyncflow as af

_compiled = [True]


def use(mode):
    """Make ``config`` ask for ``mode``: "compiled" or "dynamic"."""
    _compiled[0] = mode == "compiled"


def config(base=None):
    """``base`` (default: a fresh SessionConfig) with the current loop form."""
    return dataclasses.replace(base or af.SessionConfig(), compile_loops=_compiled[0])
