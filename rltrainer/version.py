"""The library's version, in a module of its own so that any module can name it without running
the package's ``__init__`` (which installs the Tune registration, and so imports the configs)."""

__version__ = "0.1.0"
