set -o pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl .whl/ipy/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/lib:$PWD/.vllm:/tmp/site MAMBALAB_DEVICE=cuda
timeout 100 python3 -m pytest -q -p no:randomly tests/test_copy_floor.py 2>&1 | tail -2 | tee $OUT/tests.txt
OUT=$OUT timeout 470 python3 docs/results/issue14-call228-token-floor.py 2>&1 | grep -v WARNING | tee $OUT/token-floor.txt
