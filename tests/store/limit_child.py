"""A child for the limit test: ``python limit_child.py URL KEY``: registers,
claims KEY's next run (its group's one unit of the limit), prints "claimed",
and waits to be killed."""

import sys

from procsched._store import open_store


def main() -> None:
    url, key = sys.argv[1], sys.argv[2]
    store = open_store(url)
    me = store.register(lease_ns=3600 * 10**9)  # an hour: only its death frees the unit
    b = store.batch(me)
    b.started(key, 1, 1, 1_700_000_000 * 10**9)
    result = b.commit()
    print("claimed" if result.ok else f"not claimed: {result}", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
