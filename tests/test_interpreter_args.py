"""A launch's argument binding from memos (lab/interpreter_args.py): ``getcallargs`` and ``str_to_ty`` answer
what inspect's and Triton's own functions answer, call for call, follow every part of their key, and a
launch writes the same bytes with the memos and without."""

from __future__ import annotations

import inspect

import pytest
import torch
import triton
import triton.language as tl

from mambalab.device import INTERPRET
from mambalab.lab import interpreter_args, sanitizer

pytestmark = [pytest.mark.skipif(not INTERPRET, reason="the interpreter's argument binding only"),
              pytest.mark.usefixtures("no_launch_memo")]  # every launch runs the interpreter


@pytest.fixture
def memos(monkeypatch):
    from triton.runtime import interpreter as interp

    interpreter_args._SPECS.clear()
    interpreter_args._TYS.clear()
    monkeypatch.delenv("MAMBALAB_INTERPRETER_ARGS", raising=False)
    interpreter_args.install(interp)
    assert interp.inspect is not inspect and tl.str_to_ty is interpreter_args._str_to_ty
    yield interp
    interpreter_args.uninstall()
    assert interp.inspect is inspect and not interpreter_args.installed()
    assert tl.str_to_ty is interpreter_args._ORIGINALS.get("str_to_ty", tl.str_to_ty)


def _outcome(f, *a, **k):
    try:
        out = f(*a, **k)
    except Exception as e:  # noqa: BLE001 - the same exception, type and message
        return ("raised", type(e), str(e))
    return ("ok", [(n, id(v)) for n, v in out.items()])  # names in order, values by identity


def _kernel(x_ptr, y_ptr, n, scale=2.0, BLOCK=16, *, _reserved=None):
    pass


def _plain(x_ptr, y_ptr, n, scale=2.0, BLOCK=16):
    pass


_CALLS = [
    ((1, 2, 3), {}), ((1, 2, 3, 4), {}), ((1, 2, 3, 4, 5), {}), ((1, 2), {"n": 3}),
    ((1,), {"n": 3, "y_ptr": 2, "BLOCK": 8}), ((), {"BLOCK": 8, "x_ptr": 1, "n": 3, "y_ptr": 2}),
    ((1, 2, 3), {"scale": 0.5}),
    ((1, 2, 3, 4, 5, 6), {}),            # too many
    ((1, 2), {}),                        # one missing
    ((1, 2, 3), {"n": 4}),               # a name twice
    ((1, 2, 3), {"other": 4}),           # an unknown name
    ((), {}),
]


@pytest.mark.parametrize("args,kwargs", _CALLS)
@pytest.mark.parametrize("fn", [_plain, _kernel], ids=["plain", "keyword-only"])
def test_getcallargs_answers_what_inspect_answers_call_for_call(memos, fn, args, kwargs):
    args = tuple(object() if isinstance(a, int) else a for a in args)
    ours = memos.inspect.getcallargs
    assert ours is interpreter_args._getcallargs
    assert _outcome(ours, fn, *args, **kwargs) == _outcome(inspect.getcallargs, fn, *args, **kwargs)
    assert _outcome(ours, fn, *args, **kwargs) == _outcome(inspect.getcallargs, fn, *args, **kwargs)  # a hit


def test_getcallargs_follows_the_defaults_the_code_and_a_signature(memos):
    def f(a, b, c=1):
        pass

    ours = memos.inspect.getcallargs
    assert ours(f, 0, 5) == inspect.getcallargs(f, 0, 5) == {"a": 0, "b": 5, "c": 1}
    f.__defaults__ = (7,)                       # the defaults are part of the key
    assert ours(f, 0, 5) == inspect.getcallargs(f, 0, 5) == {"a": 0, "b": 5, "c": 7}
    f.__defaults__ = (3, 4)
    assert ours(f, 0) == inspect.getcallargs(f, 0) == {"a": 0, "b": 3, "c": 4}

    def g(p, q, r=9):
        pass

    f.__code__ = g.__code__                     # so are the code's names (the same defaults object)
    assert list(ours(f, 1, 2)) == list(inspect.getcallargs(f, 1, 2)) == ["p", "q", "r"]
    f.__signature__ = inspect.Signature([inspect.Parameter("z", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
    assert _outcome(ours, f, 1) == _outcome(inspect.getcallargs, f, 1)      # inspect honours a signature
    assert _outcome(ours, f, 1, 2) == _outcome(inspect.getcallargs, f, 1, 2)
    del f.__signature__
    f.__kwdefaults__ = None
    assert list(ours(f, 1, 2)) == ["p", "q", "r"]
    bound = _Holder().method                    # a bound method: inspect's own path
    assert _outcome(ours, bound, 1) == _outcome(inspect.getcallargs, bound, 1)


class _Holder:
    def method(self, a, b=2):
        pass


_TYPE_STRINGS = ["i1", "i8", "i16", "i32", "i64", "u8", "u32", "u64", "fp16", "bf16", "fp32", "fp64", "B",
                 "*fp32", "*fp16", "*bf16", "*i32", "*i64", "*u8", "*i1", "*kfp32", "*ki32", "*fp8e5"]


def _ty_attrs(t) -> dict:
    out = {"type": type(t), "str": str(t)}
    for k, v in vars(t).items():
        out[k] = _ty_attrs(v) if isinstance(v, tl.dtype) else v
    return out


@pytest.mark.parametrize("name", _TYPE_STRINGS)
def test_str_to_ty_answers_triton_s_type_attribute_by_attribute(memos, name):
    theirs = interpreter_args._ORIGINALS["str_to_ty"]
    first, again = tl.str_to_ty(name, None), tl.str_to_ty(name, None)
    assert again is first, "a hit returns the first answer"
    assert first == theirs(name, None) and _ty_attrs(first) == _ty_attrs(theirs(name, None))


def test_str_to_ty_keys_by_the_whole_string_and_only_memoises_plain_ones(memos):
    assert tl.str_to_ty("*fp32", None).element_ty == tl.float32
    assert tl.str_to_ty("*kfp32", None).const and not tl.str_to_ty("*fp32", None).const
    assert tl.str_to_ty("*fp16", None).element_ty == tl.float16
    assert tl.str_to_ty("fp32", None) is tl.float32 and tl.str_to_ty("*fp32", None) != tl.str_to_ty("fp32", None)
    c = tl.constexpr(3)
    assert tl.str_to_ty("constexpr", c) == interpreter_args._ORIGINALS["str_to_ty"]("constexpr", c)
    assert "constexpr" not in interpreter_args._TYS
    with pytest.raises(KeyError):
        tl.str_to_ty("nonsense", None)
    assert "nonsense" not in interpreter_args._TYS
    assert set(interpreter_args._TYS) <= set(_TYPE_STRINGS)


@pytest.mark.parametrize("arg", [0, 7, -3, 2**31 - 1, 2**31, 2**32 - 1, 2**32, -2**31 - 1, 2**63, True,
                                 "fp32", "i64", "u8", "fp16"])
def test_implicit_cvt_converts_the_same_with_the_memo_and_without(memos, arg):
    from triton.runtime import interpreter as interp

    if isinstance(arg, str):
        dtype = {"fp32": torch.float32, "i64": torch.int64, "u8": torch.uint8, "fp16": torch.float16}[arg]
        arg = torch.zeros(4, dtype=dtype)
    ours, ours_again = interp._implicit_cvt(arg), interp._implicit_cvt(arg)
    interpreter_args.uninstall()
    theirs = interp._implicit_cvt(arg)
    interpreter_args.install(interp)
    for got in (ours, ours_again):
        assert _ty_attrs(got.type) == _ty_attrs(theirs.type) and got.dtype == theirs.dtype
        assert got.handle.data.dtype == theirs.handle.data.dtype and (got.handle.data == theirs.handle.data).all()
        assert _ty_attrs(got.handle.dtype) == _ty_attrs(theirs.handle.dtype)


@triton.jit
def _axpy(x_ptr, y_ptr, out_ptr, n, scale, BLOCK: tl.constexpr = 8):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    y = tl.load(y_ptr + offs, mask=mask, other=0).to(tl.float32)
    tl.store(out_ptr + offs, x * scale + y, mask=mask)


def _run_axpy():
    x = torch.arange(20, dtype=torch.float32)
    y = torch.arange(20, dtype=torch.int32)
    out, out2 = torch.zeros(20), torch.zeros(20)
    sanitizer.launch(_axpy, (3,), x, y, out, 20, 0.5)
    sanitizer.launch(_axpy, (5,), x, y, out2, n=20, scale=1.5, BLOCK=4)
    return out, out2


def test_a_launch_writes_the_same_bytes_with_the_memos_and_without(monkeypatch):
    from triton.runtime import interpreter as interp

    monkeypatch.setenv("MAMBALAB_INTERPRETER_ARGS", "0")
    off = _run_axpy()
    monkeypatch.setenv("MAMBALAB_INTERPRETER_ARGS", "1")
    calls, seen = [], []
    original = interpreter_args._getcallargs

    def spy(func, /, *a, **k):
        ours = original(func, *a, **k)
        seen.append(_outcome(lambda: ours) == _outcome(lambda: inspect.getcallargs(func, *a, **k)))
        return ours

    monkeypatch.setattr(interpreter_args._PROXY, "getcallargs", spy)
    original_install = interpreter_args.install
    monkeypatch.setattr(interpreter_args, "install", lambda i: (calls.append(1), original_install(i)))
    on, again = _run_axpy(), _run_axpy()
    assert calls and seen and all(seen), "the launches bound their arguments from the memo, as inspect does"
    assert not interpreter_args.installed() and interp.inspect is inspect, "and put inspect back after"
    for a, b, c in zip(off, on, again):
        assert torch.equal(a, b) and torch.equal(a, c)
