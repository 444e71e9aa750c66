"""Work Triton's interpreter repeats on every call, done once per sanitized launch instead.

Profiling a replay on the CPU (``scripts/profile_speed.py``, ``docs/speed.md``)
shows two pieces of the interpreter that recompute the same answer over and
over, independently of what the kernel computes:

* ``_patch_lang(fn)`` rebinds ``triton.language`` to the interpreter's
  semantics with ``inspect.getmembers`` over the whole language. The grid
  executor calls it once per launch (and restores it afterwards), which is
  needed; but every call of a ``@triton.jit`` *device function* from inside the
  kernel calls it again, once per program and call site, although the language
  is already patched by the launch. That repetition was 14-17% of a replay.
  While a sanitized launch runs, a nested call whose language modules are
  already patched by this launch gets an empty scope instead: the bindings it
  would install are the ones in place (the same wrappers around the same
  builtins, the same tensor and dtype methods).
* ``_get_np_dtype(dtype)`` builds a 19-entry dict of NumPy dtypes on every
  call (tens of thousands per replay, ~5%). Its answer depends only on the
  scalar type (a block's element type; every pointer is ``uint64``), so it is
  memoised by that.

* Every builtin of the language is wrapped by ``_patch_attr`` in a lambda that
  builds a filtered copy of its keyword arguments (a dict comprehension) on
  every call, tens of thousands per toggle. The replayed patch puts a wrapper
  making the same call (``_builtin_call``: ``_semantic`` taken out of the fresh
  ``kwargs`` and put last), only where the lambda has the expected shape.

None of these changes what a kernel computes or what the sanitizer sees: the kernels
are the same Triton functions and run through the same interpreter code. Both
are installed and removed together with the sanitizer's hooks (only while a
sanitized launch runs), and each is installed only where the interpreter has
the expected shape (tested: Triton 3.6 and 3.9); elsewhere the interpreter runs
as shipped, only slower.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from mambalab.lab import interpreter_args, interpreter_types

_ORIGINALS: dict[str, Any] = {}
_INTERP: Any = None
# Language modules patched by the grid executor of the launch running now (ids), and how
# many executor scopes are open (autotuning can run several executors in one launch).
_PATCHED: set[int] = set()
_LANGS_OF: dict[int, tuple[Any, frozenset[int]]] = {}
_NP_DTYPES: dict[Any, Any] = {}
_BLOCK_TYPE: Any = None  # triton.language.block_type, bound at install


class _NoScope:
    """What a redundant nested ``_patch_lang`` returns: nothing was changed, nothing to restore."""

    __slots__ = ()

    def restore(self) -> None:
        pass


_NO_SCOPE = _NoScope()


class _ExecutorScope:
    """The grid executor's patch scope: restoring it also forgets what this launch patched."""

    __slots__ = ("scope",)

    def __init__(self, scope: Any):
        self.scope = scope

    def restore(self) -> None:
        _PATCHED.clear()
        self.scope.restore()

    def __getattr__(self, name: str) -> Any:  # anything else the interpreter might ask of a scope
        return getattr(self.scope, name)


def _langs(fn: Any) -> frozenset[int]:
    """Ids of the ``triton.language`` modules visible to ``fn`` (what ``_patch_lang`` patches)."""
    g = getattr(fn, "__globals__", None)
    if g is None:
        return frozenset()
    cached = _LANGS_OF.get(id(fn))
    if cached is not None and cached[0] is fn:
        return cached[1]
    import triton.language as tl

    mods = (tl, tl.core)
    ids = frozenset(id(v) for v in g.values() if inspect.ismodule(v) and any(v is m for m in mods))
    _LANGS_OF[id(fn)] = (fn, ids)
    return ids


# The launch's own patch, recorded the first time for a set of language modules: the attributes
# it set, in order, each with the value it found there and the value it put. A later launch replays
# the same assignments (the same wrappers: they are stateless functions of the interpreter's module
# globals) after checking, one by one, that it finds what the recording found; on any difference
# (something else rebound the language meanwhile) it undoes them and patches as the interpreter does.
_RECORDED: dict[frozenset[int], list[tuple[Any, str, Any, Any]]] = {}


def _record(scope: Any) -> list[tuple[Any, str, Any, Any]] | None:
    changes = getattr(scope, "_changes", None)
    if not isinstance(changes, list):
        return None
    out = []
    for change in changes:
        if not (isinstance(change, tuple) and len(change) == 3):
            return None
        obj, name, original = change
        out.append((obj, name, original, None))
    lambda_code = _patch_attr_lambda()
    # the values put: replay the scope's assignments' results, read back in order
    current: dict[tuple[int, str], Any] = {}
    for i in range(len(out) - 1, -1, -1):
        obj, name, original, _ = out[i]
        key = (id(obj), name)
        put = current.get(key, getattr(obj, name, None))
        out[i] = (obj, name, original, put)
        current[key] = original
    # a builtin's wrapper put by the patch, replaced by the same call (``_builtin_call``), also where a
    # later assignment of this patch finds it (``static_assert``: wrapped, then replaced)
    replaced: dict[tuple[int, str], tuple[Any, Any]] = {}
    for i, (obj, name, original, put) in enumerate(out):
        key = (id(obj), name)
        was = replaced.pop(key, None)
        if was is not None and original is was[0]:
            original = was[1]
        fast = _builtin_call(put, lambda_code)
        if fast is not put:
            replaced[key] = (put, fast)
        out[i] = (obj, name, original, fast)
    return out


def _patch_attr_lambda() -> Any:
    """The code of the wrapper ``_patch_attr`` puts around every builtin (``lambda *args, member=member,
    **kwargs: member(*args, **{k: v for k, v in kwargs.items() if k != "_semantic"},
    _semantic=interpreter_semantic)``), where the interpreter has that shape; else ``None``."""
    fn = getattr(_INTERP, "_patch_attr", None)
    if fn is None:
        return None
    if _LAMBDA.get("fn") is not fn:
        try:
            src = inspect.getsource(fn)
        except (OSError, TypeError):
            src = ""
        codes = [c for c in fn.__code__.co_consts if getattr(c, "co_name", None) == "<lambda>"]
        flat = "".join(src.split())
        shaped = (len(codes) == 1 and codes[0].co_kwonlyargcount == 1 and "member" in codes[0].co_varnames
                  and 'lambda*args,member=member,**kwargs:(member(*args,**{k:v' in flat
                  and 'ifk!="_semantic"},_semantic=interpreter_semantic))' in flat)
        _LAMBDA.update(fn=fn, code=codes[0] if shaped else None)
    return _LAMBDA["code"]


_LAMBDA: dict[str, Any] = {}
_CALLS: dict[int, tuple[Any, Any]] = {}  # id(builtin) -> (it, its wrapper without the dict comprehension)


def _builtin_call(put: Any, lambda_code: Any) -> Any:
    """``put``, or where it is the interpreter's wrapper around a builtin, the same call without building
    a filtered copy of the keyword arguments: ``_semantic`` taken out of the (fresh) ``kwargs`` and put
    last, the interpreter's semantic looked up in its module at each call, as the lambda does."""
    if lambda_code is None or getattr(put, "__code__", None) is not lambda_code:
        return put
    member = (put.__kwdefaults__ or {}).get("member")
    got = _CALLS.get(id(member))
    if got is None or got[0] is not member:
        module = vars(_INTERP)

        def call(*args, member=member, **kwargs):
            kwargs.pop("_semantic", None)
            kwargs["_semantic"] = module["interpreter_semantic"]
            return member(*args, **kwargs)

        got = _CALLS[id(member)] = (member, call)
    return got[1]


def _replay(recorded: list[tuple[Any, str, Any, Any]]) -> Any:
    scope_type = getattr(_INTERP, "_LangPatchScope", None)
    if scope_type is None:
        return None
    scope = scope_type()
    missing = getattr(_INTERP, "_MISSING", object())
    for obj, name, original, put in recorded:
        if getattr(obj, name, missing) is not original:
            scope.restore()
            return None
        scope.set_attr(obj, name, put)
    return scope


def _patch_lang_once(fn: Any) -> Any:
    langs = _langs(fn)
    if langs and _PATCHED and langs <= _PATCHED:
        return _NO_SCOPE
    scope = None
    if not _PATCHED and langs in _RECORDED:
        scope = _replay(_RECORDED[langs])
    if scope is None:
        scope = _ORIGINALS["_patch_lang"](fn)
        if not _PATCHED and langs:
            recorded = _record(scope)
            if recorded is not None:
                _RECORDED[langs] = recorded
    first = not _PATCHED
    _PATCHED.update(langs)
    # The first patch of a launch is the grid executor's, which restores its scope at the end;
    # a nested call's scope is never restored by the interpreter (it is returned and dropped).
    return _ExecutorScope(scope) if first else scope


def _np_dtype_memo(tt_dtype: Any) -> Any:
    original: Callable = _ORIGINALS["_get_np_dtype"]
    key = tt_dtype.element_ty if isinstance(tt_dtype, _BLOCK_TYPE) else tt_dtype
    try:
        return _NP_DTYPES[key]
    except KeyError:
        out = original(tt_dtype)
        _NP_DTYPES[key] = out
        return out
    except TypeError:  # unhashable (pointer types): the interpreter answers at once
        return original(tt_dtype)


_HOOKS: dict[str, Callable] = {"_patch_lang": _patch_lang_once, "_get_np_dtype": _np_dtype_memo}


def _usable(interp: Any) -> dict[str, Callable]:
    """The hooks whose target has the expected shape in this interpreter."""
    out = {}
    try:
        patch_src = inspect.getsource(interp._patch_lang)
        module_src = inspect.getsource(interp)
    except (AttributeError, OSError, TypeError):
        return out
    # _patch_lang(fn) -> scope with restore(); the executor restores it, device-function calls don't.
    if ("fn.__globals__" in patch_src and "return scope" in patch_src
            and "patch_scope = _patch_lang(self.fn)" in module_src and "patch_scope.restore()" in module_src):
        out["_patch_lang"] = _patch_lang_once
    dtype_fn = getattr(interp, "_get_np_dtype", None)
    if dtype_fn is not None:
        try:
            src = inspect.getsource(dtype_fn)
        except (OSError, TypeError):
            src = ""
        # a pure function of the dtype: pointers are uint64, a block answers for its element type
        if "np_types[tt_dtype.element_ty]" in src and "pointer_type" in src and "global" not in src:
            out["_get_np_dtype"] = _np_dtype_memo
    return out


_USABLE: dict[int, dict[str, Callable]] = {}


def install(interp: Any) -> None:
    """Install the usable hooks into ``interp`` (the interpreter module) for one sanitized launch."""
    global _INTERP, _BLOCK_TYPE
    import triton.language as tl

    _BLOCK_TYPE = tl.block_type
    key = id(interp)
    if key not in _USABLE:
        _USABLE[key] = _usable(interp)
    _INTERP = interp
    _PATCHED.clear()
    for name, hook in _USABLE[key].items():
        _ORIGINALS[name] = getattr(interp, name)
        setattr(interp, name, hook)
    interpreter_types.install(interp)  # Triton's type bookkeeping from memos (lab/interpreter_types.py)
    interpreter_args.install(interp)   # a launch's argument binding from memos (lab/interpreter_args.py)


def uninstall() -> None:
    """Put the interpreter's own functions back."""
    interp = _INTERP
    _PATCHED.clear()
    interpreter_types.uninstall()
    interpreter_args.uninstall()
    if interp is None:
        return
    for name, original in list(_ORIGINALS.items()):
        setattr(interp, name, original)
    _ORIGINALS.clear()


def installed() -> bool:
    """True while any of these hooks is in the interpreter."""
    if _INTERP is None:
        return interpreter_types.installed() or interpreter_args.installed()
    return (any(getattr(_INTERP, n, None) is h for n, h in _HOOKS.items())
            or interpreter_types.installed() or interpreter_args.installed())
