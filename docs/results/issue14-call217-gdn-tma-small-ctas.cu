// Issue 14, call 217: the TMA kernel in smaller CTAs, toward the copy floor's program shape (call 211: a slot copy on
// 4-warp programs of 4 KiB, 35.40 µs at 64, is the fastest mover of these bytes; the shipped one-warp 32-row CTA
// moves them 2.4-4.1% slower even with nothing to compute). The same body as the shipped entries (rows a CTA, warps,
// the state before PDL's wait, plain stores, one bulk copy a warp); only the shapes are new.
#include "../../lib/mambalab/kernels/cuda/gdn_packed_decode_tma.cu"

GDN_TMA_ENTRY(16, 1, 1, 0, 1)
GDN_TMA_ENTRY(16, 2, 1, 0, 1)
GDN_TMA_ENTRY(16, 4, 1, 0, 1)
GDN_TMA_ENTRY(32, 2, 1, 0, 1)
GDN_TMA_ENTRY(32, 4, 1, 0, 1)
GDN_TMA_ENTRY(32, 8, 1, 0, 1)
