"""The stable command-line interface: exit codes 0 / 1 / 2, --json, --fixed."""

import json
import subprocess
import sys

import pytest


def cli(*args):
    return subprocess.run([sys.executable, "-m", "mambalab", *args], capture_output=True, text=True)


def test_bugs_lists_catalogue():
    r = cli("bugs")
    assert r.returncode == 0
    from mambalab.lab.bugs import CATALOGUE

    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines() if line[:1].strip()}
    for b in CATALOGUE:  # id, PR, status, first fixed release ("-": none), title
        assert rows[b.id][1:4] == [f"#{b.pr}", b.status, b.fixed_in or "-"]
    assert "mirrors vLLM 0.33" in r.stdout


def test_replay_exit_codes_and_json():
    r = cli("replay", "stale-is-prefilling", "--json")
    assert r.returncode == 1
    out = json.loads(r.stdout)
    assert out["ok"] is False and out["bug"] == "stale-is-prefilling"
    assert "stale is_prefilling" in " ".join(out["signatures"])
    r = cli("replay", "stale-is-prefilling", "--fixed")
    assert r.returncode == 0 and r.stdout.startswith("stale-is-prefilling (fixed), seed 0: OK")


def test_replay_illegal_access_is_exit_1():
    r = cli("replay", "pad-minus-one", "--device", "cpu")
    assert r.returncode == 1 and "ILLEGAL MEMORY ACCESS" in r.stdout and "slot -1" in r.stdout


def test_bad_usage_is_exit_2():
    r = cli("replay", "no-such-bug")
    assert r.returncode == 2 and "valid ids: pad-minus-one" in r.stderr
    assert cli("replay").returncode == 2
    assert cli("run", "--bugs", "nope").returncode == 2
    assert cli("frobnicate").returncode == 2


def test_run_random_workload():
    r = cli("run", "--requests", "3", "--seed", "1")
    assert r.returncode == 0 and "OK" in r.stdout


@pytest.mark.cpu_only
def test_run_random_workload_with_a_bug_reports_the_illegal_access():
    r = cli("run", "--requests", "4", "--seed", "0", "--bugs", "pad-minus-one", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["verdict"]["illegal"]["slot"] == -1
