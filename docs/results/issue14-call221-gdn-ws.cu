// Issue 14, call 221: call 220's kernel with more consumer warps (call 220: from 32 requests its 4-8 consumers an SM
// were behind the Triton kernel after a torch kernel, 1-8%; the question: are the items' chains of latencies on too
// few warps the cause?): the GDN packed decode as a warp-specialised persistent kernel, the one lever the plan left
// for the bf16 state at 32-64 requests on the H200 (call 211: after PDL's wait every resident CTA holds its staged
// state and waits on its token, about 1 µs a launch with no state moving). A CTA a slice of the items (32 value rows
// of one request and head, 8 KiB), contiguous; its last warp is a producer whose lane 0 keeps a ring of STAGES 8 KiB
// buffers filled by bulk copies (full / empty mbarriers), the first STAGES - DEFER before the wait (the early state
// load's promise), the rest as the consumers free buffers. CONS consumer warps take the items in turn; each loads
// the next item's token (raw bytes only) before it works on the current one, so after the first item a token's round
// trip overlaps the state's. The update is the shipped kernel's (update_rows, plain stores).
#include "issue14-call220-gdn-ws.cu"

// 8 consumers on 24 buffers (call 220's best) comes with the include.
GDN_WS_ENTRY(16, 16, 0)
GDN_WS_ENTRY(16, 16, 4)
GDN_WS_ENTRY(12, 24, 0)
GDN_WS_ENTRY(24, 24, 0)
GDN_WS_ENTRY(24, 24, 6)
GDN_WS_ENTRY(20, 20, 0)
