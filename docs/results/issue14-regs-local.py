"""Local sm_90 compile (no GPU) of a mambalab kernel launch: registers, spills, shared memory.
Usage in a script: from regs import capture, compile_captured."""
import os, sys
import torch
torch.cuda.is_available = lambda: True  # so mambalab picks the compiled (non-interpreted) path
os.environ.pop("TRITON_INTERPRET", None)
os.environ["MAMBALAB_DEVICE"] = ""
sys.path.insert(0, "/work/main/lib")
import triton
from triton.compiler.compiler import ASTSource
from triton.backends.compiler import GPUTarget
import mambalab.device as md
from mambalab.lab import sanitizer

_CAP = []
def _fake_launch(kernel, grid, *args, num_warps=4, num_stages=1, name=None, row_axis=None, **kw):
    _CAP.append((kernel, grid, args, kw, num_warps, num_stages))
sanitizer.launch = _fake_launch

DT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16", torch.int32: "i32",
      torch.int64: "i64", torch.bool: "i1", torch.uint8: "u8"}

def compile_captured(cap, overrides=None, extra_opts=None):
    kernel, grid, args, kw, nw, ns = cap
    kw = dict(kw); kw.update(overrides or {})
    nw = kw.pop("num_warps", nw); ns = kw.pop("num_stages", ns)
    opts = {k: kw.pop(k) for k in list(kw) if k in ("maxnreg", "launch_pdl", "launch_cooperative_grid")}
    fn = kernel
    names = fn.arg_names
    vals = dict(zip(names, args)); vals.update(kw)
    sig, const, attrs = {}, {}, {}
    for i, n in enumerate(names):
        v = vals[n] if n in vals else fn.params[i].default
        p = fn.params[i]
        if p.is_constexpr:
            sig[n] = "constexpr"; const[n] = v
        elif isinstance(v, torch.Tensor):
            sig[n] = "*" + DT[v.dtype]; attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, bool):
            sig[n] = "i1"
        elif isinstance(v, int):
            if v == 1 and not p.do_not_specialize:
                sig[n] = "constexpr"; const[n] = 1
            else:
                sig[n] = "i64" if abs(v) >= 2**31 else "i32"
                if v % 16 == 0 and not p.do_not_specialize:
                    attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(v, float):
            sig[n] = "fp32"
        elif v is None:
            sig[n] = "constexpr"; const[n] = None
        else:
            raise TypeError(n, type(v))
    src = ASTSource(fn, sig, const, attrs)
    o = dict(num_warps=nw, num_stages=ns); o.update(opts); o.update(extra_opts or {})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=o)
    md_ = k.metadata
    import subprocess, tempfile
    f = tempfile.NamedTemporaryFile(suffix=".cubin", delete=False); f.write(k.asm["cubin"]); f.close()
    cuobj = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
    out = subprocess.run([cuobj, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    import re as _re
    m = _re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", out)
    return dict(regs=int(m.group(1)), spills=int(m.group(4)), stack=int(m.group(2)),
                shared=md_.shared, asm=k.asm)

def capture(fn, *a, **k):
    _CAP.clear(); fn(*a, **k); return list(_CAP)
