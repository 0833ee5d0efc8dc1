"""The default session of a thread (TF1's ``sess.as_default()``), for ``Tensor.eval`` and
``Operation.run``.

Sessions are plain objects here: this module knows only that one has ``graph`` and ``run``.
The stack is context-local (a ContextVar), so each thread has its own, as in TF1.
"""
import contextlib
import contextvars

_default_sessions = contextvars.ContextVar("asyncflow_default_sessions", default=())


def get_default_session():
    """The innermost default session of this thread/context (``sess.as_default()``), or None."""
    stack = _default_sessions.get()
    return stack[-1] if stack else None


@contextlib.contextmanager
def default_session(session):
    """Make ``session`` the default one (for ``Tensor.eval``/``Operation.run``) inside."""
    token = _default_sessions.set(_default_sessions.get() + (session,))
    try:
        yield session
    finally:
        _default_sessions.reset(token)


def push_default_session(session):
    """Make ``session`` the default until ``remove_default_session`` (InteractiveSession)."""
    _default_sessions.set(_default_sessions.get() + (session,))


def remove_default_session(session):
    _default_sessions.set(tuple(s for s in _default_sessions.get() if s is not session))


def run_in_session(element, what, feed_dict, session):
    """Run a tensor or op in ``session`` or the default session, as TF1's eval()/run()."""
    if session is None:
        session = get_default_session()
        if session is None:
            raise ValueError(
                f"Cannot evaluate tensor using `{what}`: No default session is registered. Use "
                f"`with sess.as_default()` or pass an explicit session to `{what[:-2]}"
                f"(session=sess)` (a synchronous session: `import asyncflow.compat.v1 as tf`, "
                f"`tf.Session()`; with af.Session write `await sess.run(...)`)")
    if session.graph is not element.graph:
        raise ValueError(f"Cannot use the given session to evaluate {element.name}: the "
                         "tensor's graph is different from the session's graph.")
    result = session.run(element, feed_dict)
    if hasattr(result, "__await__"):
        result.close()
        raise TypeError(f"`{what}` needs a synchronous session (asyncflow.compat.v1.Session); "
                        f"with an af.Session write `await sess.run({element.name!r})`")
    return result
