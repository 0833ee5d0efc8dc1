"""``tf.logging``: TF1's logging calls over the standard ``logging`` module (logger
``"tensorflow"``, as TF1's, so existing logging configuration applies)."""
import logging as _logging

DEBUG, INFO, WARN, ERROR, FATAL = (_logging.DEBUG, _logging.INFO, _logging.WARNING,
                                   _logging.ERROR, _logging.CRITICAL)
WARNING = WARN
_LOGGER = _logging.getLogger("tensorflow")


def get_logger():
    return _LOGGER


def set_verbosity(level):
    _LOGGER.setLevel(level)
    if not _LOGGER.handlers and not _logging.getLogger().handlers:
        _logging.basicConfig(format="%(levelname)s:%(name)s:%(message)s")


def get_verbosity():
    return _LOGGER.getEffectiveLevel()


def debug(msg, *args, **kwargs):
    _LOGGER.debug(msg, *args, **kwargs)


def info(msg, *args, **kwargs):
    _LOGGER.info(msg, *args, **kwargs)


def warning(msg, *args, **kwargs):
    _LOGGER.warning(msg, *args, **kwargs)


warn = warning


def error(msg, *args, **kwargs):
    _LOGGER.error(msg, *args, **kwargs)


def fatal(msg, *args, **kwargs):
    _LOGGER.critical(msg, *args, **kwargs)


def log(level, msg, *args, **kwargs):
    _LOGGER.log(level, msg, *args, **kwargs)


_counts = {}


def log_every_n(level, msg, n, *args):
    """Log ``msg`` the first time and every ``n``-th time this call site is reached."""
    key = (msg, n)
    count = _counts[key] = _counts.get(key, 0) + 1
    if (count - 1) % n == 0:
        _LOGGER.log(level, msg, *args)


def log_first_n(level, msg, n, *args):
    key = (msg, -n)
    count = _counts[key] = _counts.get(key, 0) + 1
    if count <= n:
        _LOGGER.log(level, msg, *args)
