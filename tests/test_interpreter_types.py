"""Triton's type bookkeeping from memos (lab/interpreter_types.py): the same objects as Triton's own
constructors and methods build, key by key, and launches (nested ``@triton.jit`` calls included)
that write the same bytes with the memos and without them."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from mambalab.device import INTERPRET
from mambalab.lab import interpreter_types, sanitizer

pytestmark = [pytest.mark.skipif(not INTERPRET, reason="the interpreter's bookkeeping only"),
              pytest.mark.usefixtures("no_launch_memo")]  # every launch runs the interpreter


@pytest.fixture
def memos(monkeypatch):
    """The memos installed (as inside a sanitized launch), emptied first, removed after."""
    from triton.runtime import interpreter as interp

    for memo in (interpreter_types._BLOCK, interpreter_types._SHAPE, interpreter_types._COMPUTATION):
        memo.clear()
    monkeypatch.delenv("MAMBALAB_INTERPRETER_TYPES", raising=False)
    interpreter_types.install(interp)
    assert interpreter_types.installed()
    yield interp.interpreter_semantic
    interpreter_types.uninstall()
    assert not interpreter_types.installed()


def _attrs(o) -> dict:
    out = {}
    for k, v in vars(o).items():
        if isinstance(v, tl.tuple):
            v = ("tuple", [(type(x).__name__, getattr(x, "value", x)) for x in v.values], v.type)
        elif isinstance(v, tl.constexpr):
            v = ("constexpr", v.value, v.type)
        out[k] = v
    return out


def _plain_block(element_ty, shape):
    b = object.__new__(tl.block_type)
    interpreter_types._ORIGINALS["block_type"](b, element_ty, shape)
    return b


def test_block_types_from_the_memo_equal_triton_s_attribute_by_attribute(memos):
    for element_ty in (tl.float32, tl.int32, tl.int1, tl.pointer_type(tl.float16)):
        for shape in ([4], [2, 8], [16, 1], [1, 4, 2]):
            first, again = tl.block_type(element_ty, shape), tl.block_type(element_ty, list(shape))
            plain = _plain_block(element_ty, shape)
            assert _attrs(first) == _attrs(plain) == _attrs(again)
            assert again.element_ty is element_ty and again.shape is not first.shape
    assert tl.block_type(tl.float16, [4]).element_ty is tl.float16  # another element type: its own key
    shape = tl.block_type(tl.float32, [2, 8]).shape  # a tl.tuple, as with_element_ty passes
    assert _attrs(tl.block_type(tl.int32, shape)) == _attrs(_plain_block(tl.int32, shape))
    for _ in range(2):  # a Python tuple is refused by Triton's assert, memoised shape or not
        with pytest.raises(AssertionError):
            tl.block_type(tl.float32, (2, 8))


def test_an_invalid_shape_raises_as_triton_does_after_a_valid_one_was_memoised(memos):
    tl.block_type(tl.float32, [4])
    with pytest.raises(ValueError):
        tl.block_type(tl.float32, [3])  # not a power of two
    with pytest.raises(ValueError):
        tl.block_type(tl.float32, [3])  # never memoised
    with pytest.raises(TypeError):
        tl.block_type(tl.float32, [])  # 0-d


def test_tensors_from_the_memo_equal_triton_s(memos):
    for ty in (tl.block_type(tl.float32, [2, 4]), tl.float32, tl.block_type(tl.int32, [8])):
        a, b = tl.tensor("h", ty), tl.tensor("h", ty)  # the second from the memo
        plain = object.__new__(tl.tensor)
        interpreter_types._ORIGINALS["tensor"](plain, "h", ty)
        assert _attrs(a) == _attrs(b) == _attrs(plain)
        assert b.shape is not a.shape and b.shape.values is not a.shape.values  # a tuple of its own


def test_computation_type_is_keyed_by_both_types_their_scalar_flags_and_div_or_mod(memos):
    sem = memos
    original = interpreter_types._ORIGINALS["computation"]
    cases = [(tl.float16, False, tl.float16, False, False), (tl.float16, False, tl.float16, False, True),
             (tl.int32, False, tl.float32, True, False), (tl.int32, True, tl.float32, False, False),
             (tl.int32, False, tl.int64, False, False), (tl.int64, False, tl.int32, False, False),
             (tl.bfloat16, False, tl.float16, False, False), (tl.uint32, False, tl.int32, False, False),
             (tl.int8, False, tl.int32, True, False), (tl.int32, False, tl.int8, True, False)]
    for _ in range(2):  # the second round from the memo
        for a, a_s, b, b_s, dm in cases:
            assert sem.computation_type_impl(a, a_s, b, b_s, dm) is original(sem, a, a_s, b, b_s, dm), (a, b, dm)
    with pytest.raises(TypeError):  # different signedness with a division: raised, never memoised
        sem.computation_type_impl(tl.uint32, False, tl.int32, False, True)
    with pytest.raises(TypeError):
        sem.computation_type_impl(tl.uint32, False, tl.int32, False, True)


def test_broadcast_answers_at_once_only_where_triton_leaves_both_unchanged(memos):
    sem = memos
    block = lambda shape, ty=tl.float32: tl.tensor(None, tl.block_type(ty, shape))  # noqa: E731
    a, b = block([2, 4]), block([2, 4])
    assert sem.broadcast_impl_value(a, b) == (a, b)
    s, t = tl.tensor(None, tl.float32), tl.tensor(None, tl.int32)
    assert sem.broadcast_impl_value(s, t) == (s, t)
    with pytest.raises(ValueError):  # incompatible shapes: Triton's own error
        sem.broadcast_impl_value(block([2, 4]), block([4, 2]))


@triton.jit
def _scale(x, k):  # a nested @triton.jit call: scalars and blocks promoted and broadcast inside it
    return x * k + (k // 2)


@triton.jit
def _mixed(x_ptr, h_ptr, i_ptr, y_ptr, z_ptr, w_ptr, n, N: tl.constexpr, M: tl.constexpr):
    rows = tl.arange(0, N)[:, None]
    cols = tl.arange(0, M)[None, :]
    mask = (rows * M + cols) < n
    x = tl.load(x_ptr + rows * M + cols, mask=mask, other=0.0)  # fp32 [N, M]
    h = tl.load(h_ptr + rows * M + cols, mask=mask, other=1.0)  # fp16 [N, M]
    i = tl.load(i_ptr + tl.arange(0, N))  # int32 [N]
    y = _scale(x, 3) + h / h.to(tl.float16) + i[:, None].to(tl.float32) * 0.5  # fp16 division upcast to fp32
    tl.store(y_ptr + rows * M + cols, y, mask=mask)
    q = _scale(i, 5) % 7 + (i >= 0).to(tl.int32) - tl.where(i > 2, i, -i)  # int32: scalar promotion, where
    tl.store(z_ptr + tl.arange(0, N), q)
    w = tl.sum(h.to(tl.float32) * 2 + 1, axis=1)  # fp16 with int scalars, then a reduction
    tl.store(w_ptr + tl.arange(0, N), w)


def _run_mixed():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, generator=g)
    h = (torch.randn(4, 8, generator=g) + 3).half()
    i = torch.tensor([1, -2, 5, 3], dtype=torch.int32)
    y, z, w = torch.zeros(4, 8), torch.zeros(4, dtype=torch.int32), torch.zeros(4)
    sanitizer.launch(_mixed, (2,), x, h, i, y, z, w, 29, N=4, M=8)
    return y, z, w


def test_a_launch_with_nested_jit_calls_writes_the_same_bytes_with_the_memos_and_without(monkeypatch):
    monkeypatch.setenv("MAMBALAB_INTERPRETER_TYPES", "0")
    off = _run_mixed()
    assert not interpreter_types.installed()
    monkeypatch.setenv("MAMBALAB_INTERPRETER_TYPES", "1")
    calls = []
    original_install = interpreter_types.install
    monkeypatch.setattr(interpreter_types, "install", lambda interp: (calls.append(1), original_install(interp)))
    on, again = _run_mixed(), _run_mixed()
    assert calls, "the memos were installed for the launch"
    assert not interpreter_types.installed(), "and removed after it"
    for a, b, c in zip(off, on, again):
        assert a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
        assert torch.equal(a.view(torch.uint8), c.view(torch.uint8))


def test_an_engine_replay_is_the_same_with_the_memos_and_without(monkeypatch):
    from mambalab.lab.bugs import BugConfig
    from mambalab.lab.scenarios import guard_lt_zero
    from mambalab.lab.scenarios import run_workload

    runs = []
    for flag in ("0", "1"):
        monkeypatch.setenv("MAMBALAB_INTERPRETER_TYPES", flag)
        verdict, records = run_workload(guard_lt_zero(1), BugConfig())
        runs.append((verdict.summary(), [repr(r) for r in records]))
    assert runs[0] == runs[1]


def _handle_tensor(data, ty, block_shape=None):
    import numpy as np
    from triton.runtime.interpreter import TensorHandle

    arr = np.full(block_shape or (1,), data, dtype=np.uint64 if isinstance(ty, tl.pointer_type) else
                  {tl.float32: np.float32, tl.int32: np.int32, tl.float16: np.float16}[ty])
    return tl.tensor(TensorHandle(arr, ty), tl.block_type(ty, list(block_shape)) if block_shape else ty)


@pytest.mark.parametrize("scalar_ty,block_ty", [(tl.float32, tl.float16), (tl.int32, tl.float32),
                                                (tl.pointer_type(tl.float32), tl.int32)])
@pytest.mark.parametrize("block_first", [True, False])
def test_a_splat_from_the_memo_equals_triton_s(memos, scalar_ty, block_ty, block_first):
    """Block with scalar (either side): the splat skips lowering the block type to IR, and builds what
    Triton builds (type attribute by attribute, the handle's bytes and dtype)."""
    import numpy as np

    assert interpreter_types._SPLAT_READS_SHAPE_ONLY
    sem = memos
    block = _handle_tensor(2, block_ty, (2, 4))
    scalar = _handle_tensor(7, scalar_ty)
    args = (block, scalar) if block_first else (scalar, block)
    ours = sem.broadcast_impl_value(*args)
    theirs = interpreter_types._ORIGINALS["broadcast"](sem, *args)
    for a, b in zip(ours, theirs):
        assert _attrs(a.type) == _attrs(b.type)
        assert a.handle.dtype is b.handle.dtype
        assert a.handle.data.dtype == b.handle.data.dtype and np.array_equal(a.handle.data, b.handle.data)


def test_a_splat_to_a_type_triton_cannot_lower_still_raises(memos, monkeypatch):
    """Lowering is skipped only for a scalar type lowered once before: one that raises, raises every time."""
    sem = memos
    interpreter_types._LOWERED.clear()

    def refuse(self, builder):
        raise RuntimeError("cannot lower")

    monkeypatch.setattr(tl.block_type, "to_ir", refuse)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="cannot lower"):
            sem.broadcast_impl_value(_handle_tensor(2, tl.float32, (2, 4)), _handle_tensor(7, tl.int32))


def test_a_create_splat_that_reads_more_than_the_shape_gets_triton_s_path(monkeypatch):
    from triton.runtime import interpreter as interp

    assert interpreter_types._create_splat_reads_shape_only(interp.interpreter_semantic)
    monkeypatch.setattr(type(interp.interpreter_builder), "create_splat",
                        lambda self, ret_ty, arg: (ret_ty.shape, ret_ty.element_ty))
    assert not interpreter_types._create_splat_reads_shape_only(interp.interpreter_semantic)


def _binary_operands():
    f32 = lambda v, shape=None: _handle_tensor(v, tl.float32, shape)  # noqa: E731
    i32 = lambda v, shape=None: _handle_tensor(v, tl.int32, shape)  # noqa: E731
    f16 = lambda v, shape=None: _handle_tensor(v, tl.float16, shape)  # noqa: E731
    ptr = _handle_tensor(64, tl.pointer_type(tl.float32), (2, 4))
    return [
        (f32(1.0, (2, 4)), f32(2.0, (2, 4))), (f32(1.0), f32(2.0)), (i32(3, (2, 4)), i32(5, (2, 4))),
        (f16(1.0, (2, 4)), f16(2.0, (2, 4))), (f32(1.0, (2, 4)), i32(2, (2, 4))), (i32(1, (2, 4)), f16(2.0)),
        (f32(1.0, (2, 4)), f32(2.0, (4, 2))), (f32(1.0, (1, 4)), f32(2.0, (2, 4))), (f32(1.0, (2, 4)), 3),
        (7, i32(1, (2, 4))), (ptr, i32(1, (2, 4))), (i32(1, (2, 4)), ptr), (ptr, ptr),
        (i32(1, (2, 4)), _u32((2, 4))),  # div_or_mod: Triton refuses, unless arithmetic_check is off
    ]


def _u32(shape):
    import numpy as np
    from triton.runtime.interpreter import TensorHandle

    return tl.tensor(TensorHandle(np.full(shape, 3, dtype=np.uint32), tl.uint32), tl.block_type(tl.uint32, list(shape)))


@pytest.mark.parametrize("i", range(14))
@pytest.mark.parametrize("flags", [(False, False, True, False), (True, True, True, False), (False, False, True, True),
                                   (True, False, False, False), (False, False, False, False),
                                   (False, False, False, True)])
def test_binary_op_type_checking_answers_as_triton_s(memos, i, flags):
    """Two tensors already of the computation type skip the pointer checks and the casts; everything the
    function answers (the same objects where Triton returns its operands, types attribute by attribute,
    handles byte for byte, errors by type and message) is Triton's, for every operand pair and flag."""
    import numpy as np

    sem = memos
    assert "binary" in interpreter_types._ORIGINALS
    lhs, rhs = _binary_operands()[i]

    def call(fn):
        try:
            return "ok", fn(sem, lhs, rhs, *flags)
        except Exception as e:  # noqa: BLE001 - compared below
            return "raise", (type(e), str(e))

    ours = call(lambda s, *a: s.binary_op_type_checking_impl(*a))
    theirs = call(interpreter_types._ORIGINALS["binary"])
    assert ours[0] == theirs[0], (ours, theirs)
    if ours[0] == "raise":
        assert ours[1] == theirs[1]
        return
    for a, b, given in zip(ours[1], theirs[1], (lhs, rhs)):
        assert (a is given) == (b is given)
        assert _attrs(a.type) == _attrs(b.type) if isinstance(a.type, tl.block_type) else a.type == b.type
        assert a.handle.dtype == b.handle.dtype and np.array_equal(a.handle.data, b.handle.data)


def test_binary_op_type_checking_takes_its_short_path(memos, monkeypatch):
    """Same-type tensors never reach Triton's function (the pointer checks and casts skipped)."""
    sem = memos
    seen = []
    monkeypatch.setitem(interpreter_types._ORIGINALS, "binary", lambda *a: seen.append(a) or (a[1], a[2]))
    a, b = _handle_tensor(1.0, tl.float32, (2, 4)), _handle_tensor(2.0, tl.float32, (2, 4))
    assert sem.binary_op_type_checking_impl(a, b) == (a, b) and not seen
    sem.binary_op_type_checking_impl(a, _handle_tensor(2, tl.int32, (2, 4)))
    assert len(seen) == 1
