"""A launch's argument binding under the interpreter, answered from memos while a sanitized launch runs.

Every launch under Triton's interpreter (``GridExecutor.__call__``) binds its arguments with
``inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)``, which rebuilds the kernel's full argument
spec (``inspect.signature`` underneath) each time, and converts each argument with ``_implicit_cvt``,
which parses the argument's type string with ``tl.str_to_ty(mangle_type(arg), None)``. Profiled on
``move-row-stale-source``'s seed changes (``docs/speed.md``, eighth and ninth passes), a launch of new
work is ~60% frontend, of which these were ~3% and ~1-2%. Two pieces, each keyed by exactly what it reads:

* ``getcallargs(fn, *positional, **named)`` for a plain Python function (``types.FunctionType``) whose
  ``__dict__`` carries none of the attributes ``inspect.signature`` would honour (``__signature__``,
  ``_partialmethod``/``__partialmethod__``), without positional-only or keyword-only parameters,
  ``*args`` or ``**kwargs`` (Triton refuses those): its names are the code's (``fn.__code__``, by
  identity), its defaults ``fn.__defaults__`` (by identity, a tuple); the memo is keyed by the function
  (kept alive) and checked against both on every call. A call that binds cleanly builds the dict
  getcallargs builds, in its order (the positional arguments, the named ones as passed, then the
  defaults); anything else (too many, a name twice or unknown, one missing) runs ``inspect.getcallargs``
  itself, so it raises what it raises.
* ``triton.language.str_to_ty(name, None)`` for a plain type string (a scalar name, or a pointer to one,
  ``*fp32`` / ``*kfp32``): a pure function of the string (the module's dtype constants, or a new
  ``pointer_type`` of one); a hit returns the object the first call built. ``constexpr``, tensor
  descriptors, tuples and any ``c`` other than ``None`` run Triton's own code.

Installed only on the interpreter, with the sanitizer's hooks (``interpreter_cache.install``), and only
where ``GridExecutor.__call__`` has the expected shape; the interpreter module's ``inspect`` becomes a
module that answers ``getcallargs`` from the memo (and ``getfullargspec`` / ``getmembers`` from
``lab/interpreter_inspect.py``'s) and everything else from ``inspect`` itself.
``MAMBALAB_INTERPRETER_ARGS=0`` leaves them out. Tested call for call against Triton's and inspect's own
functions (``tests/test_interpreter_args.py``).
"""

from __future__ import annotations

import inspect
import os
import re
import types
from typing import Any

from mambalab.lab import interpreter_inspect

_ORIGINALS: dict[str, Any] = {}
_SPECS: dict[int, tuple] = {}  # id(fn) -> (fn, code, defaults, names, frozenset(names), n_required)
_TYS: dict[str, Any] = {}      # type string -> str_to_ty(string, None)
_MAX_ENTRIES = 4096
_INTERP: Any = None
_TL: Any = None
_PLAIN_TY = re.compile(r"\*?k?[A-Za-z0-9]+")
_SIGNATURE_ATTRS = ("__signature__", "_partialmethod", "__partialmethod__")
_function = types.FunctionType
_builtin_type = type


def enabled() -> bool:
    return os.environ.get("MAMBALAB_INTERPRETER_ARGS", "1") != "0"


def _spec(fn: Any) -> tuple | None:
    if _builtin_type(fn) is not _function:
        return None
    code, defaults = fn.__code__, fn.__defaults__
    got = _SPECS.get(id(fn))
    if got is not None and got[0] is fn and got[1] is code and got[2] is defaults:
        if fn.__kwdefaults__ is None and not any(a in fn.__dict__ for a in _SIGNATURE_ATTRS):
            return got
        return None
    if fn.__kwdefaults__ is not None or any(a in fn.__dict__ for a in _SIGNATURE_ATTRS):
        return None
    try:
        spec = inspect.getfullargspec(fn)
    except TypeError:
        return None
    if spec.varargs or spec.varkw or spec.kwonlyargs or code.co_posonlyargcount:
        return None
    names = tuple(spec.args)
    n_defaults = len(defaults) if defaults else 0
    if len(_SPECS) > _MAX_ENTRIES:
        _SPECS.clear()
    got = _SPECS[id(fn)] = (fn, code, defaults, names, frozenset(names), len(names) - n_defaults)
    return got


def _getcallargs(func, /, *positional, **named):
    """``inspect.getcallargs`` from the function's memoised spec (see the module's docstring)."""
    spec = _spec(func)
    if spec is None:
        return _ORIGINALS["getcallargs"](func, *positional, **named)
    names = spec[3]
    if len(positional) > len(names):
        return _ORIGINALS["getcallargs"](func, *positional, **named)
    out = dict(zip(names, positional))
    possible = spec[4]
    for kw, value in named.items():
        if kw not in possible or kw in out:
            return _ORIGINALS["getcallargs"](func, *positional, **named)
        out[kw] = value
    if len(positional) < len(names):
        n_required = spec[5]
        for name in names[:n_required]:
            if name not in out:
                return _ORIGINALS["getcallargs"](func, *positional, **named)
        defaults = spec[2]
        for i, name in enumerate(names[n_required:]):
            if name not in out:
                out[name] = defaults[i]
    return out


def _str_to_ty(name, c):
    """``triton.language.str_to_ty`` with a plain type string and ``c is None`` from the memo."""
    if c is None and _builtin_type(name) is str:
        got = _TYS.get(name)
        if got is not None:
            return got
        out = _ORIGINALS["str_to_ty"](name, c)
        base = name.lstrip("*")
        if (_PLAIN_TY.fullmatch(name) and not base.startswith(("constexpr", "tensordesc", "kconstexpr",
                                                               "ktensordesc"))):
            if len(_TYS) > _MAX_ENTRIES:
                _TYS.clear()
            _TYS[name] = out
        return out
    return _ORIGINALS["str_to_ty"](name, c)


class _Inspect(types.ModuleType):
    """The interpreter's ``inspect`` while a launch runs: ``getcallargs`` from the memo, the rest inspect's."""

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)


_PROXY = _Inspect("inspect")
_PROXY.getcallargs = _getcallargs
# getfullargspec (the executor's keyword filter) and getmembers (_patch_builtin) from memos too
_PROXY.getfullargspec = interpreter_inspect.getfullargspec
_PROXY.getmembers = interpreter_inspect.getmembers
_USABLE: dict[int, bool] = {}


def _usable(interp: Any) -> bool:
    try:
        src = inspect.getsource(interp.GridExecutor.__call__)
    except (AttributeError, OSError, TypeError):
        return False
    return (getattr(interp, "inspect", None) is inspect
            and "inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)" in src)


def install(interp: Any) -> None:
    """Install both memos for one sanitized launch (``interp``: Triton's interpreter module)."""
    global _INTERP, _TL
    if not enabled() or _ORIGINALS:
        return
    if id(interp) not in _USABLE:
        _USABLE[id(interp)] = _usable(interp)
    import triton.language as tl

    _INTERP, _TL = interp, tl
    if _USABLE[id(interp)] and interp.inspect is inspect:
        _ORIGINALS["getcallargs"] = inspect.getcallargs
        interp.inspect = _PROXY
    if callable(getattr(tl, "str_to_ty", None)) and tl.str_to_ty.__globals__.get("str_to_ty") is tl.str_to_ty:
        _ORIGINALS["str_to_ty"] = tl.str_to_ty
        tl.str_to_ty = _str_to_ty


def uninstall() -> None:
    """Put the interpreter's ``inspect`` and Triton's ``str_to_ty`` back."""
    if "getcallargs" in _ORIGINALS and _INTERP is not None:
        _INTERP.inspect = inspect
    if "str_to_ty" in _ORIGINALS and _TL is not None:
        _TL.str_to_ty = _ORIGINALS["str_to_ty"]
    _ORIGINALS.clear()


def installed() -> bool:
    """True while either memo is in place."""
    return bool(_ORIGINALS)
