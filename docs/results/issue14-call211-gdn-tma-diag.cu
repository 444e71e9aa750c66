// Issue 14, call 211: where the GDN bf16 decode's last points at 32-128 go. Diagnostic kernels in the TMA kernel's
// one-warp 32-row shape (the same grid, bulk copy before PDL's wait, plain stores), each doing less than the decode:
//   ep91 "nomath":     the state in by one bulk copy, back unchanged by the decode's own stores; zero outputs
//   ep92 "nomath_tok": as nomath, with the token's loads (q, k, v, gates: load_token) after the wait
//   ep93 "notoken":    the whole update, on a token made of constants (no loads but the index and the state)
//   ep94 "minb24":     the shipped kernel (r32w1) itself with __launch_bounds__(32, 24): ptxas holds it to the
//                      registers of 24 resident CTAs an SM (the shared-memory limit), where its 92 allow 21
// Their results are wrong on purpose (the agreement gate fails for them); only their time is read.
#include "../../lib/mambalab/kernels/cuda/gdn_packed_decode_tma.cu"

namespace {

template <int MODE>
__device__ __forceinline__ void gdn_diag_body(const GdnTmaParams& p) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bar;
    const int i_v = blockIdx.x, hv = blockIdx.y, n = blockIdx.z, lane = threadIdx.x & 31;
    const int row0 = i_v * 32;
    const long long slot = p.idx[n];
    const bool live = slot > (long long)p.null_block_id;
    bf16_t* rows = p.state + ((slot * p.HV + hv) * V + row0) * K;
    const u32 b0 = smem_u32(&bar);
    if (live && lane == 0) {
        bar_init(b0);
        bulk_load(smem_u32(smem), rows, 32 * K * 2, b0);
    }
    __syncwarp();
    grid_launch_dependents();
    grid_wait();
    bf16_t* o_rows = p.out + ((long long)n * p.HV + hv) * V + row0;
    if (!live) {
        o_rows[lane] = 0;
        return;
    }
    if (MODE == 3) {
        Token t;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            t.q[j] = 0.01f * (j + 1 + (lane & 7));
            t.k[j] = 0.02f * (16 - j);
        }
        t.kq = 0.1f; t.decay = 0.9f; t.beta = 0.5f; t.v_mine = 0.01f * lane;
        update_rows<8, 1, false>(t, smem, rows, o_rows, b0, 0, lane);
        return;
    }
    float extra = 0.f;
    if (MODE == 2) {
        Token t;
        load_token(p, n, hv, row0, lane, 32, t);
        extra = t.decay + t.kq + t.v_mine;
#pragma unroll
        for (int j = 0; j < 16; ++j) extra = fmaf(t.q[j], t.k[j], extra);
    }
    bar_wait(b0, 0);
    const int c0 = (lane & 7) * 8;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        const int r = s * 4 + (lane >> 3);
        const unsigned char* srow = smem + r * K * 2 + c0 * 2;
        unsigned char* dst = reinterpret_cast<unsigned char*>(rows + r * K + c0);
        *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(srow);
        *reinterpret_cast<uint4*>(dst + 128) = *reinterpret_cast<const uint4*>(srow + 128);
    }
    o_rows[lane] = (bf16_t)(pack_bf16x2(extra, 0.f) & 0xffffu);
}

}  // namespace

#define GDN_DIAG_ENTRY(MODE)                                                                        \
    extern "C" __global__ void __launch_bounds__(32)                                                \
        gdn_tma_r32_w1_e1_s0_p1_ep9##MODE(const __grid_constant__ GdnTmaParams p) {                 \
        gdn_diag_body<MODE>(p);                                                                     \
    }

GDN_DIAG_ENTRY(1)
GDN_DIAG_ENTRY(2)
GDN_DIAG_ENTRY(3)

extern "C" __global__ void __launch_bounds__(32, 24)
    gdn_tma_r32_w1_e1_s0_p1_ep94(const __grid_constant__ GdnTmaParams p) {
    gdn_tma_body<32, 1, true, false, 1>(p);
}
