"""``asyncflow.compat``: surfaces for programs written for other APIs.

``asyncflow.compat.v1`` is TF1's API with synchronous sessions, so that a TF1 script runs with
only its import line changed (``import asyncflow.compat.v1 as tf``).
"""
