"""``python -m asyncflow``: the command line (``asyncflow --version``, ``asyncflow worker``)."""
from asyncflow.cli import main

raise SystemExit(main())
