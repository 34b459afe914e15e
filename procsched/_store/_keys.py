"""What a task key may be: a name both stores can hold, checked at the call.

A key is the primary key of a stored task and of its runs, so it must be
a value SQLite and PostgreSQL both store and index, and one that prints
on one line in ``procsched jobs``. Checked where a key enters procsched
(``_validate.key`` for every keyed scheduling call and ``history()``; the
CLI may call ``check_key`` on what it was given), so a key no store can
hold is a ValueError at the call and never reaches a dispatcher's commit
(issue 20 items 6 and 7: a lone surrogate killed the dispatcher; a NUL or
a 10,000-character key made every later PostgreSQL commit fail).

The rules:

- a non-empty ``str`` (TypeError otherwise);
- at most ``MAX_KEY_CHARS`` (200) characters. PostgreSQL refuses a btree
  index entry larger than about a third of a page (2,704 bytes with 8 kB
  pages); a key is indexed alone (the tasks' primary key) and with a run
  number and an attempt (the runs' primary key). 200 characters are at most
  800 bytes of UTF-8, far inside that bound with room for further indexed
  columns, and the same bound on every store (APScheduler's job id is 191
  characters for a like reason). SQLite has no such limit, but a key must
  be movable between stores;
- no lone surrogate (``"k\\ud800"``: not text, no UTF-8 encoding exists),
  no NUL (PostgreSQL's text cannot hold it), no other control character
  (C0, DEL, C1: invisible or terminal-controlling in the CLI's tables), no
  line or paragraph separator (U+2028, U+2029: a key prints on one line).
"""

from __future__ import annotations

import unicodedata

#: The longest key, in characters (see the module docstring for why 200).
MAX_KEY_CHARS = 200
#: Unicode categories a key may not contain: control characters (NUL,
#: C0, DEL, C1), surrogates (only lone ones can occur in a ``str`` that
#: is a key: a pair is read as one character), line and paragraph separators.
_REFUSED = frozenset({"Cc", "Cs", "Zl", "Zp"})
_SHOWN = 60  # characters of a refused key shown in the message


def check_key(value: object, arg: str = "key") -> str:
    """``value`` if it is a key both stores can hold (see the module docstring).

    Raises:
        TypeError: not a ``str``.
        ValueError: empty, longer than ``MAX_KEY_CHARS``, or holding a
            character no store can hold; the message names ``arg`` and shows
            the value (its repr, shortened).
    """
    if not isinstance(value, str):
        raise TypeError(f"{arg} must be a non-empty str, not {type(value).__name__} {_shown(value)}")
    if not value:
        raise ValueError(f"{arg} must be a non-empty str, not ''")
    if len(value) > MAX_KEY_CHARS:
        raise ValueError(f"{arg} must be at most {MAX_KEY_CHARS} characters, not {len(value):,}: {_shown(value)}")
    if not value.isprintable():  # fast path: every refused character is non-printable
        for i, ch in enumerate(value):
            if unicodedata.category(ch) in _REFUSED:
                raise ValueError(f"{arg} must not contain {_what(ch)} ({ch!r} at index {i}): {_shown(value)}")
    return value


def _what(ch: str) -> str:
    category = unicodedata.category(ch)
    if ch == "\x00":
        return "a NUL character"
    if category == "Cs":
        return "a lone surrogate (not text: it has no UTF-8 encoding)"
    if category == "Cc":
        return "a control character"
    return "a line or paragraph separator"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
