"""The error tree, shaped like TF1's ``tf.errors``.

Every failure a user can cause or observe during a run surfaces as exactly one ``OpError``
subclass. ``err.op`` names the failing operation (or is ``None``), ``err.error_code`` is the
canonical code, and ``err.message`` says what happened and where. Canonical code names (the
strings in ``CODE_NAMES``) are also what crosses the wire, so a remote failure arrives as the
same class it was raised as.
"""
from __future__ import annotations

OK = 0
CANCELLED = 1
UNKNOWN = 2
INVALID_ARGUMENT = 3
DEADLINE_EXCEEDED = 4
NOT_FOUND = 5
ALREADY_EXISTS = 6
PERMISSION_DENIED = 7
RESOURCE_EXHAUSTED = 8
FAILED_PRECONDITION = 9
ABORTED = 10
OUT_OF_RANGE = 11
UNIMPLEMENTED = 12
INTERNAL = 13
UNAVAILABLE = 14
DATA_LOSS = 15
UNAUTHENTICATED = 16


class OpError(Exception):
    """A failed operation in a run.

    Args:
        node_def: unused, kept for TF1 signature compatibility (may be None).
        op: the failing ``Operation`` or its name, or None. A compile-time node
            (``compile/node_graph.py``'s ``Node``, what plans run) is replaced by the user's
            Operation it stands for, its public ``origin``, when it has one.
        message: what happened, where, and how to fix it.
        error_code: a canonical code (see module constants).
    """

    error_code = UNKNOWN

    def __init__(self, node_def=None, op=None, message="", error_code=None):
        super().__init__(message)
        self.node_def = node_def
        self.op = getattr(op, "origin", None) or op
        self.message = message
        if error_code is not None:
            self.error_code = error_code

    def __str__(self):
        return self.message

    def __reduce__(self):
        return (type(self), (None, self.op, self.message, self.error_code))


class CancelledError(OpError):
    error_code = CANCELLED


class UnknownError(OpError):
    error_code = UNKNOWN


class InvalidArgumentError(OpError):
    error_code = INVALID_ARGUMENT


class DeadlineExceededError(OpError):
    error_code = DEADLINE_EXCEEDED


class NotFoundError(OpError):
    error_code = NOT_FOUND


class AlreadyExistsError(OpError):
    error_code = ALREADY_EXISTS


class PermissionDeniedError(OpError):
    error_code = PERMISSION_DENIED


class ResourceExhaustedError(OpError):
    error_code = RESOURCE_EXHAUSTED


class FailedPreconditionError(OpError):
    error_code = FAILED_PRECONDITION


class AbortedError(OpError):
    error_code = ABORTED


class OutOfRangeError(OpError):
    error_code = OUT_OF_RANGE


class UnimplementedError(OpError):
    error_code = UNIMPLEMENTED


class InternalError(OpError):
    error_code = INTERNAL


class UnavailableError(OpError):
    error_code = UNAVAILABLE


class DataLossError(OpError):
    error_code = DATA_LOSS


class UnauthenticatedError(OpError):
    error_code = UNAUTHENTICATED


_CLASSES = [
    CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
    AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError, FailedPreconditionError,
    AbortedError, OutOfRangeError, UnimplementedError, InternalError, UnavailableError,
    DataLossError, UnauthenticatedError,
]
CODE_NAMES = {
    CANCELLED: "CANCELLED", UNKNOWN: "UNKNOWN", INVALID_ARGUMENT: "INVALID_ARGUMENT",
    DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED", NOT_FOUND: "NOT_FOUND",
    ALREADY_EXISTS: "ALREADY_EXISTS", PERMISSION_DENIED: "PERMISSION_DENIED",
    RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED", FAILED_PRECONDITION: "FAILED_PRECONDITION",
    ABORTED: "ABORTED", OUT_OF_RANGE: "OUT_OF_RANGE", UNIMPLEMENTED: "UNIMPLEMENTED",
    INTERNAL: "INTERNAL", UNAVAILABLE: "UNAVAILABLE", DATA_LOSS: "DATA_LOSS",
    UNAUTHENTICATED: "UNAUTHENTICATED",
}
_BY_CODE = {cls.error_code: cls for cls in _CLASSES}
_BY_NAME = {CODE_NAMES[code]: cls for code, cls in _BY_CODE.items()}


def exception_type_from_error_code(error_code):
    """The OpError subclass for a canonical code (int) or code name (str)."""
    if isinstance(error_code, str):
        return _BY_NAME.get(error_code, UnknownError)
    return _BY_CODE.get(error_code, UnknownError)


def error_code_name(error):
    """The canonical code name of an OpError instance or class, e.g. ``"ABORTED"``."""
    return CODE_NAMES.get(error.error_code, "UNKNOWN")


def from_code(code, message, op=None):
    """Build the OpError subclass named by ``code`` (int or name)."""
    return exception_type_from_error_code(code)(None, op, message)


_PYTHON_ERRORS = (
    (MemoryError, ResourceExhaustedError),
    ((ValueError, IndexError, TypeError, ZeroDivisionError, FloatingPointError, KeyError),
     InvalidArgumentError),
)


def located(exc, op, device_name):
    """One OpError naming ``op``, its type, device and creation site; keeps ``exc`` as its
    cause. ``op`` None: not a kernel's failure (the executor's own work).

    An error already located (by a nested path: a compiled loop, a static schedule, a remote
    task) is returned as it is, whatever ``op`` says.
    """
    if getattr(exc, "_asyncflow_located", False):
        return exc
    if isinstance(exc, OpError):
        cls, message = type(exc), exc.message
    else:
        cls = next((target for source, target in _PYTHON_ERRORS if isinstance(exc, source)),
                   UnknownError)
        message = f"{type(exc).__name__}: {exc}"
    if op is None:
        err = cls(None, None, f"on {device_name}: {message}")
    else:
        err = cls(None, op, f"{op.type} '{op.name}' on {device_name}: {message}\n"
                            f"\t[created at {op.creation_site()}]")
    err._asyncflow_located = True
    err.__cause__ = exc
    return err


def session_closed(op=None):
    """The error of a step cancelled because its session was closed while it ran."""
    err = CancelledError(None, op, "The session was closed while this step was running "
                         "(e.g. waiting on a queue)")
    err._asyncflow_located = True
    return err


def closed_session(name):
    """TF1's error for using a closed Session (a RuntimeError, not an OpError: no step ran),
    naming the session after TF1's sentence, kept whole: ``name`` is its handle and where it ran."""
    return RuntimeError(f"Attempted to use a closed Session. ({name})")
