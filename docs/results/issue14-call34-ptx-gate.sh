# Issue 14, call 34: PTX before (HEAD's lib, in build/c31/before_lib) and after (the tree's) of the GDN and conv
# kernels, each side compiled by the same unchanged test files into its own Triton cache; .loc/.file lines, debug
# sections and $L__tmpN: labels filtered (as build/ptx_gate2.sh). AFTER=build/c31/after_off_lib: the tree's lib with
# the new rules set back to HEAD's values (EARLY_INDEX {}, SPEC_TOKEN_STAGES_MIN_N 256, DECODE_DEEP {},
# WINDOW_WIDE_PDL1_MIN_BATCH off), so that both sides compile the same launches: the kernels' sources must give the
# same PTX (call 33 ran it with the new rules on the after side: different launches, so no verdict).
set -u
export MAMBALAB_DEVICE=cuda
for side in before after; do
  L=$PWD/${AFTER:-lib}; [ $side = before ] && L=$PWD/build/c31/before_lib
  export TRITON_CACHE_DIR=/tmp/tc34-$side; rm -rf $TRITON_CACHE_DIR
  PYTHONPATH=$L:/tmp/site python3 -m pytest -q -n 8 tests/test_kernel_gated_delta_rule.py tests/test_kernel_gdn_stream.py \
    tests/test_kernel_gdn_spec_stream.py tests/test_kernel_causal_conv1d.py -p no:cacheprovider 2>&1 | tail -1
done
python3 - <<'PY'
import glob, hashlib, re, collections
def ptx(side):
    out = collections.defaultdict(set)
    for f in glob.glob(f"/tmp/tc34-{side}/**/*.ptx", recursive=True):
        t = open(f).read()
        t = re.sub(r"\.section\s+\.debug.*", "", t, flags=re.S)
        t = "\n".join(l for l in t.splitlines() if not l.lstrip().startswith((".loc", ".file"))
                      and not re.fullmatch(r"\$L__tmp\d+:", l.strip()))
        out[re.search(r"\.entry\s+(\w+)", t).group(1)].add(hashlib.sha1(t.encode()).hexdigest())
    return out
b, a = ptx("before"), ptx("after")
for k in sorted(set(a) | set(b)):
    print(f"PTX {k:36s} before {len(b[k])} variants, after {len(a[k])}: {'same' if b[k] == a[k] else 'DIFFERENT'}")
PY
