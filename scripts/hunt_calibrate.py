"""CPU seconds for the same 8 hunter workloads (fixes on): compares this machine with another."""
import random, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "lib"))
from mambalab.lab.bugs import BugConfig
from mambalab.lab.hunt_generator import random_hunt_workload, workload_seed
from mambalab.lab.hunt_run import run
run(random_hunt_workload(random.Random(workload_seed(0, 0))), BugConfig())  # warm-up (JIT of the interpreter)
c0, t0 = time.process_time(), time.perf_counter()
for i in range(8):
    v, _ = run(random_hunt_workload(random.Random(workload_seed(0, i))), BugConfig())
    assert v.ok, v.summary()
print(f"calibration: 8 workloads in {time.process_time() - c0:.1f} s CPU, {time.perf_counter() - t0:.1f} s wall")
