// Issue 14, call 236: call 235's "nomath" and "nomath_tok" (one warp, 16 rows, the odd row blocks' state after PDL's
// wait) in the floor's program order: the grid (requests, row blocks, heads), so consecutive CTAs take the same row
// block of different requests, as the slot copy's (requests, blocks) grid does, where the TMA kernel's (row blocks,
// heads, requests) walks one request's state in order. The odd blocks are still the odd row blocks.
//   ep85 "nomath_req":     nomath, requests fastest
//   ep86 "nomath_tok_req": nomath_tok, requests fastest
#include "issue14-call235-gdn-tma-odd-diag.cu"

namespace {

template <bool TOKEN>
__device__ __forceinline__ void gdn_req_order_body(const GdnTmaParams& p) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bar;
    const int n = blockIdx.x, i_v = blockIdx.y, hv = blockIdx.z, lane = threadIdx.x & 31;
    const bool early = (i_v & 1) == 0;
    const int row0 = i_v * DIAG_ROWS, c0 = (lane & 7) * 8;
    const long long slot = p.idx[n];
    const bool live = slot > (long long)p.null_block_id;
    bf16_t* rows = p.state + ((slot * p.HV + hv) * V + row0) * K;
    const u32 b0 = smem_u32(&bar);
    if (live && lane == 0) {
        bar_init(b0);
        if (early) bulk_load(smem_u32(smem), rows, DIAG_ROWS * K * 2, b0);
    }
    __syncwarp();
    grid_launch_dependents();
    grid_wait();
    bf16_t* o_rows = p.out + ((long long)n * p.HV + hv) * V + row0;
    if (!live) {
        if (lane < DIAG_ROWS) o_rows[lane] = 0;
        return;
    }
    if (!early && lane == 0) bulk_load(smem_u32(smem), rows, DIAG_ROWS * K * 2, b0);
    float extra = 0.f;
    if (TOKEN) {
        Token t;
        load_token(p, n, hv, row0, lane, DIAG_ROWS, t);
        extra = t.decay + t.kq + t.v_mine;
#pragma unroll
        for (int j = 0; j < 16; ++j) extra = fmaf(t.q[j], t.k[j], extra);
    }
    bar_wait(b0, 0);
#pragma unroll
    for (int s = 0; s < DIAG_STEPS; ++s) {
        const int r = s * 4 + (lane >> 3);
        const unsigned char* srow = smem + r * K * 2 + c0 * 2;
        unsigned char* dst = reinterpret_cast<unsigned char*>(rows + r * K + c0);
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(srow);
        *reinterpret_cast<uint4*>(dst + 128) = *reinterpret_cast<const uint4*>(srow + 128);
    }
    if (lane < DIAG_ROWS) o_rows[lane] = (bf16_t)(pack_bf16x2(extra, 0.f) & 0xffffu);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(32) gdn_tma_r16_w1_e1_s0_p1_ep85(const __grid_constant__ GdnTmaParams p) {
    gdn_req_order_body<false>(p);
}

extern "C" __global__ void __launch_bounds__(32) gdn_tma_r16_w1_e1_s0_p1_ep86(const __grid_constant__ GdnTmaParams p) {
    gdn_req_order_body<true>(p);
}
