"""Module-level functions for the reference tests (importable by name)."""


def plain(x=0):
    return x


class Klass:
    @classmethod
    def cm(cls):
        return cls

    def method(self):
        return self


def _decorate(fn):
    def wrapper(*a, **k):
        return fn(*a, **k)

    return wrapper


@_decorate
def decorated():
    return 1


def make_closure(n):
    def inner():
        return n

    return inner
