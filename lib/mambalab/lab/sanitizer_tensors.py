"""The tensors of a sanitized launch: identity, legal byte range and slot arithmetic.

Split out of :mod:`mambalab.lab.sanitizer` (the interpreter hooks use these):
which torch tensor an argument is (``triton.reinterpret`` unwrapped), the
name(s) it was passed under, its view footprint (the legal bytes: lowest to
highest reachable element of the view, not of the buffer behind it) and how
an element offset maps back to a slot (the dim-0 coordinate).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np



def _unwrap(arg: Any) -> Any:
    """The torch tensor behind ``arg`` (``triton.reinterpret`` wraps one)."""
    base = getattr(arg, "base", None)
    if type(arg).__name__ == "TensorWrapper" and base is not None:
        return base
    return arg


def _key(t: Any) -> tuple:
    return (int(t.data_ptr()), tuple(t.shape), tuple(t.stride()), t.element_size())


def _layout(t: Any) -> tuple:
    return (tuple(t.shape), tuple(t.stride()), t.element_size(), int(t.storage_offset()))


@dataclass
class _Entry:
    tag: int
    names: tuple[str, ...]
    data_ptr: int
    itemsize: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    lo: int
    hi: int

    @classmethod
    def of(cls, tag: int, names: tuple[str, ...], t: Any) -> "_Entry":
        shape, stride = tuple(int(s) for s in t.shape), tuple(int(s) for s in t.stride())
        itemsize, ptr = int(t.element_size()), int(t.data_ptr())
        if any(s == 0 for s in shape):
            lo = hi = ptr
        else:
            low = sum(min(0, (n - 1) * s) for n, s in zip(shape, stride))
            high = sum(max(0, (n - 1) * s) for n, s in zip(shape, stride))
            lo, hi = ptr + low * itemsize, ptr + (high + 1) * itemsize
        return cls(tag, names, ptr, itemsize, shape, stride, lo, hi)

    @property
    def name(self) -> str:
        return self.names[0] if self.names else "<unnamed tensor>"

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def num_slots(self) -> int:
        return self.shape[0] if self.shape else 1

    def elements(self, addr: np.ndarray) -> np.ndarray:
        return np.floor_divide(addr - self.data_ptr, self.itemsize)

    def slots_of(self, elems: np.ndarray) -> np.ndarray:
        """The dim-0 coordinate of each element offset (floor, so -1 below the first slot)."""
        if not self.shape:
            return np.zeros_like(elems)
        order = sorted((d for d in range(len(self.shape)) if self.stride[d] > 0),
                       key=lambda d: (-self.stride[d], d))
        rem = elems.copy()
        for d in order:
            coord = np.floor_divide(rem, self.stride[d])
            if d == 0:
                return coord
            rem = rem - coord * self.stride[d]
        return np.zeros_like(elems)


_SIGNATURES: dict[Callable, inspect.Signature] = {}


def _flatten_params(fn: Callable, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """``(name, tensor)`` for every tensor reachable from the launch's arguments."""
    sig = _SIGNATURES.get(fn)
    if sig is None:
        sig = _SIGNATURES[fn] = inspect.signature(fn)
    known = {k: v for k, v in kwargs.items() if k in sig.parameters}
    try:
        bound = sig.bind_partial(*args, **known)
    except TypeError:
        return []
    bound.apply_defaults()
    out: list[tuple[str, Any]] = []

    def walk(name: str, value: Any) -> None:
        value = _unwrap(value)
        if hasattr(value, "data_ptr") and hasattr(value, "stride"):
            out.append((name, value))
        elif isinstance(value, tuple):
            for i, v in enumerate(value):
                walk(f"{name}[{i}]", v)
        elif hasattr(value, "base") and hasattr(value, "block_shape"):
            walk(f"{name}.base", value.base)

    for name, value in bound.arguments.items():
        walk(name, value)
    return out


def _python_fn(kernel: Any) -> Callable | None:
    """The Python function behind a jit / interpreted / autotuned kernel."""
    k = kernel
    for _ in range(8):
        fn = getattr(k, "fn", None)
        if fn is None:
            return k if inspect.isfunction(k) else None
        if inspect.isfunction(fn):
            return fn
        k = fn
    return None
