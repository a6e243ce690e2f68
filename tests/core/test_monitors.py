from kperfdiff.targets import machine
from kperfdiff.core import monitors

INTERRUPTS = """           CPU0       CPU1
  0:         36          0   IO-APIC   2-edge      timer
NMI:          0          0   Non-maskable interrupts
LOC:     123456      65432   Local timer interrupts
TLB:         10         32   TLB shootdowns
ERR:          0
"""


def test_parse_interrupts_sums_cpus():
    d = monitors.parse_interrupts(INTERRUPTS)
    assert d["irq.0"] == 36
    assert d["irq.LOC"] == 188888
    assert d["irq.TLB"] == 42
    assert d["irq.ERR"] == 0


def test_delta_and_relevant():
    a = {"vmstat.pgfault": 10, "irq.TLB": 5, "vmstat.nr_free_pages": 100}
    b = {"vmstat.pgfault": 25, "irq.TLB": 5, "vmstat.nr_free_pages": 90, "vmstat.thp_fault_alloc": 2}
    d = monitors.delta(a, b)
    assert d == {"vmstat.pgfault": 15, "vmstat.nr_free_pages": -10, "vmstat.thp_fault_alloc": 2}
    assert monitors.relevant(d) == [("vmstat.pgfault", 15), ("vmstat.thp_fault_alloc", 2)]


def test_snapshot_reads_this_kernel():
    s = machine.counter_snapshot()
    assert s["vmstat.pgfault"] > 0
    assert any(k.startswith("irq.") for k in s)


def test_one_vmstat_parser_for_local_and_target_text():
    text = "pgfault 12\nthp_fault_alloc 3\nnr_weird -4\nnot a counter line\n"
    assert monitors.parse_vmstat(text) == {"vmstat.pgfault": 12, "vmstat.thp_fault_alloc": 3, "vmstat.nr_weird": -4}
    snap = monitors.snapshot_from_text(text, INTERRUPTS)
    assert snap["vmstat.pgfault"] == 12 and snap["irq.TLB"] == 42
