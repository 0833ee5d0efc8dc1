"""``tf.flags`` / ``tf.app.flags``: TF1's command-line flags (an absl-style subset).

``DEFINE_string/integer/float/boolean/bool/list/enum(name, default, help)`` declare flags on
``FLAGS``; ``tf.app.run()`` parses ``sys.argv`` into them (``--name=value``, ``--name value``,
``--flag``/``--noflag`` for booleans). Reading ``FLAGS.name`` before any parse parses
``sys.argv`` once, leniently (unknown arguments are left to the program), as TF1 does.
"""
from __future__ import annotations

import sys


class Error(Exception):
    """A flag error (bad value, unknown flag): TF1's ``flags.Error``."""


class _Flag:
    __slots__ = ("name", "default", "help", "parse", "value", "boolean")

    def __init__(self, name, default, help_text, parse, boolean=False):
        self.name, self.default, self.help = name, default, help_text
        self.parse, self.boolean = parse, boolean
        self.value = default


def _parse_bool(text):
    lowered = str(text).lower()
    if lowered in ("true", "t", "1", "yes", "y"):
        return True
    if lowered in ("false", "f", "0", "no", "n"):
        return False
    raise ValueError(f"{text!r} is not a boolean")


class FlagValues:
    """The flags of a program; ``FLAGS.name`` reads one."""

    def __init__(self):
        object.__setattr__(self, "_flags", {})
        object.__setattr__(self, "_parsed", False)

    def _define(self, flag):
        if flag.name in self._flags:
            raise Error(f"flag --{flag.name} is defined twice")
        self._flags[flag.name] = flag

    def __getattr__(self, name):
        flags = object.__getattribute__(self, "_flags")
        if name not in flags:
            raise AttributeError(f"no flag --{name} is defined (tf.flags.DEFINE_...)")
        if not self._parsed:
            self(sys.argv, known_only=True)
        return flags[name].value

    def __setattr__(self, name, value):
        if name not in self._flags:
            raise AttributeError(f"no flag --{name} is defined (tf.flags.DEFINE_...)")
        self._flags[name].value = value

    def __contains__(self, name):
        return name in self._flags

    def is_parsed(self):
        return self._parsed

    def flag_values_dict(self):
        return {name: flag.value for name, flag in self._flags.items()}

    def __call__(self, argv, known_only=False):
        """Parse ``argv`` (its first item is the program); returns the arguments left over.

        Raises:
            Error: a bad value, or an unknown ``--flag`` unless ``known_only``.
        """
        rest, args = [argv[0]] if argv else [], list(argv[1:])
        while args:
            arg = args.pop(0)
            if arg == "--":
                rest.extend(args)
                break
            if not arg.startswith("-") or arg == "-":
                rest.append(arg)
                continue
            name, has_value, value = arg.lstrip("-").partition("=")
            flag = self._flags.get(name)
            if flag is None and name.startswith("no") and not has_value:
                negated = self._flags.get(name[2:])
                if negated is not None and negated.boolean:
                    negated.value = False
                    continue
            if flag is None:
                if known_only:
                    rest.append(arg)
                    continue
                raise Error(f"Unknown command line flag {arg!r}")
            if not has_value:
                if flag.boolean:
                    flag.value = True
                    continue
                if not args:
                    raise Error(f"flag --{name} needs a value")
                value = args.pop(0)
            try:
                flag.value = flag.parse(value)
            except ValueError as exc:
                raise Error(f"flag --{name}={value}: {exc}") from None
        object.__setattr__(self, "_parsed", True)
        return rest


FLAGS = FlagValues()


def DEFINE_string(name, default, help=None, flag_values=FLAGS):  # noqa: N802 - TF1's name
    flag_values._define(_Flag(name, default, help, str))


def DEFINE_integer(name, default, help=None, flag_values=FLAGS, lower_bound=None,  # noqa: N802
                   upper_bound=None):
    def parse(text):
        value = int(text)
        if (lower_bound is not None and value < lower_bound) or \
                (upper_bound is not None and value > upper_bound):
            raise ValueError(f"{value} is outside [{lower_bound}, {upper_bound}]")
        return value
    flag_values._define(_Flag(name, default, help, parse))


def DEFINE_float(name, default, help=None, flag_values=FLAGS):  # noqa: N802
    flag_values._define(_Flag(name, default, help, float))


def DEFINE_boolean(name, default, help=None, flag_values=FLAGS):  # noqa: N802
    flag_values._define(_Flag(name, default, help, _parse_bool, boolean=True))


DEFINE_bool = DEFINE_boolean


def DEFINE_list(name, default, help=None, flag_values=FLAGS):  # noqa: N802
    flag_values._define(_Flag(name, default, help,
                              lambda text: [t for t in text.split(",") if t]))


def DEFINE_enum(name, default, enum_values, help=None, flag_values=FLAGS):  # noqa: N802
    def parse(text):
        if text not in enum_values:
            raise ValueError(f"must be one of {', '.join(enum_values)}")
        return text
    flag_values._define(_Flag(name, default, help, parse))
