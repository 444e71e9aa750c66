"""Model shapes and one tensor-parallel rank's share (:mod:`mambalab.gpu.model_shapes`), and the bench's cases built
at them (GPU only), which the kernels then pass the agreement gate on beside mambalab's own reference."""

from __future__ import annotations

import pytest
import torch

from mambalab.gpu import bench_cases
from mambalab.gpu.model_shapes import GDN_MODELS, MAMBA_MODELS, conv_shape, gdn_shape, ssu_shape


def test_the_bench_shapes_are_the_models_whole():
    assert ssu_shape("NemotronH-8B") == bench_cases.SSU
    assert gdn_shape("Qwen3-Next-80B-A3B") == bench_cases.GDN
    assert conv_shape("Qwen3-Next-80B-A3B") == bench_cases.CONV


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_a_rank_holds_its_share_of_the_heads(tp):
    s = ssu_shape("NemotronH-8B", tp)
    assert (s["nheads"], s["ngroups"], s["headdim"], s["dstate"]) == (128 // tp, 8 // tp, 64, 128)
    g = gdn_shape("Qwen3-Next-80B-A3B", tp)
    assert (g["H"], g["HV"], g["K"], g["V"]) == (16 // tp, 32 // tp, 128, 128)
    # the conv's channels: the rank's q, k and v (GDN), or its x, B and C (Mamba2)
    assert conv_shape("Qwen3-Next-80B-A3B", tp)["dim"] == 8192 // tp
    assert conv_shape("NemotronH-8B", tp)["dim"] == (8192 + 2 * 8 * 128) // tp


def test_a_single_group_is_on_every_rank():
    """vLLM's ``extra_groups_for_head_shards``: one group is repeated, so every rank keeps B and C whole."""
    assert ssu_shape("Falcon-H1-1.5B", 2) == dict(nheads=24, headdim=64, dstate=256, ngroups=1)
    assert conv_shape("Falcon-H1-1.5B", 2)["dim"] == 24 * 64 + 2 * 256
    assert conv_shape("Falcon-H1-7B")["dim"] == 24 * 128 + 2 * 256


@pytest.mark.parametrize("model,tp", [("Falcon-H1-7B", 16), ("Qwen3-Next-80B-A3B", 32), ("NemotronH-8B", 3),
                                      ("NemotronH-8B", 0)])
def test_a_share_that_does_not_split_is_refused(model, tp):
    with pytest.raises(ValueError, match=f"tp={tp}"):
        (gdn_shape if model in GDN_MODELS else ssu_shape)(model, tp)


def test_every_model_names_a_head_the_kernels_take():
    for name, m in MAMBA_MODELS.items():
        assert m.nheads % m.ngroups == 0 and m.headdim % 16 == 0, name
    for name, m in GDN_MODELS.items():
        assert m.HV % m.H == 0, name


@pytest.mark.cuda
@pytest.mark.parametrize("kernel,model,tp", [("ssu", "Falcon-H1-7B", 1), ("ssu", "Nemotron-Nano-9B-v2", 2),
                                             ("gdn", "Qwen3-Next-80B-A3B", 4), ("conv", "Qwen3-Next-80B-A3B", 8)])
@pytest.mark.parametrize("state", [torch.float32, torch.bfloat16])
def test_a_case_at_a_model_shape_passes_the_gate(kernel, model, tp, state):
    """A case built at ``shape`` has that shape's tensors, and mambalab's kernel agrees there with its own run on a
    second copy (the gate's poisoned outputs and untouched slots); beside vLLM: the device calls' scripts."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    shape = dict(ssu=ssu_shape, gdn=gdn_shape, conv=conv_shape)[kernel](model, tp)
    act = state if kernel == "conv" else torch.bfloat16  # the conv's state in its activations' dtype, as vLLM's
    case = bench_cases.CASES[kernel](5, 8, state, act, False, "cloned", 1, shape=shape)
    pool = case.make_pools(1)[0]
    if kernel == "ssu":
        assert pool.shape[1:] == (shape["nheads"], shape["headdim"], shape["dstate"])
    elif kernel == "gdn":
        assert pool.shape[1:] == (shape["HV"], shape["V"], shape["K"])
    else:
        assert case.x.shape[1] == shape["dim"]
    ok, msg = bench_cases.agreement(case, ["mambalab", "mambalab"])
    assert ok, msg
