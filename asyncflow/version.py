"""The asyncflow release, in one place (read by ``af.__version__`` and meta graph headers)."""
__version__ = "0.1.0"
