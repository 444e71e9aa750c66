"""The launch memo's code key (``launch_memo._code_key``) answered from its namespace snapshot.

A module whose namespace holds the same names bound to the same objects as at its last digest reuses
that digest without rebuilding its attribute lists; every other change goes through the digest. These
tests change one thing at a time *after* the snapshot was taken, so a snapshot that compared too little
(values without names, equality instead of identity) serves a stale key and fails them."""

from __future__ import annotations

import sys

import pytest

from mambalab.lab import launch_memo

pytestmark = pytest.mark.cpu_only(reason="the memo serves Triton's interpreter only")


def _fn():
    from mambalab.kernels import mamba_ssm_kernels

    return mamba_ssm_kernels._ssu_heads_kernel


@pytest.fixture
def mod(monkeypatch):
    from mambalab.kernels import mamba_ssm_kernels

    for name in ("_code_key_probe_a", "_code_key_probe_b"):
        monkeypatch.delattr(mamba_ssm_kernels, name, raising=False)
    launch_memo._code_key(_fn())
    return mamba_ssm_kernels


def _key():
    return launch_memo._code_key(_fn())


def test_the_same_namespace_is_the_same_key(mod):
    assert _key() == _key()


def test_a_renamed_binding_is_another_key(mod, monkeypatch):
    """The same objects in the same order under another name: the names are part of the snapshot."""
    probe = lambda: None  # noqa: E731
    monkeypatch.setattr(mod, "_code_key_probe_a", probe, raising=False)
    with_a = _key()
    monkeypatch.delattr(mod, "_code_key_probe_a")
    monkeypatch.setattr(mod, "_code_key_probe_b", probe, raising=False)
    assert _key() != with_a
    monkeypatch.delattr(mod, "_code_key_probe_b")
    monkeypatch.setattr(mod, "_code_key_probe_a", probe, raising=False)
    assert _key() == with_a


def test_another_function_under_a_name_is_another_key(mod, monkeypatch):
    monkeypatch.setattr(mod, "_code_key_probe_a", lambda: 1, raising=False)
    first = _key()
    monkeypatch.setattr(mod, "_code_key_probe_a", lambda: 1)  # equal source, another object
    assert _key() != first


def test_a_changed_constant_is_another_key_and_back_is_the_same(mod, monkeypatch):
    monkeypatch.setattr(mod, "_code_key_probe_a", 1, raising=False)
    one = _key()
    monkeypatch.setattr(mod, "_code_key_probe_a", 2)
    two = _key()
    monkeypatch.setattr(mod, "_code_key_probe_a", 1)
    assert two != one and _key() == one


def test_a_submodule_binding_alone_keeps_the_key(mod, monkeypatch):
    """Submodules are no part of the code (a package gains one at an import): the slow path agrees."""
    before = _key()
    monkeypatch.setattr(mod, "_code_key_probe_a", sys.modules["json"], raising=False)
    assert _key() == before
