"""``lab/interpreter_inspect.py``: ``getfullargspec`` and ``getmembers`` answer what inspect's answer, call for
call, including after whatever a memo key must notice has changed."""

import enum
import inspect
import types

import pytest
import triton.language as tl

from mambalab.lab import interpreter_args
from mambalab.lab import interpreter_inspect as ii


def _same_spec(a, b):
    assert a == b
    assert type(a) is type(b)


def _fns():
    def plain(x, y, z=3):
        return x

    def annotated(x: int, y: "tl.constexpr", *, k: float = 1.0) -> None:
        pass

    def varargs(a, *rest, b=2, **kw):
        pass

    return [plain, annotated, varargs, interpreter_args._getcallargs, len, types.SimpleNamespace]


@pytest.mark.parametrize("i", range(6))
def test_getfullargspec_hit_and_miss_as_inspect(i):
    fn = _fns()[i]
    for _ in range(3):  # a miss, then hits
        try:
            want = inspect.getfullargspec(fn)
        except TypeError as e:
            with pytest.raises(TypeError, match=str(e)[:20]):
                ii.getfullargspec(fn)
            return
        got = ii.getfullargspec(fn)
        _same_spec(got, want)
        got.args.append("mutated")  # the caller's own lists and dicts: the next answer is unchanged
        got.annotations["mutated"] = 1


def test_getfullargspec_follows_every_part_of_its_key():
    def f(x, y: int = 1, *, k: int = 2):
        pass

    def g(a, b, c):
        pass

    _same_spec(ii.getfullargspec(f), inspect.getfullargspec(f))
    changes = [
        lambda: setattr(f, "__defaults__", (5,)),
        lambda: f.__kwdefaults__.update(k=7),             # in place
        lambda: setattr(f, "__kwdefaults__", {"k": 9}),
        lambda: f.__annotations__.update(x=str),          # in place
        lambda: f.__annotations__.pop("y"),
        lambda: setattr(f, "__annotations__", {"k": int}),
        lambda: setattr(f, "__code__", (lambda p, q=0, *, k=1: None).__code__),
        lambda: setattr(f, "__signature__", inspect.signature(g)),
    ]
    for change in changes:
        ii.getfullargspec(f)  # memoised as it is now
        change()
        _same_spec(ii.getfullargspec(f), inspect.getfullargspec(f))


class _Raises:
    def __get__(self, obj, cls=None):
        raise AttributeError("no")


class _Color(enum.Enum):
    RED = 1


class _Dup:
    def __dir__(self):
        return ["x", "x"]

    x = 1


def _pairs_equal(a, b):
    assert [k for k, _ in a] == [k for k, _ in b]
    for (k, x), (_, y) in zip(a, b):
        assert x is y or x == y, k


@pytest.mark.parametrize("obj", [tl, tl.core, tl.math, tl.core.tensor, tl.core.tensor_descriptor_base,
                                 _Color, _Dup(), type("WithRaising", (), {"r": _Raises(), "v": 1}), enum,
                                 inspect, int, 3])
def test_getmembers_as_inspect(obj):
    _pairs_equal(ii.getmembers(obj), inspect.getmembers(obj))
    _pairs_equal(ii.getmembers(obj, callable), inspect.getmembers(obj, callable))


def test_the_interpreter_s_inspect_answers_from_these_during_a_launch():
    assert interpreter_args._PROXY.getfullargspec is ii.getfullargspec
    assert interpreter_args._PROXY.getmembers is ii.getmembers
    assert interpreter_args._PROXY.signature is inspect.signature  # anything else: inspect's
