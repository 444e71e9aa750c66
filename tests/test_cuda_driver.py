"""Building and loading the CUDA kernels of ``kernels/cuda`` (:mod:`mambalab.kernels.cuda_driver`), for both users:
the GDN's and the SSU's TMA kernels. A build or load failure is warned about once, names the kernel, the device and
the reason, and leaves the device to the Triton kernel; the cubin cache follows the source and the shared header;
without a GPU the reason says so."""

from __future__ import annotations

import shutil

import pytest
import torch

from mambalab.kernels import cuda_driver
from mambalab.kernels import gated_delta_rule_tma as gdn_tma
from mambalab.kernels import mamba_ssm_tma as ssu_tma

MODULES = [(gdn_tma, lambda: gdn_tma.TmaShape(), lambda shape: shape.entry, "the GDN's TMA kernel"),
           (ssu_tma, lambda: ssu_tma.ENTRIES[0], lambda name: name, "the SSU's TMA kernel")]


@pytest.mark.parametrize("module,make,entry,what", MODULES, ids=["gdn", "ssu"])
def test_a_kernel_that_cannot_be_built_leaves_the_device_to_triton(monkeypatch, module, make, entry, what):
    calls = []

    class Broken:
        def function(self, device, name):
            calls.append(name)
            raise RuntimeError("nvcc failed to build the source for sm_90a: no such target")

    monkeypatch.setattr(module, "_get_driver", lambda: Broken())
    monkeypatch.setattr(module, "_UNLOADABLE", {})
    dev = torch.device("cuda", 3)
    with pytest.warns(RuntimeWarning, match=rf"{what} could not be built or loaded on cuda:3.*Triton kernel runs "
                                            r"there instead: nvcc failed"):
        assert not module.loadable(dev, make())
    assert not module.loadable(dev, make())  # remembered: no second build, no second warning
    assert calls == [entry(make())] and 3 in module._UNLOADABLE
    assert not module.loadable(torch.device("cuda", 3), make())


def test_a_loaded_kernel_is_loadable(recwarn):
    class Working:
        def function(self, device, name):
            return name

    assert cuda_driver.loadable(Working(), {}, torch.device("cuda", 1), "k", "a kernel")
    assert not recwarn.list


def test_without_a_gpu_the_reason_says_so():
    ok, why = cuda_driver.available(torch.device("cpu"), "the SSU's TMA kernel")
    assert not ok and why.startswith("the SSU's TMA kernel needs a CUDA GPU")


@pytest.mark.parametrize("module,entries", [(gdn_tma, lambda: [s.entry for s in gdn_tma.SHAPES]),
                                            (ssu_tma, lambda: ssu_tma.ENTRIES)], ids=["gdn", "ssu"])
def test_each_source_builds_with_nvcc(tmp_path, monkeypatch, module, entries):
    """Each kernel's source (with the shared header) builds for sm_90a with every entry point its module launches,
    once: the second build is the cached cubin."""
    if cuda_driver.nvcc() is None:
        pytest.skip("no nvcc on this machine")
    monkeypatch.setenv("MAMBALAB_CACHE", str(tmp_path))
    cubin = module.build("sm_90a")
    data = cubin.read_bytes()
    assert data[:4] == b"\x7fELF"
    assert all(name.encode() in data for name in entries())
    assert module.build("sm_90a") == cubin


def test_the_cache_follows_the_source_and_the_shared_header(tmp_path, monkeypatch):
    """Each source's cubin is rebuilt when it or ``tma_ptx.cuh`` changes (both kernels include the header)."""
    if cuda_driver.nvcc() is None:
        pytest.skip("no nvcc on this machine")
    monkeypatch.setenv("MAMBALAB_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "cuda"
    shutil.copytree(ssu_tma.SOURCE.parent, src)
    first = {name: cuda_driver.build(src / name) for name in (ssu_tma.SOURCE.name, gdn_tma.SOURCE.name)}
    assert all(p.read_bytes()[:4] == b"\x7fELF" for p in first.values())
    assert {name: cuda_driver.build(src / name) for name in first} == first  # cached
    with open(src / "tma_ptx.cuh", "a") as f:
        f.write("// an edit\n")
    again = {name: cuda_driver.build(src / name) for name in first}
    assert all(again[name] != first[name] and again[name].is_file() for name in first)
