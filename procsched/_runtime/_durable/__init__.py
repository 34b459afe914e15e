"""Durable keyed tasks: a store behind the runtime (see the map in ``_runtime/__init__.py``).

user process                                  dispatcher process
_recovery.py  definitions, start-up recovery  _journal.py  one transaction a turn; keyed runs
              and adoption plans ──Adopt────▶               held until their start is recorded
                                              _peers.py    other schedulers on the store
_stored.py    (both) a stored task's          _writer.py   the commits, in a writer thread
              schedule and resume point
"""
