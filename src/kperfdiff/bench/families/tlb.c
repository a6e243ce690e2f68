/*
 * tlb family: remote TLB invalidation (shootdown) cost.
 *
 * T threads of one process, each pinned to a different allowed CPU
 * (threads=T, default: every CPU this process may run on). Threads 1..T-1
 * keep reading one byte of every page of a shared region, so the address
 * space is live on their CPUs and their TLBs hold its entries. Thread 0
 * (the main thread, on the first CPU) changes the mappings; every change
 * must be made visible on the other CPUs (an IPI per remote CPU on x86, a
 * broadcast TLBI on arm64):
 *
 *   tlb.mprotect   one op = one mprotect() of the region, alternating
 *                  PROT_READ and PROT_READ|PROT_WRITE (readers only read,
 *                  so they never fault).
 *   tlb.dontneed   one op = write one byte in each page of the region (the
 *                  zero-fill faults re-populate it) then MADV_DONTNEED it,
 *                  which zaps the PTEs and flushes the TLBs. Here the
 *                  readers read a second region of the same size: the
 *                  address space is still live on their CPUs (so the flush
 *                  must still reach them), but they do not race with the
 *                  changer by read-faulting the zero page into the zapped
 *                  region, which made each op also pay for up to one
 *                  zero-page copy-on-write flush per page (measured: 14.7
 *                  shootdowns per op instead of about 1).
 *
 * Unit: ns per op of the changing thread (lower is better) - the same
 * shape as every other latency here, and the cost of the whole operation,
 * flush included, is what a kernel change (batching, ranged flushes) moves.
 * For reference the same op is first measured with no other thread alive
 * ("info single_thread_ns"); the difference is the cost of the remote
 * invalidation. Counters: "TLB shootdowns" of /proc/interrupts summed over
 * CPUs (x86; absent on arm64) and the nr_tlb_* lines of /proc/vmstat when
 * the kernel has them (CONFIG_DEBUG_TLBFLUSH), as deltas over the timed run
 * and per op. Needs -pthread.
 */
#include "kpd.h"
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#define PAGE 4096UL
#define MAXT 1024

struct tlb {
	char *p;
	size_t len;
	int dontneed;
	int prot_rw; /* current state for mprotect */
	long long ops;
};

static volatile int stop_readers;
static int cpus[CPU_SETSIZE], ncpus;

struct reader {
	pthread_t th;
	int cpu;
	const char *p;
	size_t len;
	int err;
	unsigned long sum;
	long passes; /* read by the main thread: relaxed atomics */
};

static int pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return sched_setaffinity(0, sizeof set, &set);
}

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	unsigned long sum = 0;
	if (pin(r->cpu) < 0) {
		__atomic_store_n(&r->err, errno, __ATOMIC_RELAXED);
		return NULL;
	}
	while (!__atomic_load_n(&stop_readers, __ATOMIC_RELAXED)) {
		for (size_t off = 0; off < r->len; off += PAGE)
			sum += *(volatile const char *)(r->p + off);
		__atomic_fetch_add(&r->passes, 1, __ATOMIC_RELAXED);
	}
	r->sum = sum;
	return NULL;
}

static void body(void *c, long n)
{
	struct tlb *t = c;
	for (long i = 0; i < n; i++) {
		if (t->dontneed) {
			for (size_t off = 0; off < t->len; off += PAGE)
				*(volatile char *)(t->p + off) = 1;
			if (madvise(t->p, t->len, MADV_DONTNEED) < 0)
				kpd_die("madvise(MADV_DONTNEED)");
		} else {
			t->prot_rw = !t->prot_rw;
			if (mprotect(t->p, t->len,
				     t->prot_rw ? PROT_READ | PROT_WRITE : PROT_READ) < 0)
				kpd_die("mprotect");
		}
	}
	t->ops += n;
}

/* Sum of the "TLB shootdowns" line of /proc/interrupts, -1 if absent. */
static long long tlb_shootdowns(void)
{
	FILE *f = fopen("/proc/interrupts", "r");
	char line[8192];
	long long total = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		char *s = line, *end;
		while (*s == ' ')
			s++;
		if (strncmp(s, "TLB:", 4) != 0)
			continue;
		s += 4;
		total = 0;
		for (;;) {
			long long v = strtoll(s, &end, 10);
			if (end == s)
				break;
			total += v;
			s = end;
		}
		break;
	}
	fclose(f);
	return total;
}

static const char *vm_names[] = {
	"nr_tlb_remote_flush", "nr_tlb_remote_flush_received",
	"nr_tlb_local_flush_all", "nr_tlb_local_flush_one",
};
#define NVM (sizeof vm_names / sizeof vm_names[0])

int main(int argc, char **argv)
{
	struct tlb t = { 0 };
	char *rp;
	static struct reader rd[MAXT];
	cpu_set_t allowed;
	long threads, pages;
	long long sd0, sd1, vm0[NVM], ops0;
	double single;
	int started = 0;
	long passes = 0;

	kpd_init(argc, argv);
	if (strcmp(kpd.bench, "tlb.mprotect") == 0)
		t.dontneed = 0;
	else if (strcmp(kpd.bench, "tlb.dontneed") == 0)
		t.dontneed = 1;
	else
		kpd_fail("unknown benchmark %s in family tlb", kpd.bench);

	if (sched_getaffinity(0, sizeof allowed, &allowed) < 0)
		kpd_die("sched_getaffinity");
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &allowed))
			cpus[ncpus++] = c;
	threads = kpd_param_long("threads", ncpus);
	pages = kpd_param_long("pages", 16);
	if (threads < 2 || threads > MAXT)
		kpd_fail("parameter threads=%ld must be between 2 and %d", threads, MAXT);
	if (pages < 1 || pages > (1L << 20))
		kpd_fail("parameter pages=%ld must be between 1 and 1048576", pages);
	if (ncpus < 2)
		kpd_skip("needs at least 2 CPUs to run on (this process may use %d)", ncpus);

	t.len = (size_t)pages * PAGE;
	t.p = mmap(NULL, t.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (t.p == MAP_FAILED)
		kpd_die("mmap");
	madvise(t.p, t.len, MADV_NOHUGEPAGE);
	for (size_t off = 0; off < t.len; off += PAGE)
		t.p[off] = 1;
	t.prot_rw = 1;
	rp = t.p;
	if (t.dontneed) {
		rp = mmap(NULL, t.len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (rp == MAP_FAILED)
			kpd_die("mmap");
		madvise(rp, t.len, MADV_NOHUGEPAGE);
		for (size_t off = 0; off < t.len; off += PAGE)
			rp[off] = 1;
	}
	if (pin(cpus[0]) < 0)
		kpd_die("sched_setaffinity");

	kpd_info("threads", "%ld", threads);
	kpd_info("cpus", "%d", ncpus < threads ? ncpus : (int)threads);
	kpd_info("pages", "%ld", pages);
	single = kpd_median_ns(body, &t, 5);
	kpd_info("single_thread_ns", "%.1f", single);

	for (long i = 1; i < threads; i++) {
		rd[i].cpu = cpus[i % ncpus];
		rd[i].p = rp;
		rd[i].len = t.len;
		if (pthread_create(&rd[i].th, NULL, reader_main, &rd[i]) != 0) {
			__atomic_store_n(&stop_readers, 1, __ATOMIC_RELAXED);
			for (long j = 1; j < i; j++)
				pthread_join(rd[j].th, NULL);
			kpd_fail("pthread_create failed for thread %ld", i);
		}
		started++;
	}
	/* Wait until every reader runs on its CPU (at most 5 s). */
	for (int waited = 0;; waited++) {
		long ready = 0;
		for (long i = 1; i <= started; i++)
			ready += __atomic_load_n(&rd[i].passes, __ATOMIC_RELAXED) > 0 ||
				 __atomic_load_n(&rd[i].err, __ATOMIC_RELAXED);
		if (ready == started)
			break;
		if (waited == 5000) {
			__atomic_store_n(&stop_readers, 1, __ATOMIC_RELAXED);
			for (long i = 1; i <= started; i++)
				pthread_join(rd[i].th, NULL);
			kpd_fail("the reader threads did not start within 5 s");
		}
		usleep(1000);
	}

	sd0 = tlb_shootdowns();
	for (size_t k = 0; k < NVM; k++)
		vm0[k] = kpd_vmstat(vm_names[k]);
	ops0 = t.ops;
	kpd_latency(body, &t, 0);
	sd1 = tlb_shootdowns();

	__atomic_store_n(&stop_readers, 1, __ATOMIC_RELAXED);
	for (long i = 1; i <= started; i++) {
		pthread_join(rd[i].th, NULL);
		if (rd[i].err)
			kpd_fail("cannot pin thread %ld to CPU %d: %s", i, rd[i].cpu,
				 strerror(rd[i].err));
		passes += rd[i].passes;
	}
	{
		long long ops = t.ops - ops0;
		kpd_info("measured_ops", "%lld", ops);
		kpd_info("reader_passes", "%ld", passes);
		if (sd0 >= 0 && sd1 >= 0) {
			kpd_info("tlb_shootdowns", "%lld", sd1 - sd0);
			kpd_info("tlb_shootdowns_per_op", "%.3f", (double)(sd1 - sd0) / (double)ops);
		}
		for (size_t k = 0; k < NVM; k++) {
			long long v = kpd_vmstat(vm_names[k]);
			if (vm0[k] >= 0 && v >= 0) {
				kpd_info(vm_names[k], "%lld", v - vm0[k]);
			}
		}
	}
	if (rp != t.p)
		munmap(rp, t.len);
	munmap(t.p, t.len);
	kpd_end();
	return 0;
}
