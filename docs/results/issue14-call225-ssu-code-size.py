"""Issue 14, call 225 (H200): the compiled code of the SSU's one-token launch at batch 1-2, mambalab's and vLLM 0.33's,
for the instruction-fetch stalls of call 224 (ours 2-3.3 times vLLM's, alone, cold caches). Runs each row once per
implementation (the agreement gate's inputs) with Triton's cache in a fresh folder, then copies every cubin Triton
built to $OUT/cubins (named by kernel); the SASS is read beside them with Triton's bundled cuobjdump.

    PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site OUT=$OUT python3 docs/results/issue14-call225-ssu-code-size.py
"""
import os
import shutil
import sys
import tempfile
from pathlib import Path

CACHE = Path(tempfile.mkdtemp(prefix="triton-cache-"))
os.environ["TRITON_CACHE_DIR"] = str(CACHE)
sys.path[:0] = ["lib", "scripts"]
import torch  # noqa: E402

from mambalab.gpu import bench  # noqa: E402
from mambalab.gpu.bench_cases import SSUCase, agreement  # noqa: E402

D = bench.DTYPES
print("device", torch.cuda.get_device_name(), flush=True)
bench._vllm_path()
for state, batch in (("fp32", 1), ("bf16", 1), ("fp32", 2)):
    case = SSUCase(batch, batch, D[state], D["bf16"], False, "cloned", 1)
    ok, msg = agreement(case, ["mambalab", "vllm"])
    print(state, batch, "agree" if ok else f"DISAGREE {msg}", flush=True)
torch.cuda.synchronize()
out = Path(os.environ.get("OUT", ".")) / "cubins"
out.mkdir(parents=True, exist_ok=True)
for cubin in sorted(CACHE.rglob("*.cubin")):
    name = f"{cubin.stem}-{cubin.parent.name[:8]}.cubin"
    shutil.copy(cubin, out / name)
    print(name, cubin.stat().st_size, flush=True)
print("all done", flush=True)
