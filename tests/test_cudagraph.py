import pytest

from mambalab.worker.cudagraph_dispatcher import (
    CUDAGraphMode,
    coordinate_batch_across_dp,
    default_capture_sizes,
    dispatch,
    pad_for_cudagraph,
)


def test_default_capture_sizes_match_vllm():
    sizes = default_capture_sizes(max_num_seqs=256)
    assert len(sizes) == 51
    assert sizes[:4] == [1, 2, 4, 8] and sizes[-1] == 512
    assert sizes == [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    assert default_capture_sizes(4) == [1, 2, 4, 8]
    assert default_capture_sizes(4, uniform_decode_query_len=3)[-1] == 24


def test_padding_to_next_size():
    sizes = default_capture_sizes(256)
    assert pad_for_cudagraph(9, sizes) == 16
    assert pad_for_cudagraph(16, sizes) == 16
    assert pad_for_cudagraph(257, sizes) == 272
    assert pad_for_cudagraph(513, sizes) is None


def test_full_uniform_decode_pads_requests():
    d = dispatch(9, 9, uniform_decode=True, capture_sizes=default_capture_sizes(256), max_num_seqs=256)
    assert (d.num_tokens_padded, d.num_reqs_padded, d.cudagraph_mode) == (16, 16, CUDAGraphMode.FULL)
    # spec decode: uniform query length 1 + num_spec
    d = dispatch(6, 3, uniform_decode=True, capture_sizes=[1, 2, 4, 8], max_num_seqs=4, num_spec_tokens=1)
    assert (d.num_tokens_padded, d.num_reqs_padded, d.uniform_decode_query_len) == (8, 4, 2)
    # capped by max_num_seqs
    d = dispatch(3, 3, uniform_decode=True, capture_sizes=[1, 2, 4, 8], max_num_seqs=3)
    assert d.num_reqs_padded == 3 and d.num_tokens_padded == 4


def test_mixed_batch_is_piecewise_and_eager_above_max():
    d = dispatch(7, 2, uniform_decode=False, capture_sizes=[1, 2, 4, 8], max_num_seqs=8)
    assert (d.num_tokens_padded, d.num_reqs_padded, d.cudagraph_mode) == (8, 2, CUDAGraphMode.PIECEWISE)
    d = dispatch(9, 2, uniform_decode=False, capture_sizes=[1, 2, 4, 8], max_num_seqs=8)
    assert d.cudagraph_mode is CUDAGraphMode.NONE and d.num_tokens_padded == 9


def test_dp_ranks_pad_to_the_largest():
    sizes = default_capture_sizes(64)
    assert coordinate_batch_across_dp([3, 0], sizes) == 4
    d = dispatch(1, 1, uniform_decode=True, capture_sizes=sizes, max_num_seqs=64, num_tokens_across_dp=4)
    assert d.num_tokens_padded == 4 and d.num_reqs_padded == 4


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_tokens=-1, num_reqs=0), "num_tokens"),
    (dict(num_tokens=4, num_reqs=9), "max_num_seqs"),
])
def test_dispatch_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dispatch(**kwargs, uniform_decode=True, capture_sizes=[1, 2], max_num_seqs=8)
