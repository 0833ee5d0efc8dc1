"""``tf.app``: ``run(main=None, argv=None)`` parses the flags and calls ``main(argv)``."""
import sys

from asyncflow.compat.v1 import flags  # noqa: F401  (tf.app.flags)


def run(main=None, argv=None):
    """Parse ``argv`` (default ``sys.argv``) into ``tf.flags.FLAGS``, then exit with
    ``main(remaining_argv)``'s result, as TF1's ``tf.app.run``.

    ``main`` defaults to the ``main`` of the ``__main__`` module.
    """
    args = argv if argv is not None else sys.argv
    try:
        rest = flags.FLAGS(args, known_only=True)
    except flags.Error as exc:
        sys.exit(f"{args[0] if args else 'program'}: {exc}")
    main = main if main is not None else sys.modules["__main__"].main
    sys.exit(main(rest))
