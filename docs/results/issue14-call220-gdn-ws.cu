// Issue 14, call 220 (call 219's kernel; the shapes whose buffers pass between consumers now refused): the GDN
// packed decode as a warp-specialised persistent kernel, the one lever the plan left for the bf16 state at 32-64
// requests on the H200 (call 211: after PDL's wait every resident CTA holds its staged state and waits on its token,
// about 1 µs a launch with no state moving). A CTA a slice of the items (32 value rows of one request and head, 8
// KiB), contiguous; its last warp is a producer whose lane 0 keeps a ring of STAGES 8 KiB buffers filled by bulk
// copies (full / empty mbarriers), the first STAGES - DEFER before the wait (the early state load's promise), the
// rest as the consumers free buffers. CONS consumer warps take the items in turn; each loads the next item's token
// (raw bytes only) before it works on the current one, so after the first item a token's round trip overlaps the
// state's. The update is the shipped kernel's (update_rows, plain stores).
#include "../../lib/mambalab/kernels/cuda/gdn_packed_decode_tma.cu"

namespace {

struct TokenRaw {  // a token's bytes as loaded, before any arithmetic
    uint4 q0, q1, k0, k1;
    bf16_t v, a, b;
    float A_log, dt_bias;
};

__device__ __forceinline__ void ws_load_raw(const GdnTmaParams& p, int n, int hv, int row0, int lane, TokenRaw& r) {
    const int c0 = (lane & 7) * 8;
    const bf16_t* x = p.mixed + n * p.s_mixed;
    const int h = hv / (p.HV / p.H);
    const bf16_t* pq = x + h * K + c0;
    const bf16_t* pk = x + p.H * K + h * K + c0;
    r.q0 = *reinterpret_cast<const uint4*>(pq);
    r.q1 = *reinterpret_cast<const uint4*>(pq + 64);
    r.k0 = *reinterpret_cast<const uint4*>(pk);
    r.k1 = *reinterpret_cast<const uint4*>(pk + 64);
    r.v = x[2 * p.H * K + hv * V + row0 + lane];
    r.a = p.a[n * p.s_a + hv];
    r.b = p.b[n * p.s_b + hv];
    r.A_log = p.A_log[hv];
    r.dt_bias = p.dt_bias[hv];
}

__device__ __forceinline__ void ws_finish(const GdnTmaParams& p, const TokenRaw& r, Token& t) {
    unpack16(r.q0, r.q1, t.q);
    unpack16(r.k0, r.k1, t.k);
    t.v_mine = bf1(r.v);
    const float xg = bf1(r.a) + r.dt_bias;
    const float bx = p.softplus_beta * xg;
    const float soft = bx <= p.softplus_threshold
        ? logf(1.f + expf(fminf(bx, p.softplus_threshold))) / p.softplus_beta : xg;
    t.decay = expf(-expf(r.A_log) * soft);
    t.beta = 1.f / (1.f + expf(-bf1(r.b)));
    float qq = 0.f, kk = 0.f, kq = 0.f;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        qq = fmaf(t.q[j], t.q[j], qq);
        kk = fmaf(t.k[j], t.k[j], kk);
        kq = fmaf(t.k[j], t.q[j], kq);
    }
    qq = sum8(qq); kk = sum8(kk); kq = sum8(kq);
    float rq = p.scale, rk = 1.f;
    if (p.use_l2norm) {
        rq = p.scale / sqrtf(qq + 1e-6f);
        rk = 1.f / sqrtf(kk + 1e-6f);
    }
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        t.q[j] *= rq;
        t.k[j] *= rk;
    }
    t.kq = kq * rq * rk;
}

__device__ __forceinline__ void bar_init_n(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

template <int CONS, int STAGES, int DEFER>
__device__ __forceinline__ void gdn_ws_body(const GdnTmaParams& p, int num_items) {
    // A buffer is always one consumer's (item j in buffer j % STAGES, taken by warp j % CONS): its full barrier's
    // parity then names one round. Call 219's first run had two shapes without this (4 / 6, 8 / 12): wrong
    // results at 257 requests and a hang in the bench.
    static_assert(STAGES % CONS == 0, "a buffer is one consumer's");
    constexpr u32 CHUNK = 32 * K * 2;
    constexpr int BLOCKS = V / 32;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 full[STAGES];
    __shared__ __align__(8) u64 empty[STAGES];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int first = (int)(((long long)blockIdx.x * num_items) / gridDim.x);
    const int count = (int)(((long long)(blockIdx.x + 1) * num_items) / gridDim.x) - first;
    if (threadIdx.x == 0) {
        for (int st = 0; st < STAGES; ++st) {
            bar_init_n(smem_u32(&full[st]), 1);
            bar_init_n(smem_u32(&empty[st]), 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    grid_launch_dependents();
    if (warp == CONS) {  // the producer
        if (lane == 0) {
            for (int j = 0; j < count; ++j) {
                const int st = j % STAGES, round = j / STAGES;
                if (DEFER > 0 && j == STAGES - DEFER) grid_wait();
                if (round > 0) bar_wait(smem_u32(&empty[st]), (round - 1) & 1);
                const int it = first + j;
                const int n = it / (BLOCKS * p.HV), hv = (it / BLOCKS) % p.HV, i_v = it % BLOCKS;
                const long long slot = p.idx[n];
                const u32 bar = smem_u32(&full[st]);
                if (slot > (long long)p.null_block_id)
                    bulk_load(smem_u32(smem + st * CHUNK), p.state + ((slot * p.HV + hv) * V + i_v * 32) * K,
                              CHUNK, bar);
                else
                    bar_arrive(bar);
            }
        }
        return;
    }
    grid_wait();
    TokenRaw raw;
    if (warp < count) {
        const int it = first + warp;
        ws_load_raw(p, it / (BLOCKS * p.HV), (it / BLOCKS) % p.HV, (it % BLOCKS) * 32, lane, raw);
    }
    for (int j = warp; j < count; j += CONS) {
        const int it = first + j;
        const int n = it / (BLOCKS * p.HV), hv = (it / BLOCKS) % p.HV, i_v = it % BLOCKS;
        Token t;
        ws_finish(p, raw, t);
        const int jn = j + CONS;
        if (jn < count) {  // the next item's token in flight while this one is worked on
            const int itn = first + jn;
            ws_load_raw(p, itn / (BLOCKS * p.HV), (itn / BLOCKS) % p.HV, (itn % BLOCKS) * 32, lane, raw);
        }
        const int st = j % STAGES;
        const u32 parity = (j / STAGES) & 1;
        const long long slot = p.idx[n];
        bf16_t* o_rows = p.out + ((long long)n * p.HV + hv) * V + i_v * 32;
        if (slot > (long long)p.null_block_id) {
            update_rows<8, 1, false>(t, smem + st * CHUNK, p.state + ((slot * p.HV + hv) * V + i_v * 32) * K,
                                     o_rows, smem_u32(&full[st]), parity, lane);
        } else {
            bar_wait(smem_u32(&full[st]), parity);
            o_rows[lane] = 0;
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) bar_arrive(smem_u32(&empty[st]));
    }
}

}  // namespace

#define GDN_WS_ENTRY(C, S, D)                                                                       \
    extern "C" __global__ void __launch_bounds__((C + 1) * 32)                                      \
        gdn_ws_c##C##_s##S##_d##D(const __grid_constant__ GdnTmaParams p, int num_items) {          \
        gdn_ws_body<C, S, D>(p, num_items);                                                         \
    }

GDN_WS_ENTRY(4, 8, 0)
GDN_WS_ENTRY(4, 12, 0)
GDN_WS_ENTRY(4, 12, 3)
GDN_WS_ENTRY(8, 24, 0)
GDN_WS_ENTRY(8, 24, 6)
GDN_WS_ENTRY(6, 24, 0)
GDN_WS_ENTRY(2, 6, 0)
