"""Reading pickles that are hostile until read (the authors' checkpoints, their syneval templates): one base,
:class:`PlainUnpickler`, which builds plain data only and cannot be made to crash, recurse without end or set the
state of anything but what a subclass allows (docs/sharing.md, "Importing a checkpoint of the authors' code"). No
torch here: the plain-data readers use it without torch."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any, ClassVar

#: A dictionary key or set element is hashed by walking all of it, recursively in C and without a memo: a key nested
#: a million deep crashes the process, one of shared halves takes exponential time. Real keys are names and small
#: tuples.
KEY_DEPTH, KEY_PARTS = 32, 10_000


def check_key(key: Any) -> None:
    """Refuse a key whose hash would crash or not end (:data:`KEY_DEPTH`); only tuples are walked: a frozenset caches
    its hash, and the other hashable values a pickle makes do not nest."""
    todo, parts = [(key, 0)], 0
    while todo:
        item, depth = todo.pop()
        parts += 1
        if depth > KEY_DEPTH or parts > KEY_PARTS:
            raise RefusedPickle("a dictionary key or set element is nested too deep or too large to hash")
        if type(item) is tuple:
            todo.extend((part, depth + 1) for part in item)


class RefusedPickle(pickle.UnpicklingError):
    """A pickle that asks for something a reader of data does not do; nothing in it was run."""


def _checking_keys(load: Callable, keys: Callable) -> Callable:
    def run(self) -> None:
        for key in keys(self):
            check_key(key)
        load(self)

    return run


class PlainUnpickler(pickle._Unpickler):
    """Python's own unpickler, whose opcodes can be overridden (the C one's cannot), for files that are hostile until
    read: every global and persistent id refused (subclasses allow some, :meth:`find_class`); a BUILD, which sets an
    object's state (calling its class's ``__setstate__``, or setting attributes, even of a class or a function),
    only on what :meth:`may_build` allows (nothing here); every dictionary key and set element checked before it is
    hashed (:func:`check_key`). It reads iteratively: no nesting makes it recurse."""

    def find_class(self, module: str, name: str):
        raise RefusedPickle(
            f"it refers to {f'{module}.{name}'[:200]}; only plain data (dict, list, tuple, str) is accepted"
        )

    def persistent_load(self, pid):
        raise RefusedPickle("it uses persistent ids; only plain data is accepted")

    def may_build(self, obj: Any) -> bool:
        return False

    def _build(self) -> None:
        if not self.may_build(self.stack[-2]):
            raise RefusedPickle(f"it sets the state of a {type(self.stack[-2]).__name__} object, which is not data")
        pickle._Unpickler.load_build(self)

    dispatch: ClassVar[dict] = dict(pickle._Unpickler.dispatch)
    dispatch[pickle.BUILD[0]] = _build
    _U = pickle._Unpickler
    dispatch[pickle.SETITEM[0]] = _checking_keys(_U.load_setitem, lambda self: self.stack[-2:-1])
    dispatch[pickle.SETITEMS[0]] = _checking_keys(_U.load_setitems, lambda self: self.stack[::2])
    dispatch[pickle.DICT[0]] = _checking_keys(_U.load_dict, lambda self: self.stack[::2])
    dispatch[pickle.ADDITEMS[0]] = _checking_keys(_U.load_additems, lambda self: self.stack)
    dispatch[pickle.FROZENSET[0]] = _checking_keys(_U.load_frozenset, lambda self: self.stack)
    del _U
