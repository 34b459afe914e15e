"""Durable keyed tasks: a store behind the runtime (see the map in ``_runtime/__init__.py``).

user process                                  dispatcher process
_recovery.py  definitions, start-up recovery  _journal.py  one transaction a turn; keyed runs
              and adoption plans ──Adopt────▶               held until their start is recorded
_down.py      slots missed while down         _peers.py    other schedulers on the store
              (skipped, reason "down")        _requests.py run now / backfill asked from outside
_stored.py    (both) a stored task's          _writer.py   the commits, in a writer thread
              schedule, resume point, the
              slots a resume leaves behind
"""
