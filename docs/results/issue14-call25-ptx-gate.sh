# PTX before (HEAD~2's lib in build/before_lib) and after (the tree's): the SSU and GDN tests compile the kernels;
# .loc/.file lines, debug sections and $L__tmpN: labels (an inlined function's debug scopes) filtered.
set -u
export MAMBALAB_DEVICE=cuda
for side in before after; do
  L=$PWD/lib; [ $side = before ] && L=$PWD/build/before_lib
  export TRITON_CACHE_DIR=/tmp/tc-$side; rm -rf $TRITON_CACHE_DIR
  PYTHONPATH=$L:/tmp/site python3 -m pytest -q -n 8 tests/test_kernel_selective_state_update.py tests/test_kernel_ssu_early_state.py tests/test_kernel_gated_delta_rule.py tests/test_kernel_gdn_stream.py tests/test_kernel_gdn_early_state.py -p no:cacheprovider 2>&1 | tail -1
done
python3 - <<'PY'
import glob, hashlib, re, collections
def ptx(side):
    out = collections.defaultdict(set)
    for f in glob.glob(f"/tmp/tc-{side}/**/*.ptx", recursive=True):
        t = open(f).read()
        t = re.sub(r"\.section\s+\.debug.*", "", t, flags=re.S)
        t = "\n".join(l for l in t.splitlines() if not l.lstrip().startswith((".loc", ".file"))
                      and not re.fullmatch(r"\$L__tmp\d+:", l.strip()))
        name = re.search(r"\.entry\s+(\w+)", t).group(1)
        out[name].add(hashlib.sha1(t.encode()).hexdigest())
    return out
b, a = ptx("before"), ptx("after")
for k in sorted(set(a) | set(b)):
    print(f"PTX {k:32s} before {len(b[k])} variants, after {len(a[k])}: {'same' if b[k] == a[k] else 'DIFFERENT'}")
PY
