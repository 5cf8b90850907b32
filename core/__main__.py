"""``python -m trm`` (used by ``torchrun -m trm``) is the ``trm`` command."""

from trm.cli.main import entry

entry()
