"""The ``rltrainer`` command's subcommands, one module each (``rltrainer.cli`` builds the parser
from their ``add_parser`` functions and runs the handler each sets)."""
