"""Two more of ``inspect``'s answers to Triton's interpreter from memos, while a sanitized launch runs.

The interpreter's ``inspect`` is already ``interpreter_args``' proxy during a launch (``getcallargs``
from a memo, everything else inspect's own). Profiled on ``move-row-stale-source``'s seed change
(``docs/speed.md``, tenth pass), two more of its calls recompute the same answer in every launch:

* ``inspect.getfullargspec(self.fn)`` in ``GridExecutor.__call__`` (its reserved-keyword filter), ~30 us:
  for a plain function (``types.FunctionType`` without ``__signature__`` / ``_partialmethod`` in its
  ``__dict__``) the spec is a function of its code, defaults, keyword-only defaults and annotations, so
  it is memoised by the function (kept alive) and checked on every call against each of them by
  identity, the two dicts item by item (names equal, values by identity); a hit gives a new
  ``FullArgSpec`` with new lists and dicts, as inspect's does. Anything else runs inspect's.
* ``inspect.getmembers(pkg)`` in ``_patch_builtin``, five times a launch (the language re-patched for
  ``triton.language.standard``'s device functions, whose module sees ``tl.core``). Not memoised: each
  of those re-patches leaves fresh closures in the module and the tensor class, so no two calls read the
  same namespace. It is computed the way inspect computes it, without inspect's loop in Python: the
  names ``dir`` gives (sorted, as inspect sorts them), each value by ``getattr`` (``map`` in C); wherever
  inspect would do anything else (a predicate; a ``DynamicClassAttribute`` in a class's base, whose name
  it adds; a name twice; an ``AttributeError``, which it answers from the MRO's dicts) it is inspect's.

Installed and removed with ``interpreter_args`` (``MAMBALAB_INTERPRETER_ARGS=0`` leaves them out too).
Tested answer for answer against inspect's (``tests/test_interpreter_inspect.py``).
"""

from __future__ import annotations

import inspect
import operator
import types
from itertools import repeat
from typing import Any

_SIGNATURE_ATTRS = ("__signature__", "_partialmethod", "__partialmethod__")
_MAX_ENTRIES = 4096
_ARGSPECS: dict[int, tuple] = {}  # id(fn) -> (fn, code, defaults, kwdefaults, kw items, annotations, items, spec)
_function = types.FunctionType
_is = operator.is_


def _items(d) -> tuple:
    return tuple(d.items()) if d else ()


def _same_items(d, items: tuple) -> bool:
    if not d:
        return not items
    return (len(d) == len(items) and tuple(d) == tuple(k for k, _ in items)
            and all(map(_is, d.values(), (v for _, v in items))))


def getfullargspec(func):
    """``inspect.getfullargspec`` from a memo for plain functions (see the module's docstring)."""
    if type(func) is not _function or any(a in func.__dict__ for a in _SIGNATURE_ATTRS):
        return inspect.getfullargspec(func)
    code, defaults, kwdefaults, ann = func.__code__, func.__defaults__, func.__kwdefaults__, func.__annotations__
    got = _ARGSPECS.get(id(func))
    if (got is not None and got[0] is func and got[1] is code and got[2] is defaults and got[3] is kwdefaults
            and _same_items(kwdefaults, got[4]) and got[5] is ann and _same_items(ann, got[6])):
        s = got[7]
        return inspect.FullArgSpec(list(s.args), s.varargs, s.varkw, s.defaults, list(s.kwonlyargs),
                                   dict(s.kwonlydefaults) if s.kwonlydefaults is not None else None,
                                   dict(s.annotations))
    spec = inspect.getfullargspec(func)
    if len(_ARGSPECS) > _MAX_ENTRIES:
        _ARGSPECS.clear()
    _ARGSPECS[id(func)] = (func, code, defaults, kwdefaults, _items(kwdefaults), ann, _items(ann),
                           inspect.FullArgSpec(list(spec.args), spec.varargs, spec.varkw, spec.defaults,
                                               list(spec.kwonlyargs),
                                               dict(spec.kwonlydefaults) if spec.kwonlydefaults is not None
                                               else None, dict(spec.annotations)))
    return spec


def getmembers(object, predicate=None):  # noqa: A002 - inspect's own parameter name
    """``inspect.getmembers`` without its per-name Python loop (see the module's docstring): the same names
    (``dir``), each value by the same ``getattr``, in the same order; anything inspect treats specially
    (a predicate, a ``DynamicClassAttribute`` in a base, a name twice, an ``AttributeError``) runs inspect's."""
    if predicate is not None:
        return inspect.getmembers(object, predicate)
    if isinstance(object, type):
        try:
            bases = object.__bases__
        except AttributeError:
            return inspect.getmembers(object)
        for base in bases:
            if any(map(_is_dynamic, base.__dict__.values())):
                return inspect.getmembers(object)
    names = dir(object)
    if len(set(names)) != len(names):
        return inspect.getmembers(object)
    try:
        return list(zip(names, map(getattr, repeat(object), names)))
    except AttributeError:
        return inspect.getmembers(object)


def _is_dynamic(v) -> bool:
    return isinstance(v, types.DynamicClassAttribute)


__all__ = ["getfullargspec", "getmembers"]
