"""Triton's type bookkeeping under the interpreter, answered from memos while a sanitized launch runs.

Under the interpreter every operation of a kernel goes through Triton's frontend: the operands'
types are promoted (``computation_type_impl``), broadcast (``broadcast_impl_value``), and every
result is wrapped in a new ``tl.tensor`` with a new ``tl.block_type``. Those constructors normalise
the shape through ``tl.tuple``/``tl.constexpr`` layers (``_unwrap_shape``,
``validate_block_shape``, ``_type_for_tuple_values``) whose answer depends only on the element type
and the shape's integers. Profiled on the guard grid (``docs/speed.md``, seventh pass), that
bookkeeping was most of ``binary_op_type_checking_impl`` and ``broadcast_impl_value``, and those
two were ~20% of a toggle. Here four pieces answer from memos keyed by exactly what they read; what
a kernel computes never passes through them (no value, only types and shapes):

* ``block_type(element_ty, shape)`` with ``shape`` a sequence of plain ``int``: keyed by the element
  type (by identity, kept alive) and the integers. A hit sets the four attributes the constructor
  sets (``element_ty``; ``shape``, a new ``tl.tuple`` of the same integers sharing the
  ``tuple_type`` description; ``numel``; ``name``). The first build of a key runs the constructor
  itself, so an invalid shape (not a power of two, too large, a ``constexpr`` or a float in it)
  raises as it does and is never memoised.
* ``tensor(handle, type)``: its ``shape`` (a new ``tl.tuple`` of ``constexpr`` objects) and ``numel``,
  keyed by the type's shape integers; the ``constexpr`` objects and the ``tuple_type`` description are
  shared between tensors of one shape (Triton never changes a ``constexpr`` after building it: its
  only assignments are in its constructor; a kernel reads ``x.shape[i]``, it cannot assign to it).
* ``computation_type_impl(a, a_is_scalar, b, b_is_scalar, div_or_mod)``, a pure function of two
  plain dtypes (pointer and other types are not memoised), keyed by the dtypes' identity (kept
  alive): a hit returns what the first call returned, the same object where that was a constant
  (``tl.float32``) and the same argument (``a`` or ``b``) where it returned one of them; a call
  that raised is not memoised.
* ``broadcast_impl_value(lhs, rhs)`` answers at once where Triton's answer is "both unchanged": two
  scalars, or two blocks of identical shape; a block with a scalar (either side) is Triton's splat
  without lowering the block type to IR for the builder's ``create_splat``, which reads only its
  shape (checked at install; a scalar type is lowered once, so one Triton cannot lower still
  raises); every other case (a broadcast, a rank change, an error) runs Triton's own code.

Only the interpreter's own semantic object (``interpreter.interpreter_semantic``) gets the last two,
as instance attributes; the compiler's ``TritonSemantic`` is untouched. Equality with Triton's own
answers is tested attribute by attribute and over whole launches' bytes, nested ``@triton.jit``
calls included (``tests/test_interpreter_types.py``). Installed and removed with the sanitizer's
hooks (only while a sanitized launch runs); ``MAMBALAB_INTERPRETER_TYPES=0`` leaves them out.
"""

from __future__ import annotations

import os
import types
from typing import Any

_ORIGINALS: dict[str, Any] = {}
_BLOCK: dict[tuple, tuple] = {}   # (id(element_ty), *shape) -> (element_ty, tuple_type, numel, name)
_SHAPE: dict[tuple, tuple] = {}   # shape ints -> (tuple_type of the constexpr shape, numel, shape constexprs)
_COMPUTATION: dict[tuple, tuple] = {}  # (id(a), a_is_scalar, id(b), b_is_scalar, div_or_mod) -> (a, b, answer)
_LOWERED: dict[int, Any] = {}    # id(scalar type) -> the type, once block_type(type, ...).to_ir succeeded
_SCALAR_TYPES: tuple = ()        # (tl.dtype, tl.pointer_type), bound at install
_SPLAT_READS_SHAPE_ONLY = False  # the interpreter builder's create_splat reads only ret_ty.shape (install)
_SPLAT_CHECKED: dict[int, tuple] = {}  # id(create_splat) -> (it, whether it reads only ret_ty.shape)
_MAX_ENTRIES = 4096  # the memos are emptied past this many keys (the dtypes they keep alive are few)
_TL: Any = None
_SEMANTIC: Any = None
_builtin_type = type


def enabled() -> bool:
    return os.environ.get("MAMBALAB_INTERPRETER_TYPES", "1") != "0"


def _block_type_init(self, element_ty, shape):
    vals = tuple(shape) if isinstance(shape, (list, _TL.tuple)) else None  # what Triton asserts (a Python
    if vals is not None:                                                   # tuple is refused)
        for v in vals:
            if _builtin_type(v) is not int:
                vals = None
                break
    if vals is None:
        return _ORIGINALS["block_type"](self, element_ty, shape)
    key = (id(element_ty), *vals)
    got = _BLOCK.get(key)
    if got is None or got[0] is not element_ty:
        _ORIGINALS["block_type"](self, element_ty, shape)  # raises as Triton does for an invalid shape
        if len(_BLOCK) > _MAX_ENTRIES:
            _BLOCK.clear()
        _BLOCK[key] = (element_ty, self.shape.type, self.numel, self.name)
        return
    self.element_ty = element_ty
    self.shape = _TL.tuple(list(vals), got[1])
    self.numel = got[2]
    self.name = got[3]


def _tensor_init(self, handle, type):  # noqa: A002 - Triton's parameter name
    vals = tuple(type.shape) if type.is_block() else ()
    got = _SHAPE.get(vals)
    if got is None:
        _ORIGINALS["tensor"](self, handle, type)
        if all(_builtin_type(v) is int for v in vals):
            if len(_SHAPE) > _MAX_ENTRIES:
                _SHAPE.clear()
            _SHAPE[vals] = (self.shape.type, self.numel, list(self.shape.values))
        return
    self.handle = handle
    self.numel = got[1]
    self.type = type
    self.dtype = type.scalar
    self.shape = _TL.tuple(list(got[2]), got[0])


def _computation_type_impl(self, a_ty, a_is_scalar, b_ty, b_is_scalar, div_or_mod):
    plain = _TL.dtype
    if _builtin_type(a_ty) is not plain or _builtin_type(b_ty) is not plain:
        return _ORIGINALS["computation"](self, a_ty, a_is_scalar, b_ty, b_is_scalar, div_or_mod)
    key = (id(a_ty), bool(a_is_scalar), id(b_ty), bool(b_is_scalar), bool(div_or_mod))
    got = _COMPUTATION.get(key)
    if got is not None and got[0] is a_ty and got[1] is b_ty:
        return a_ty if got[2] == "a" else b_ty if got[2] == "b" else got[3]
    out = _ORIGINALS["computation"](self, a_ty, a_is_scalar, b_ty, b_is_scalar, div_or_mod)
    if len(_COMPUTATION) > _MAX_ENTRIES:
        _COMPUTATION.clear()
    if out is a_ty:
        _COMPUTATION[key] = (a_ty, b_ty, "a", None)  # (where a_ty is b_ty, either is the answer)
    elif out is b_ty:
        _COMPUTATION[key] = (a_ty, b_ty, "b", None)
    elif _builtin_type(out) is plain:
        _COMPUTATION[key] = (a_ty, b_ty, "const", out)  # tl.float32 and the like: module constants
    return out


def _broadcast_impl_value(self, lhs, rhs):
    lt, rt = lhs.type, rhs.type
    block = _TL.block_type
    tl_tuple = _TL.tuple
    if _builtin_type(lt) is _TL.dtype and _builtin_type(rt) is _TL.dtype:
        return lhs, rhs  # scalar with scalar: Triton returns both as they are
    if (_builtin_type(lt) is block and _builtin_type(rt) is block and _builtin_type(lt.shape) is tl_tuple
            and _builtin_type(rt.shape) is tl_tuple and lt.shape.values == rt.shape.values):
        return lhs, rhs  # blocks of one shape: nothing to expand or broadcast
    if _SPLAT_READS_SHAPE_ONLY:
        if _builtin_type(lt) is block and _builtin_type(rt) in _SCALAR_TYPES:
            return lhs, _splat(self, rhs, rt, lt)
        if _builtin_type(rt) is block and _builtin_type(lt) in _SCALAR_TYPES:
            return _splat(self, lhs, lt, rt), rhs
    return _ORIGINALS["broadcast"](self, lhs, rhs)


def _binary_op_type_checking_impl(self, lhs, rhs, allow_lhs_ptr=False, allow_rhs_ptr=False, arithmetic_check=True,
                                  div_or_mod=False):
    """Triton's, less the steps that change nothing where both operands are tensors (no ``numbers.Number``:
    checked at install) of non-pointer element types each already of the computation type: the pointer
    checks pass, both casts return their input; the computation type and the broadcast are still asked
    (the same calls, so what raises still raises). Every other case runs Triton's own code."""
    tensor = _TL.tensor
    if arithmetic_check and _builtin_type(lhs) is tensor and _builtin_type(rhs) is tensor:
        lt, rt = lhs.type.scalar, rhs.type.scalar
        if not lt.is_ptr() and not rt.is_ptr():
            ret = self.computation_type_impl(lhs.dtype, False, rhs.dtype, False, div_or_mod).scalar
            if lt == ret and rt == ret:
                return self.broadcast_impl_value(lhs, rhs)
    return _ORIGINALS["binary"](self, lhs, rhs, allow_lhs_ptr, allow_rhs_ptr, arithmetic_check, div_or_mod)


def _splat(self, value, value_ty, block_ty):
    """Triton's ``make_shape_compatible(block, scalar)``: ``value`` splat to ``block_ty``'s shape. Triton
    passes the interpreter builder's ``create_splat`` the block type lowered with ``to_ir``, of which it
    reads only the shape (checked at install): lowered once per scalar type, so a type Triton cannot
    lower still raises where Triton raises, the rest is not lowered again."""
    out_ty = block_ty.with_element_ty(value_ty.scalar)
    scalar = out_ty.element_ty
    if _LOWERED.get(id(scalar)) is not scalar:
        out_ty.to_ir(self.builder)
        if len(_LOWERED) > _MAX_ENTRIES:
            _LOWERED.clear()
        _LOWERED[id(scalar)] = scalar
    return self.make_tensor(self.builder.create_splat(out_ty, value.handle), out_ty)


def _create_splat_reads_shape_only(semantic: Any) -> bool:
    """Whether the builder's ``create_splat(ret_ty, arg)`` reads nothing of ``ret_ty`` but ``ret_ty.shape``
    (Triton 3.6-3.9's interpreter: ``shape = ret_ty.shape`` and no other use)."""
    import inspect

    fn = getattr(_builtin_type(getattr(semantic, "builder", None)), "create_splat", None)
    known = _SPLAT_CHECKED.get(id(fn))
    if known is not None and known[0] is fn:
        return known[1]
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        src = ""
    _SPLAT_CHECKED[id(fn)] = (fn, src.count("ret_ty") == 2 and "shape = ret_ty.shape" in src)
    return _SPLAT_CHECKED[id(fn)][1]


def install(interp: Any) -> None:
    """Install the memos for one sanitized launch (``interp``: Triton's interpreter module)."""
    global _TL, _SEMANTIC
    if not enabled() or "block_type" in _ORIGINALS:
        return
    import triton.language as tl

    semantic = getattr(interp, "interpreter_semantic", None)
    cls = _builtin_type(semantic)
    if semantic is None or not all(callable(getattr(cls, n, None))
                                   for n in ("computation_type_impl", "broadcast_impl_value")):
        return
    import numbers
    _TL, _SEMANTIC = tl, semantic
    global _SCALAR_TYPES, _SPLAT_READS_SHAPE_ONLY
    _SCALAR_TYPES = (tl.dtype, tl.pointer_type)
    _SPLAT_READS_SHAPE_ONLY = _create_splat_reads_shape_only(semantic)
    _ORIGINALS["block_type"] = tl.block_type.__dict__["__init__"]
    _ORIGINALS["tensor"] = tl.tensor.__dict__["__init__"]
    _ORIGINALS["computation"] = cls.computation_type_impl
    _ORIGINALS["broadcast"] = cls.broadcast_impl_value
    tl.block_type.__init__ = _block_type_init
    tl.tensor.__init__ = _tensor_init
    semantic.computation_type_impl = types.MethodType(_computation_type_impl, semantic)
    semantic.broadcast_impl_value = types.MethodType(_broadcast_impl_value, semantic)
    if _binary_op_shaped(cls) and not issubclass(tl.tensor, numbers.Number):
        _ORIGINALS["binary"] = cls.binary_op_type_checking_impl
        semantic.binary_op_type_checking_impl = types.MethodType(_binary_op_type_checking_impl, semantic)


_BINARY_CHECKED: dict[int, tuple] = {}


def _binary_op_shaped(cls) -> bool:
    """Whether Triton's ``binary_op_type_checking_impl`` has the shape the fast path assumes (3.6-3.9):
    the scalar checks, both pointer checks, the computation type with both casts, then the broadcast."""
    import inspect

    fn = getattr(cls, "binary_op_type_checking_impl", None)
    known = _BINARY_CHECKED.get(id(fn))
    if known is not None and known[0] is fn:
        return known[1]
    try:
        flat = "".join(inspect.getsource(fn).split())
    except (OSError, TypeError):
        flat = ""
    need = ("lhs_sca_ty=self.to_tensor_type(lhs)iflhs_is_scalarelselhs.dtype",
            "self.check_ptr_type_impl(lhs_sca_ty,rhs_sca_ty,allow_lhs_ptr)",
            "self.check_ptr_type_impl(rhs_sca_ty,lhs_sca_ty,allow_rhs_ptr)",
            "ifarithmetic_checkandnotlhs_sca_ty.is_ptr()andnotrhs_sca_ty.is_ptr():",
            "ret_sca_ty=self.computation_type_impl(lhs_sca_ty,lhs_is_scalar,rhs_sca_ty,rhs_is_scalar,div_or_mod)",
            "lhs=self._cast_to_computation_type(lhs,ret_sca_ty)",
            "lhs,rhs=self.broadcast_impl_value(lhs,rhs)returnlhs,rhs")
    cast = getattr(cls, "_cast_to_computation_type", None)
    try:
        cast_flat = "".join(inspect.getsource(cast).split()) + "".join(inspect.getsource(cls.cast).split())
    except (OSError, TypeError):
        cast_flat = ""
    ok = (all(n in flat for n in need) and "returnself.cast(value,dtype)" in cast_flat
          and "ifsrc_sca_ty==dst_sca_ty:returninput" in cast_flat)
    _BINARY_CHECKED[id(fn)] = (fn, ok)
    return ok


def uninstall() -> None:
    """Put Triton's own constructors and methods back."""
    if "block_type" not in _ORIGINALS:
        return
    tl, semantic = _TL, _SEMANTIC
    tl.block_type.__init__ = _ORIGINALS.pop("block_type")
    tl.tensor.__init__ = _ORIGINALS.pop("tensor")
    for name in ("computation_type_impl", "broadcast_impl_value", "binary_op_type_checking_impl"):
        semantic.__dict__.pop(name, None)
    _ORIGINALS.clear()


def installed() -> bool:
    """True while any of the memos is in place."""
    return bool(_ORIGINALS)
