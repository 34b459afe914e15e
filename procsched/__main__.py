"""``python -m procsched``: the ``procsched`` command (see ``_cli.py``)."""

from ._cli import main

raise SystemExit(main())
