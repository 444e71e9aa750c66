// The GDN (gated delta net) packed decode step with the state staged through shared memory by the bulk-copy
// engine (TMA's one-dimensional form), beside mambalab's Triton one, sm_90 and newer: the H200's bf16 decode from 4
// to 16 requests (mambalab.kernels.gated_delta_rule_tma.RULES, measured there), and a kernel to study.
//
// The same step as vLLM 0.33's fused_recurrent_gated_delta_rule_packed_decode
// (vllm/third_party/flash_linear_attention/ops/fused_recurrent.py) and mambalab.kernels.gated_delta_rule_packed:
// one token a request, q | k | v read from the conv's packed output, the gates computed from the raw projections
// (g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b)), q and k L2-normalised, the state [slots, HV, V, K]
// updated in place in bf16, the output [N, HV, V] in bf16. A request whose slot is the null block or below it
// writes zero outputs and moves no state (the fixed guard of vLLM #39064).
//
// Layout of the work: a CTA owns ROWS value rows of one (request, head); each of its WARPS warps owns
// ROWS / WARPS of them. Lane 0 of a warp issues one bulk copy of its rows into shared memory (an mbarrier counts
// the bytes), with EARLY before PDL's griddepcontrol.wait, so the state is in flight while the previous kernel
// finishes (the caller's promise that the previous kernel writes neither the state nor the indices, as the Triton
// kernel's early_state_load); with PIECES > 1 a warp's rows come in that many copies, each with its own mbarrier,
// so the first rows are worked on while the rest arrive. Eight lanes share a row, sixteen columns each: a row's
// two dot products (h.k, h.q) take three shuffle levels, four rows a step. The update is h' = decay h + vn k with
// vn = beta (v - decay h.k) and o = decay h.q + vn (k.q) (both dots read the row as loaded). The new rows go back
// with plain stores, or with TMA_STORE through shared memory and one bulk store a warp.
//
// No CUDA headers: the kernel builds with nvcc alone (mambalab.kernels.cuda_driver compiles it to a cubin); the PTX
// pieces it shares with the SSU's kernel are in tma_ptx.cuh.

#include "tma_ptx.cuh"

struct GdnTmaParams {
    const bf16_t* mixed;     // [N, 2 H K + HV V], row stride s_mixed (elements), unit stride along the row
    const bf16_t* a;         // [N, HV], row stride s_a
    const bf16_t* b;         // [N, HV], row stride s_b
    const float* A_log;      // [HV]
    const float* dt_bias;    // [HV]
    bf16_t* state;           // [slots, HV, V, K], contiguous
    bf16_t* out;             // [N, HV, V], contiguous
    const int* idx;          // [N]
    long long s_mixed, s_a, s_b;
    int H, HV;
    int null_block_id;
    int use_l2norm;
    float scale, softplus_beta, softplus_threshold;
};

namespace {

constexpr int K = 128;
constexpr int V = 128;

__device__ __forceinline__ void bar_arrive(u32 bar) {  // a phase completed with no bytes (a skipped item)
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void bulk_store(void* dst, u32 src, u32 bytes) {  // after every lane's fence
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

__device__ __forceinline__ void unpack16(const uint4& lo, const uint4& hi, float* f) {
    const u32 w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        f[2 * i] = bf_lo(w[i]);
        f[2 * i + 1] = bf_hi(w[i]);
    }
}

struct Token {  // one (request, head)'s inputs as a lane holds them
    float q[16], k[16];  // normalised and scaled q, normalised k: this lane's columns c0..c0+7, c0+64..c0+71
    float kq, decay, beta, v_mine;  // k.q, the gates, the v of the lane's row (lane < rows)
};

// q, k (this lane's columns), the gates and v of rows row0 + lane, for request n and value head hv.
__device__ __forceinline__ void load_token(const GdnTmaParams& p, int n, int hv, int row0, int lane, int rows,
                                           Token& t) {
    // A lane's sixteen columns are two runs of eight: c0 in the row's first half, c0 + 64 in its second. So the
    // eight lanes of a row read (and store) 128 contiguous bytes an instruction: whole sectors in global memory,
    // all 32 banks once per row in shared memory (four rows a step: four wavefronts, no conflict).
    const int c0 = (lane & 7) * 8;
    const bf16_t* x = p.mixed + n * p.s_mixed;
    const int h = hv / (p.HV / p.H);
    const bf16_t* pq = x + h * K + c0;
    const bf16_t* pk = x + p.H * K + h * K + c0;
    unpack16(*reinterpret_cast<const uint4*>(pq), *reinterpret_cast<const uint4*>(pq + 64), t.q);
    unpack16(*reinterpret_cast<const uint4*>(pk), *reinterpret_cast<const uint4*>(pk + 64), t.k);
    t.v_mine = lane < rows ? bf1(x[2 * p.H * K + hv * V + row0 + lane]) : 0.f;
    const float a = bf1(p.a[n * p.s_a + hv]), bb = bf1(p.b[n * p.s_b + hv]);
    const float xg = a + p.dt_bias[hv];
    const float bx = p.softplus_beta * xg;
    const float soft = bx <= p.softplus_threshold
        ? logf(1.f + expf(fminf(bx, p.softplus_threshold))) / p.softplus_beta : xg;
    t.decay = expf(-expf(p.A_log[hv]) * soft);
    t.beta = 1.f / (1.f + expf(-bb));
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

// A warp's STEPS * 4 rows of one state: staged at `chunk` (PIECES bulk copies, barriers from bar0, phase
// `parity`), updated, stored to `rows` (or back into `chunk` for a bulk store), outputs to o_rows.
template <int STEPS, int PIECES, bool TMA_STORE>
__device__ __forceinline__ void update_rows(const Token& t, unsigned char* chunk, bf16_t* rows, bf16_t* o_rows,
                                            u32 bar0, u32 parity, int lane) {
    static_assert(STEPS % PIECES == 0, "a piece is whole steps");
    const int c0 = (lane & 7) * 8;
    float o_mine = 0.f;
#pragma unroll
    for (int s = 0; s < STEPS; ++s) {
        if (s % (STEPS / PIECES) == 0) bar_wait(bar0 + 8 * (s / (STEPS / PIECES)), parity);
        const int r = s * 4 + (lane >> 3);         // the warp's row this lane works on
        unsigned char* srow = chunk + r * K * 2 + c0 * 2;
        const uint4 w0 = *reinterpret_cast<const uint4*>(srow);
        const uint4 w1 = *reinterpret_cast<const uint4*>(srow + 128);
        float hrow[16];
        unpack16(w0, w1, hrow);
        float hk = 0.f, hq = 0.f;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
            hk = fmaf(hrow[j], t.k[j], hk);
            hq = fmaf(hrow[j], t.q[j], hq);
        }
        hk = sum8(hk);
        hq = sum8(hq);
        const float vr = __shfl_sync(0xffffffffu, t.v_mine, r);
        const float vn = (vr - t.decay * hk) * t.beta;
        const float o = t.decay * hq + vn * t.kq;
        const float o_src = __shfl_sync(0xffffffffu, o, (lane & 3) * 8);  // lane L keeps row L's output
        if ((lane >> 2) == s) o_mine = o_src;
        u32 nw[8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
            nw[i] = pack_bf16x2(fmaf(hrow[2 * i], t.decay, vn * t.k[2 * i]),
                                fmaf(hrow[2 * i + 1], t.decay, vn * t.k[2 * i + 1]));
        const uint4 n0 = make_uint4(nw[0], nw[1], nw[2], nw[3]);
        const uint4 n1 = make_uint4(nw[4], nw[5], nw[6], nw[7]);
        unsigned char* dst = TMA_STORE ? srow : reinterpret_cast<unsigned char*>(rows + r * K + c0);
        *reinterpret_cast<uint4*>(dst) = n0;
        *reinterpret_cast<uint4*>(dst + 128) = n1;
    }
    if (lane < STEPS * 4) o_rows[lane] = (bf16_t)(pack_bf16x2(o_mine, 0.f) & 0xffffu);
    if (TMA_STORE) {  // the generic proxy's writes made visible to the bulk copy, then one store a warp
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) bulk_store(rows, smem_u32(chunk), STEPS * 4 * K * 2);
    }
}

template <int ROWS, int WARPS, bool EARLY, bool TMA_STORE, int PIECES, int EP = PIECES>
__device__ __forceinline__ void gdn_tma_body(const GdnTmaParams& p) {  // EARLY: the first EP pieces before the wait
    constexpr int ROWS_W = ROWS / WARPS;           // rows a warp
    constexpr u32 PIECE = ROWS_W * K * 2 / PIECES; // bytes a bulk copy (a warp's rows in PIECES copies)
    static_assert(ROWS_W % 4 == 0 && ROWS_W <= 32, "a warp takes 4 rows a step, at most 32 rows");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[WARPS * PIECES];

    const int i_v = blockIdx.x, hv = blockIdx.y, n = blockIdx.z;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row0 = i_v * ROWS + warp * ROWS_W;   // the warp's first value row
    const long long slot = p.idx[n];
    const bool live = slot > (long long)p.null_block_id;
    bf16_t* rows = p.state + ((slot * p.HV + hv) * V + row0) * K;
    unsigned char* chunk = smem + warp * ROWS_W * K * 2;
    const u32 bar0 = smem_u32(&bars[warp * PIECES]);

    if (live && lane == 0) issue_early<PIECES, EARLY, EP>(bar0, chunk, rows, PIECE);
    __syncwarp();  // the barriers initialised before any lane waits on them
    grid_launch_dependents();
    grid_wait();
    bf16_t* o_rows = p.out + ((long long)n * p.HV + hv) * V + row0;
    if (!live) {  // the null block (padding) or below: zero outputs, no state traffic
        if (lane < ROWS_W) o_rows[lane] = 0;
        return;
    }
    if (lane == 0) issue_rest<PIECES, EARLY, EP>(bar0, chunk, rows, PIECE);
    Token t;
    load_token(p, n, hv, row0, lane, ROWS_W, t);
    update_rows<ROWS_W / 4, PIECES, TMA_STORE>(t, chunk, rows, o_rows, bar0, 0, lane);
}

// Persistent: a one-warp CTA walks items (request, head, 32-row block) it, it + gridDim.x, ...; its STAGES
// shared-memory buffers form a ring, so the state of the next STAGES - 1 items is in flight while one is worked on
// (the first STAGES before PDL's wait). A skipped item's buffer completes its phase by a plain arrive.
template <int STAGES>
__device__ __forceinline__ void gdn_tma_persist_body(const GdnTmaParams& p, int num_items) {
    constexpr u32 CHUNK = 32 * K * 2;
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) u64 bars[STAGES];
    const int lane = threadIdx.x & 31;
    const int blocks = V / 32;
    auto issue = [&](int it, int st) {  // lane 0: item it's rows into buffer st
        const int n = it / (blocks * p.HV), hv = (it / blocks) % p.HV, i_v = it % blocks;
        const long long slot = p.idx[n];
        const u32 bar = smem_u32(&bars[st]);
        if (slot > (long long)p.null_block_id)
            bulk_load(smem_u32(smem + st * CHUNK), p.state + ((slot * p.HV + hv) * V + i_v * 32) * K, CHUNK, bar);
        else
            bar_arrive(bar);
    };
    if (lane == 0) {
        for (int st = 0; st < STAGES; ++st) bar_init(smem_u32(&bars[st]));
        for (int st = 0; st < STAGES; ++st) {
            const int it = blockIdx.x + st * gridDim.x;
            if (it < num_items) issue(it, st);
        }
    }
    __syncwarp();
    grid_launch_dependents();
    grid_wait();
    for (int j = 0;; ++j) {
        const int it = blockIdx.x + j * gridDim.x;
        if (it >= num_items) break;
        const int st = j % STAGES;
        const u32 parity = (j / STAGES) & 1;
        const int n = it / (blocks * p.HV), hv = (it / blocks) % p.HV, i_v = it % blocks;
        const long long slot = p.idx[n];
        bf16_t* o_rows = p.out + ((long long)n * p.HV + hv) * V + i_v * 32;
        if (slot > (long long)p.null_block_id) {
            Token t;
            load_token(p, n, hv, i_v * 32, lane, 32, t);
            update_rows<8, 1, false>(t, smem + st * CHUNK, p.state + ((slot * p.HV + hv) * V + i_v * 32) * K,
                                     o_rows, smem_u32(&bars[st]), parity, lane);
        } else {
            bar_wait(smem_u32(&bars[st]), parity);
            o_rows[lane] = 0;
        }
        // the buffer's reads done (every lane) before the bulk copy refills it
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        const int next = it + STAGES * gridDim.x;
        if (lane == 0 && next < num_items) issue(next, st);
    }
}

}  // namespace

// One entry point a launch shape: rows a CTA, warps, early state load, bulk store, bulk copies a warp.
#define GDN_TMA_ENTRY(R, W, E, S, P)                                                                \
    extern "C" __global__ void __launch_bounds__(W * 32)                                            \
        gdn_tma_r##R##_w##W##_e##E##_s##S##_p##P(const __grid_constant__ GdnTmaParams p) {          \
        gdn_tma_body<R, W, E, S, P>(p);                                                             \
    }

GDN_TMA_ENTRY(32, 1, 1, 0, 1)
GDN_TMA_ENTRY(32, 1, 1, 1, 1)
GDN_TMA_ENTRY(32, 1, 1, 1, 8)
GDN_TMA_ENTRY(32, 1, 1, 0, 8)
GDN_TMA_ENTRY(64, 2, 1, 1, 1)
GDN_TMA_ENTRY(64, 2, 1, 1, 4)
GDN_TMA_ENTRY(128, 4, 1, 1, 1)
GDN_TMA_ENTRY(128, 8, 1, 1, 1)
GDN_TMA_ENTRY(128, 8, 1, 0, 1)
GDN_TMA_ENTRY(128, 4, 0, 1, 1)

// Only the first EP of a warp's P copies read before the wait, the rest after it.
#define GDN_TMA_ENTRY_EP(R, W, S, P, EP)                                                            \
    extern "C" __global__ void __launch_bounds__(W * 32)                                            \
        gdn_tma_r##R##_w##W##_e1_s##S##_p##P##_ep##EP(const __grid_constant__ GdnTmaParams p) {     \
        gdn_tma_body<R, W, true, S, P, EP>(p);                                                      \
    }

GDN_TMA_ENTRY_EP(32, 1, 0, 2, 1)
GDN_TMA_ENTRY_EP(32, 1, 0, 4, 2)

#define GDN_TMA_PERSIST_ENTRY(S)                                                                    \
    extern "C" __global__ void __launch_bounds__(32)                                                \
        gdn_tma_persist_s##S(const __grid_constant__ GdnTmaParams p, int num_items) {               \
        gdn_tma_persist_body<S>(p, num_items);                                                      \
    }

GDN_TMA_PERSIST_ENTRY(2)
GDN_TMA_PERSIST_ENTRY(3)
