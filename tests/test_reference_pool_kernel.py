"""The reference pool inside a real Jupyter kernel (ipykernel, its event loop and threads up): the worker starts
with the first panel, serves a seed change, and the panel shows what it shows without it."""

import os
import sys
import textwrap

import pytest

from mambalab.device import DEVICE_TYPE

pytestmark = pytest.mark.skipif(DEVICE_TYPE != "cpu", reason="the pool serves the CPU only")

CODE = textwrap.dedent("""
    import time
    from mambalab.widgets import bug_panel, clear_caches
    from mambalab.lab import reference_pool
    from mambalab.lab.reference_pool import POOL
    reference_pool.START_IDLE = False  # xdist keeps the cores busy: an idle-class start-up would wait for one
    p = bug_panel("move-row-stale-source", auto_verdict=False)
    for _ in range(4):
        p.step_button.click()
    deadline = time.monotonic() + 90
    while not POOL.usable() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert POOL.usable(), POOL.broken
    served = POOL.served
    p.set(seed=1)
    with_pool = (p.verdict_text, dict(p.session.expected), POOL.served - served)
    p.replay_button.click()
    final_with = p.verdict_text
    clear_caches()
    POOL.usable = lambda: False
    q = bug_panel("move-row-stale-source", auto_verdict=False)
    for _ in range(4):
        q.step_button.click()
    q.set(seed=1)
    without = (q.verdict_text, dict(q.session.expected))
    q.replay_button.click()
    print("RESULT", with_pool[2] >= 4, with_pool[:2] == without, final_with == q.verdict_text, POOL.proc.pid)
""")


def test_the_pool_in_a_jupyter_kernel():
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, MAMBALAB_REFERENCE_POOL="1",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p.endswith("lib")) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    km, kc = start_new_kernel(kernel_name="python3", env=env)
    try:
        out = []

        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(msg["content"]["traceback"]))

        reply = kc.execute_interactive(CODE, timeout=300, output_hook=hook)
        text = "".join(out)
        assert reply["content"]["status"] == "ok", text
        line = next(x for x in text.splitlines() if x.startswith("RESULT"))
        served, same, same_final, pid = line.split()[1:]
        assert (served, same, same_final) == ("True", "True", "True"), text
    finally:
        km.shutdown_kernel(now=True)
    # the worker exits with the kernel (its input closed)
    import time

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and os.path.exists(f"/proc/{pid}"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":
                    break
        except FileNotFoundError:
            break
        time.sleep(0.2)
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
