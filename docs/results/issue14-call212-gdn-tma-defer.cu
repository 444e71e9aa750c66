// Issue 14, call 212: the TMA kernel's one-warp 32-row shape with some CTAs' state read after PDL's wait instead of
// before it. Call 211 found the token's loads after the wait cost the bench about 1 µs at 32-128: at the wait every
// resident CTA already holds its state and waits on its token, so no state bytes move until the tokens come. Here
// some CTAs keep their bulk copy until after the wait, so DRAM has their bytes to move meanwhile:
//   ep95: the row block i_v == 3 of every head (a quarter of the CTAs)
//   ep96: the row blocks i_v >= 2 (half)
//   ep97: i_v == 3 of the odd heads (an eighth)
// Otherwise the shipped r32w1 (gdn_tma_r32_w1_e1_s0_p1), whose results these give (the agreement gate holds).
#include "../../lib/mambalab/kernels/cuda/gdn_packed_decode_tma.cu"

namespace {

template <int SEL>
__device__ __forceinline__ bool deferred(int i_v, int hv) {
    return SEL == 1 ? i_v == 3 : SEL == 2 ? i_v >= 2 : (i_v == 3 && (hv & 1));
}

template <int SEL>
__device__ __forceinline__ void gdn_defer_body(const GdnTmaParams& p) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bar;
    const int i_v = blockIdx.x, hv = blockIdx.y, n = blockIdx.z, lane = threadIdx.x & 31;
    const int row0 = i_v * 32;
    const long long slot = p.idx[n];
    const bool live = slot > (long long)p.null_block_id;
    const bool late = deferred<SEL>(i_v, hv);
    bf16_t* rows = p.state + ((slot * p.HV + hv) * V + row0) * K;
    const u32 b0 = smem_u32(&bar);
    if (live && lane == 0) {
        bar_init(b0);
        if (!late) bulk_load(smem_u32(smem), rows, 32 * K * 2, b0);
    }
    __syncwarp();
    grid_launch_dependents();
    grid_wait();
    bf16_t* o_rows = p.out + ((long long)n * p.HV + hv) * V + row0;
    if (!live) {
        o_rows[lane] = 0;
        return;
    }
    if (late && lane == 0) bulk_load(smem_u32(smem), rows, 32 * K * 2, b0);
    Token t;
    load_token(p, n, hv, row0, lane, 32, t);
    update_rows<8, 1, false>(t, smem, rows, o_rows, b0, 0, lane);
}

}  // namespace

#define GDN_DEFER_ENTRY(SEL, NAME)                                                                  \
    extern "C" __global__ void __launch_bounds__(32)                                                \
        gdn_tma_r32_w1_e1_s0_p1_ep##NAME(const __grid_constant__ GdnTmaParams p) {                  \
        gdn_defer_body<SEL>(p);                                                                     \
    }

GDN_DEFER_ENTRY(1, 95)
GDN_DEFER_ENTRY(2, 96)
GDN_DEFER_ENTRY(3, 97)
