"""Noise probes: /proc parsing, the disturbance rules, and real contention seen by run_copies."""
import dataclasses
import os
import subprocess
import sys
import textwrap
import time

import pytest

from kperfdiff.bench import noise as nz
from kperfdiff.bench import worker

PROC_STAT = """cpu  136615 205 68410 1854376 1724 0 173 356 0 0
cpu0 59312 89 34335 936852 275 0 46 173 0 0
cpu1 77303 115 34074 917524 1449 0 126 183 0 0
intr 1234 0 9 0
ctxt 99999
procs_running 3
procs_blocked 0
"""

SCHED = """cat (8021, #threads: 1)
-------------------------------------------------------------------
se.exec_start                                :      10327465.021010
se.sum_exec_runtime                          :             0.000000
se.nr_migrations                             :                   17
nr_switches                                  :                    4
nr_voluntary_switches                        :                    3
nr_involuntary_switches                      :                    1
policy                                       :                    0
current_node=0, numa_group_id=0
"""


def test_parse_proc_stat():
    jiffies, running = nz.parse_proc_stat(PROC_STAT)
    assert jiffies == {"user": 136615, "nice": 205, "system": 68410, "idle": 1854376, "iowait": 1724,
                       "irq": 0, "softirq": 173, "steal": 356}
    assert running == 3
    assert nz.parse_proc_stat("") == ({}, None)


def test_parse_sched_and_schedstat():
    s = nz.parse_sched(SCHED)
    assert s["se.nr_migrations"] == 17 and s["nr_involuntary_switches"] == 1
    assert nz.parse_schedstat("2422381 150 7\n") == (2422381, 150, 7)
    assert nz.parse_schedstat("") is None and nz.parse_schedstat("x y z") is None
    assert nz.task_state("42 (a b) c) R 1 2 3") == "R"
    assert nz.task_state("") is None


def test_steal_pct_arithmetic():
    def snap(t, steal, idle):
        return nz.SystemSnapshot(t, {"user": 100, "nice": 0, "system": 0, "idle": idle, "iowait": 0,
                                     "irq": 0, "softirq": 0, "steal": steal})
    # 10 steal jiffies out of 200 (+10 steal, +190 idle)
    assert nz.steal_pct(snap(0, 5, 0), snap(1, 15, 190)) == pytest.approx(5.0)
    assert nz.steal_pct(snap(0, 5, 0), snap(1, 5, 0)) is None                  # no time passed
    assert nz.steal_pct(nz.SystemSnapshot(0), snap(1, 5, 0)) is None            # unreadable /proc/stat
    n = nz.system_noise(snap(0, 0, 0), snap(2, 30, 170), None, [])
    assert n.steal_pct == pytest.approx(15.0) and n.wall_s == 2 and n.nivcsw_per_s is None


def test_system_noise_from_processes():
    procs = [nz.ProcessNoise(nivcsw=10, migrations=2, run_delay_ns=1, run_ns=9, tasks=1),
             nz.ProcessNoise(nivcsw=30, migrations=1, run_delay_ns=3, run_ns=7, tasks=1)]
    n = nz.system_noise(nz.SystemSnapshot(0.0), nz.SystemSnapshot(2.0), None, procs)
    assert (n.nivcsw, n.migrations, n.copies, n.tasks_per_copy) == (40, 3, 2, 1)
    assert n.nivcsw_per_s == pytest.approx(10.0)                  # 40 over 2 copies and 2 s
    assert n.run_delay_pct == pytest.approx(20.0)                 # mean of 10% and 30%
    assert n.cpu_mhz_min is None and n.steal_pct is None
    assert n.as_dict()["nivcsw"] == 40


def test_combine():
    a = nz.Noise(wall_s=1, steal_pct=0, nivcsw=5, nivcsw_per_s=5, migrations=1, other_runnable_max=1,
                 cpu_mhz_min=2000, cpu_mhz_max=3000, copies=1)
    b = nz.Noise(wall_s=3, steal_pct=8, nivcsw=30, nivcsw_per_s=10, migrations=2, other_runnable_max=4, copies=1)
    c = nz.Noise.combine([a, b])
    assert c.wall_s == 4 and c.nivcsw == 35 and c.migrations == 3 and c.reps == 2
    assert c.steal_pct == pytest.approx(6.0)                      # weighted by wall time
    assert c.nivcsw_per_s == pytest.approx(8.75)
    assert c.other_runnable_max == 4 and (c.cpu_mhz_min, c.cpu_mhz_max) == (2000, 3000)
    assert c.run_delay_pct is None and nz.Noise.combine([]).reps == 0


def _clean(**kw):
    base = dict(wall_s=1.0, steal_pct=0.0, other_runnable_mean=0.0, other_runnable_max=0, nivcsw=0,
                nivcsw_per_s=0.0, run_delay_pct=0.0, copies=1, tasks_per_copy=1, own_runnable_max=1)
    base.update(kw)
    return nz.Noise(**base)


@pytest.mark.parametrize("field, at, beyond, word", [
    ("steal_pct", 5.0, 5.1, "steal 5.1% of CPU time (limit 5%)"),
    ("other_runnable_mean", 0.5, 0.6, "other runnable tasks"),
    ("run_delay_pct", 10.0, 10.5, "waited for a CPU 10.5%"),
])
def test_disturbance_limits(field, at, beyond, word):
    assert nz.disturbance(_clean(), copies=1, cpus=2) == []
    assert nz.disturbance(_clean(**{field: at}), copies=1, cpus=2) == []
    reasons = nz.disturbance(_clean(**{field: beyond}), copies=1, cpus=2)
    assert len(reasons) == 1 and word in reasons[0]


def test_frequent_cheap_preemptions_are_not_a_disturbance():
    # syscall.null on an idle 2-vCPU VM: 185 involuntary switches a second (kernel threads,
    # the VM's agent) but only 1.7% of its runnable time lost to them
    assert nz.disturbance(_clean(nivcsw=185, nivcsw_per_s=185.0, run_delay_pct=1.7), copies=1, cpus=2) == []


def test_other_runnable_limit_counts_free_cpus():
    # on 8 CPUs one copy leaves 7 free: 6.5 others fit on them less one
    assert nz.disturbance(_clean(other_runnable_mean=6.4), copies=1, cpus=8) == []
    assert nz.disturbance(_clean(other_runnable_mean=6.6), copies=1, cpus=8)
    assert nz.disturbance(_clean(other_runnable_mean=0.6), copies=8, cpus=8)


def test_cooperating_processes_are_not_disturbed():
    # ctx.2p.0k alone on this kind of VM: 2 tasks per copy ping-ponging through a pipe,
    # 1.6e5 voluntary and 1.1e5 involuntary switches a second, 30% of their time waiting
    # for each other on a run queue; nothing else running
    pingpong = _clean(nivcsw=24486, nivcsw_per_s=115890.0, run_delay_pct=30.0, tasks_per_copy=2,
                      own_runnable_max=2, migrations=1)
    assert nz.disturbance(pingpong, copies=1, cpus=2) == []
    assert nz.disturbance(_clean(run_delay_pct=60.0, nivcsw_per_s=7e4, tasks_per_copy=2, copies=2,
                                 own_runnable_max=3), copies=2, cpus=2) == []
    # but steal and other work still count for them
    assert nz.disturbance(_clean(tasks_per_copy=2, steal_pct=9.0), copies=1, cpus=2)
    # and more single-task copies than CPUs wait for each other: not other work's fault
    assert nz.disturbance(_clean(run_delay_pct=50.0, nivcsw_per_s=500.0, copies=3,
                                 own_runnable_max=3), copies=3, cpus=2) == []


def test_sampler_never_raises_and_stops_promptly():
    with nz.RunnableSampler(lambda: 1 / 0, interval=0.05) as s:
        time.sleep(0.12)
    t = time.monotonic()
    with nz.RunnableSampler(lambda: [], interval=5.0) as s:
        time.sleep(0.05)
    assert time.monotonic() - t < 1.0
    assert len(s.samples) == 1 and s.mean_other is not None and s.max_other >= 0


def test_a_sampler_whose_start_a_ctrl_c_interrupted_stops_without_an_error(monkeypatch):
    """Ctrl-C can land inside Thread.start(), before the thread runs: the benchmark's clean-up then
    stops the sampler, which must not raise 'cannot join thread before it is started' over the
    KeyboardInterrupt (a CI run showed that traceback in place of the interrupted experiment's exit)."""
    import threading

    def interrupted(self):
        raise KeyboardInterrupt
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    s = nz.RunnableSampler(lambda: [], interval=0.05)
    with pytest.raises(KeyboardInterrupt):
        s.__enter__()
    s.__exit__(None, None, None)


def test_sampler_takes_at_most_a_tenth_of_a_cpu():
    """A sample that takes 30 ms (reading every task of a large machine) is followed by a pause
    of 270 ms, not by the next sample 1 ms later."""
    class Slow(nz.RunnableSampler):
        def sample(self):
            time.sleep(0.03)
            self.samples.append(0)
    with Slow(lambda: [], interval=0.001) as s:
        time.sleep(0.5)
    assert 1 <= len(s.samples) <= 3


def test_sampler_counts_our_running_tasks_as_ours():
    hog = _busy_loops(1, None)
    try:
        time.sleep(0.1)
        with nz.RunnableSampler(lambda: [hog[0].pid], interval=0.02) as s:
            time.sleep(0.3)
    finally:
        _stop(hog)
    assert s.max_own == 1 and sum(s.own_samples) >= len(s.own_samples) // 2


def _fake_task(proc, pid, tid, comm, state, ppid, session, children=""):
    d = proc / str(pid) / "task" / str(tid)
    d.mkdir(parents=True)
    (d / "stat").write_text(f"{tid} ({comm}) {state} {ppid} {session} {session} 0 -1 4194304 0 0\n")
    (d / "children").write_text(children)


def test_a_copy_caught_before_its_setsid_is_not_a_second_task_of_a_copy(tmp_path):
    """kpd-run (100) running, and the copy it just forked (101) not yet in a session of its own:
    both ours, but kpd-run's session is not a copy's. Counted as one, the one-task copy looked
    like two, and its wait for a CPU was no longer judged (the contention test failed so)."""
    proc = tmp_path / "proc"
    _fake_task(proc, 100, 100, "kpd-run", "R", 1, 100, children="101 ")
    _fake_task(proc, 101, 101, "kpd worker", "R", 100, 100)
    (proc / "loadavg").write_text("0.5 0.5 0.5 4/90 4242\n")     # the 2 above, an outsider, the sampler
    _fake_task(proc, 200, 200, "outsider", "R", 1, 200)
    for runner, most in ((None, 2), (100, 0)):
        s = nz.RunnableSampler(lambda: [101, 100], proc=proc, runner=runner)
        s.sample()
        assert (s.samples, s.own_samples, s.most_session_tasks) == ([1], [2], most), runner
    copy = nz.ProcessNoise(tasks=1, run_ns=10**9, run_delay_ns=10**9)
    n = nz.system_noise(nz.SystemSnapshot(0.0), nz.SystemSnapshot(1.0), s, [copy])
    assert n.tasks_per_copy == 1
    assert any("waited for a CPU" in r for r in nz.disturbance(n, copies=1, cpus=2)), nz.disturbance(n, copies=1, cpus=2)


def test_sampler_leaves_out_the_benchmarks_own_unlisted_children(tmp_path, monkeypatch):
    """The copy's tree lists the worker only; a child it forked since and an orphan it left
    behind are in its session, running, and must not be blamed as other work: only the
    outside process is."""
    proc = tmp_path / "proc"
    _fake_task(proc, 100, 100, "kpd-run", "S", 1, 100, children="101 ")
    _fake_task(proc, 101, 101, "kpd worker", "R", 100, 101)
    _fake_task(proc, 102, 102, "kpd worker", "R", 101, 101)     # forked after the listing
    _fake_task(proc, 103, 103, "orphan", "R", 1, 101)           # reparented, same session
    _fake_task(proc, 200, 200, "outsider", "R", 1, 200)
    (proc / "loadavg").write_text("0.5 0.5 0.5 5/90 4242\n")     # the 4 above and the sampler
    s = nz.RunnableSampler(lambda: [101, 100], proc=proc)
    s.sample()
    assert (s.samples, s.own_samples) == ([1], [3])
    assert s.most_session_tasks == 3
    n = nz.system_noise(nz.SystemSnapshot(0.0), nz.SystemSnapshot(1.0), s, [nz.ProcessNoise(tasks=1)])
    assert n.tasks_per_copy == 3 and n.own_runnable_max == 3 and n.other_runnable_mean == 1
    # with nothing to find, the cheap count decides and no task is read one by one
    # (the worker, in both trees given, read twice: before and after the count)
    reads = []
    read = nz._read
    monkeypatch.setattr(nz, "_read", lambda path: reads.append(path) or read(path))
    (proc / "loadavg").write_text("0.5 0.5 0.5 2/90 4242\n")
    s.sample()
    assert s.samples[-1] == 0 and s.own_samples[-1] == 1
    assert reads.count(proc / "101" / "task" / "101" / "stat") == 2


ORPHANS = """\
    import os, sys, time
    end = time.monotonic() + float(sys.argv[2])
    for _ in range(int(sys.argv[3])):      # busy grandchildren, reparented away from the worker's tree
        if os.fork() == 0:
            if os.fork() == 0:
                while time.monotonic() < end:
                    pass
            os._exit(0)
        os.wait()
    n = 0
    while time.monotonic() < end:
        n += 1
    print(f"kpd 1 {sys.argv[1]}\\nunit ops higher\\ninterval {n} {n} 1\\nend {n} 0 0")
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_a_benchmarks_own_busy_children_are_not_other_work(tmp_path):
    """A real worker leaves 2 busy orphans in its session (no listing of its tree finds them):
    they are counted as its own tasks, while an outside busy loop still counts as other work.
    Counts are compared, not timings: the orphans and the hog are runnable all the time."""
    script = tmp_path / "orphans.py"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(ORPHANS))
    script.chmod(0o755)
    hog = _busy_loops(1, None)
    try:
        time.sleep(0.1)
        outs, rep = worker.run_copies_with_noise([str(script), "b.o", "1.0", "2"], 1, timeout=20)
    finally:
        _stop(hog)
    assert outs[0].status == "ok", outs[0].error
    assert rep.own_runnable_max >= 3 and rep.tasks_per_copy >= 3    # the worker and its two orphans
    assert rep.other_runnable_mean >= 0.9                            # the hog, in every sample
    assert nz.disturbance(rep, copies=1, cpus=os.cpu_count())        # and it disturbs the run
    assert not any("waited for a CPU" in r for r in nz.disturbance(rep, copies=1, cpus=os.cpu_count()))


def test_a_forking_benchmark_is_not_one_task():
    """proc.fork's children live microseconds, between the tracker's samples; the copy is still
    known to have had them (it waited for them), so the time it waits for a CPU (its children's
    turn) is not judged as other work's."""
    from kperfdiff.bench import build
    argv = worker.worker_argv(build.build_family("proc"), "proc.fork", {}, intervals=3)
    outs, rep = worker.run_copies_with_noise(argv, 1, timeout=60)
    assert outs[0].status == "ok", outs[0].error
    assert outs[0].noise.tasks >= 2 and rep.tasks_per_copy >= 2
    crowded = dataclasses.replace(rep, run_delay_pct=90.0)
    assert not any("waited for a CPU" in r for r in nz.disturbance(crowded, copies=1, cpus=os.cpu_count()))
    assert nz.reaped_children("1 (a b) S 0 1 1 0 -1 0 5 0 0 0 0 0 0 0") is False
    assert nz.reaped_children("1 (a b) S 0 1 1 0 -1 0 5 7 0 0 0 0 0 0") is True


def test_tasks_of_and_tracker_follow_children():
    p = subprocess.Popen(["sh", "-c", "sleep 2 & sleep 2; wait"])
    try:
        time.sleep(0.3)
        tasks = nz.tasks_of(p.pid)
        assert len(tasks) >= 3 and tasks[0][0] == p.pid          # sh and its two sleeps
        tr = nz.TaskTracker()
        tr.sample([p.pid])
        assert tr.process_noise(p.pid).tasks >= 3
    finally:
        p.kill()
        p.wait()
    assert nz.tasks_of(p.pid) == [] and nz.tasks_of(2 ** 22 + 7) == []


BUSY = """\
    import sys, time
    end = time.monotonic() + float(sys.argv[2])
    n = 0
    while time.monotonic() < end:
        n += 1
    print(f"kpd 1 {sys.argv[1]}\\nunit ops higher\\ninterval {n} {n} 1\\nend {n} 0 0")
"""


def _busy_worker(tmp_path) -> str:
    """A one-task worker spinning for argv[2] seconds, speaking the kpd protocol."""
    script = tmp_path / "busy.py"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(BUSY))
    script.chmod(0o755)
    return str(script)


def _busy_loops(n: int, cpu: int | None):
    """n spinning processes (on ``cpu`` when given), returned once each is spinning (on a busy machine
    an interpreter's start can take longer than the measurement that follows). Each is a session of
    its own, as the worker is: with autogroup scheduling, a hog left in pytest's session shared that
    session's weight with the rest of it, and a "crowded" worker beside other load (CI's) waited 26%
    of its time instead of half."""
    procs = [subprocess.Popen([sys.executable, "-c", "print('spinning', flush=True)\nwhile True: pass"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True) for _ in range(n)]
    if cpu is not None:
        for p in procs:
            os.sched_setaffinity(p.pid, {cpu})
    for p in procs:
        assert p.stdout.readline() == "spinning\n"
    return procs


def _stop(procs):
    for p in procs:
        p.kill()
        p.wait()
        p.stdout.close()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_contention_is_seen_and_reported(tmp_path):
    argv = [_busy_worker(tmp_path), "b.c", "1.0"]
    cpus = os.cpu_count()
    cpu = sorted(os.sched_getaffinity(0))[0]
    alone, rep_alone = worker.run_copies_with_noise(argv, 1, timeout=20)
    hog = _busy_loops(1, cpu)
    try:
        time.sleep(0.1)
        crowded, rep_crowded = worker.run_copies_with_noise(argv, 1, timeout=20,
                                                            prefix=["taskset", "-c", str(cpu)])
    finally:
        _stop(hog)
    for outs in (alone, crowded):
        assert outs[0].status == "ok", outs[0].error
        pn = outs[0].noise
        assert pn.tasks == 1 and pn.run_ns > 0.2e9 and pn.maxrss_kb > 0      # a second spinning, half of it shared
        assert outs[0].rep_noise is not None
    a, c = alone[0].noise, crowded[0].noise
    if a.run_delay_pct > 30:
        # Other users of this machine already keep a lone busy loop waiting for a CPU a third
        # of its time: the hog's own effect cannot be told apart from theirs.
        pytest.skip(f"the machine is too busy to show contention: a busy loop alone waited "
                    f"{a.run_delay_pct:.0f}% of its runnable time")
    # sharing one CPU with a busy loop: about half the runnable time waiting, preempted often
    assert c.run_delay_pct > 25 and c.run_delay_pct > a.run_delay_pct + 15
    assert c.nivcsw > 10       # (not compared: other users of a shared machine preempt the alone run too)
    assert rep_crowded.other_runnable_mean >= 0.5
    reasons = nz.disturbance(rep_crowded, copies=1, cpus=cpus)
    assert any("waited for a CPU" in r for r in reasons), reasons
    # the alone run may meet other users of this machine, but not the same run-queue wait
    assert rep_alone.run_delay_pct < rep_crowded.run_delay_pct


def test_run_copies_without_sampler_still_reads_each_process(tmp_path):
    outs, rep = worker.run_copies_with_noise([_busy_worker(tmp_path), "b.c", "0.2"], 2, timeout=20,
                                             sampler=False)
    assert rep is None and all(o.rep_noise is None for o in outs)
    assert all(o.noise and o.noise.tasks == 1 and o.noise.run_ns > 0 for o in outs)
    assert [o.exit_status for o in outs] == [0, 0]


def test_busy_check_sees_busy_loops():
    hogs = _busy_loops(3, None)
    try:
        time.sleep(0.2)
        msg = nz.busy_check(0.4)
    finally:
        _stop(hogs)
    assert msg and msg.startswith("kperfdiff: warning: the machine is busy: ") and "\n" not in msg
    assert "other tasks runnable" in msg


def test_busy_check_on_recorded_files(tmp_path):
    assert nz.busy_check(0.05, proc=tmp_path / "none", cpu_root=tmp_path / "none") is None  # nothing readable
    proc, cpu = tmp_path / "proc", tmp_path / "cpu"
    (cpu / "cpu0" / "cpufreq").mkdir(parents=True)
    (cpu / "cpu0" / "cpufreq" / "scaling_governor").write_text("powersave\n")
    (cpu / "cpu0" / "cpufreq" / "scaling_cur_freq").write_text("2400000\n")
    proc.mkdir()
    (proc / "stat").write_text(PROC_STAT)
    (proc / "loadavg").write_text("0.10 0.20 0.30 1/100 4242\n")
    assert nz.busy_check(0.05, proc=proc, cpu_root=cpu) is None
    assert nz.read_cpu_mhz(cpu) == [2400.0] and nz.read_cpu_mhz(tmp_path) is None
    (proc / "loadavg").write_text(f"{os.cpu_count() + 3}.50 0.20 0.30 6/100 4242\n")
    msg = nz.busy_check(0.05, proc=proc, cpu_root=cpu)
    assert msg.startswith("kperfdiff: warning: the machine is busy: load average")
    assert "5.0 other tasks runnable" in msg and "governor is powersave" in msg
