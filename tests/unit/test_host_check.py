"""The host check: CPU time that neither Atlas's process tree nor idle CPUs explain was taken from the point."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atlas.host_check import CpuSnapshot, check_host, snapshot

linux = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="reads /proc")


def snap(t, busy, idle, steal, ours, cpus=2):
    return CpuSnapshot(wall_s=t, busy_s=busy, idle_s=idle, steal_s=steal, ours_s={1: ours}, cpus=cpus)


def test_a_quiet_host_passes_and_others_on_idle_cpus_take_nothing():
    quiet = check_host(snap(0, 0, 0, 0, 0), snap(10, 15, 5, 0, 15))  # 1.5 of 2 cores ours, the rest idle
    assert quiet.ours_cores == 1.5 and quiet.others_cores == 0 and quiet.taken_share == 0
    assert quiet.host_busy is None and quiet.warning is None
    # another program used 0.4 cores while 0.5 sat idle: it ran beside the point, not instead of it
    beside = check_host(snap(0, 0, 0, 0, 0), snap(10, 15, 5, 0, 11))
    assert beside.others_cores == pytest.approx(0.4) and beside.taken_cores == 0 and beside.host_busy is None


def test_others_on_a_full_host_make_the_point_invalid_with_the_figures():
    # both cores busy all along: 1.5 cores ours, 0.5 someone else's, nothing idle
    busy = check_host(snap(0, 0, 0, 0, 0), snap(10, 20, 0, 0, 15))
    assert busy.taken_cores == pytest.approx(0.5) and busy.taken_share == pytest.approx(0.25)
    assert busy.host_busy.startswith("host busy: other programs used 0.50 of 2 cores while 0.00 sat idle")
    assert "25% of the CPU time this point could use" in busy.host_busy
    # a little: a warning, not a verdict
    little = check_host(snap(0, 0, 0, 0, 0), snap(10, 20, 0, 0, 19))
    assert little.host_busy is None and little.warning and "5%" in little.warning
    # jiffy rounding on a short point is no program at all
    assert check_host(snap(0, 0, 0, 0, 0), snap(10, 20, 0, 0, 19.8)).warning is None


def test_stolen_time_is_recorded_and_warned_of_never_a_verdict():
    # a VM's vCPUs waking from idle accrue steal on an I/O-bound point; only a large share is worth a warning
    some = check_host(snap(0, 0, 0, 0, 0), snap(10, 4, 15.5, 0.5, 4))
    assert some.steal_cores == pytest.approx(0.05) and some.taken_cores == 0
    assert some.host_busy is None and some.warning is None
    much = check_host(snap(0, 0, 0, 0, 0), snap(10, 15, 2, 3, 15))
    assert much.host_busy is None and much.warning == "the hypervisor stole 15% of the CPUs' time"


BURN = "import time\nt = time.monotonic()\nwhile time.monotonic() - t < {s}: pass\n"


def _orphan(seconds: float, pidfile: Path) -> None:
    """A CPU-burning process of another program: in its own session, and not a descendant of this process (its
    parent exits: it is re-parented)."""
    code = ("import os, sys, time\nif os.fork():\n    sys.exit(0)\nos.setsid()\n"
            f"open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n" + BURN.format(s=seconds))
    subprocess.run([sys.executable, "-c", code], check=True)


@linux
def test_the_snapshot_counts_children_as_ours_and_an_orphan_as_another_program(tmp_path):
    pidfile = tmp_path / "pid"
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=1.5)])
    try:
        time.sleep(0.2)  # both started: they burn from the first snapshot to the second
        _orphan(1.5, pidfile)
        while not pidfile.exists():
            time.sleep(0.01)
        a = snapshot()
        time.sleep(1.0)
        b = snapshot()
    finally:
        child.wait()
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), 9)
            except ProcessLookupError:
                pass
    check = check_host(a, b)
    assert child.pid in a.ours_s and int(pidfile.read_text()) not in a.ours_s
    # each burnt up to a core (less where the two shared one core with others: a loaded host gives them less)
    assert check.ours_cores >= 0.2 and check.others_cores >= 0.2


def test_atlas_is_itself_its_process_group_and_their_descendants_not_its_launchers_other_children():
    from atlas.host_check import _tree

    procs = {  # pid: (parent, process group, CPU s)
        1: (0, 1, 0.0),
        10: (1, 10, 1.0),  # a launcher (a benchmark script, pytest): Atlas's parent, same group
        11: (10, 10, 2.0),  # Atlas
        12: (11, 12, 3.0),  # the engine Atlas started in its own session
        13: (12, 12, 4.0),  # the engine's worker
        14: (10, 10, 5.0),  # another worker the launcher started in the group: counted with Atlas
        15: (14, 15, 6.0),  # ... and its engine
        16: (10, 16, 7.0),  # a burner the launcher started in its own session: another program
        20: (1, 20, 8.0),  # a stranger
    }
    assert _tree(procs, 11) == {11: 2.0, 12: 3.0, 13: 4.0, 14: 5.0, 15: 6.0}


def test_only_the_cpus_atlas_may_run_on_are_counted(tmp_path, monkeypatch):
    """In a container /proc/stat counts the whole machine: the check sums the per-CPU lines of its affinity."""
    import atlas.host_check as hc

    (tmp_path / "stat").write_text(
        "cpu  40 0 0 400 0 0 0 0 0 0\n"
        "cpu0 10 0 0 100 0 0 0 0 0 0\ncpu1 20 0 0 100 0 0 0 1 0 0\n"
        "cpu2 5 0 0 100 0 0 0 2 0 0\ncpu3 5 0 0 100 0 0 0 0 0 0\nintr 1 2 3\n")
    monkeypatch.setattr(hc, "PROC", tmp_path)
    monkeypatch.setattr(hc, "_TICK", 1)
    assert hc._cpu_lines({1, 2}) == [25, 0, 0, 200, 0, 0, 0, 3]
    assert hc._cpu_lines(None)[0] == 40
