/*
 * kpd.h - the timing harness every kperfdiff benchmark worker includes.
 *
 * A worker is one C file per family (syscall.c, fault.c, ...). It is run as
 *
 *     kpd-<family> <benchmark-name> [--intervals N] [--warmup N]
 *                  [--min-batch-ns N] [--sync] [--count] [key=value ...]
 *
 * and writes a small line-oriented record on stdout that the Python side
 * (kperfdiff.bench.worker) parses and checks:
 *
 *     kpd 1 <benchmark-name>           header, protocol version 1
 *     unit <unit> <lower|higher>       what the intervals are in
 *     overhead <ns>                    (optional) per-op cost subtracted
 *     interval <value> <ops> <ns>      one timed interval: value in unit,
 *                                      operations done, elapsed nanoseconds
 *     info <key> <value>               (any number) facts about the run
 *     skip <reason>                    the benchmark cannot run here
 *     error <reason>                   the benchmark failed (exit != 0)
 *     end <ops> <cpu_user_ns> <cpu_sys_ns>
 *                                      ops: every operation the process did,
 *                                      calibration and warm-up included,
 *                                      so CPU time / ops is a per-op cost
 *
 * Times are CLOCK_MONOTONIC. A latency benchmark hands kpd_latency() a body
 * that performs n operations; the harness calibrates n so that one batch
 * lasts at least --min-batch-ns (default 10 ms), runs --warmup batches
 * untimed, then --intervals timed batches (default 11), each reported as
 * ns/op minus the overhead the benchmark measured for itself.
 *
 * With --sync (parallel copies, lmbench's -P), the worker prints "ready"
 * once its set-up is done and waits for one byte on stdin, so that every
 * copy starts measuring at the same moment.
 *
 * With --count, kpd_latency() also counts the instructions retired in kernel
 * and in user mode during its timed intervals (perf_event_open, children
 * included) and prints them as info lines: instructions_kernel,
 * instructions_user, or count_error with the reason the counters could not
 * be opened; and counted_ops, the operations of those intervals. On arm64 it
 * also marks the intervals with "hint #0x70" before and "hint #0x71" after,
 * on x86_64 with two 9-byte NOPs (kpd_mark) (NOPs for the CPU; kperfdiff's
 * QEMU plugin counts instructions per block between them) and prints
 * "info marked 1".
 */
#ifndef KPD_H
#define KPD_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <linux/perf_event.h>

#define KPD_UNUSED __attribute__((unused))
#define KPD_MAX_PARAMS 32
#define KPD_MAX_INTERVALS 100000

typedef void (*kpd_body)(void *ctx, long n);

struct kpd_state {
	const char *bench;
	int intervals;
	int warmup;
	long long min_batch_ns;
	int sync;
	int count;
	int ready_done;
	int begun;
	long long total_ops;   /* ops in reported intervals */
	long long batch_ops;   /* ops in every batch timed by kpd_time_batch */
	int nparams;
	const char *pkey[KPD_MAX_PARAMS];
	const char *pval[KPD_MAX_PARAMS];
};

static struct kpd_state kpd KPD_UNUSED;

static KPD_UNUSED long long kpd_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static KPD_UNUSED void kpd_vline(const char *tag, const char *fmt, va_list ap)
{
	char buf[1024];
	vsnprintf(buf, sizeof buf, fmt, ap);
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	printf("%s %s\n", tag, buf);
	fflush(stdout);
}

static KPD_UNUSED void kpd_info(const char *key, const char *fmt, ...)
{
	char buf[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	printf("info %s %s\n", key, buf);
	fflush(stdout);
}

/* The benchmark cannot run on this machine: say why and stop (exit 0). */
static KPD_UNUSED __attribute__((noreturn)) void kpd_skip(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	kpd_vline("skip", fmt, ap);
	va_end(ap);
	exit(0);
}

/* The benchmark failed: say why and stop (exit 1). */
static KPD_UNUSED __attribute__((noreturn)) void kpd_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	kpd_vline("error", fmt, ap);
	va_end(ap);
	exit(1);
}

/* kpd_fail with strerror(errno) appended. */
#define kpd_die(what) kpd_fail("%s: %s", (what), strerror(errno))

static KPD_UNUSED const char *kpd_param_str(const char *key, const char *def)
{
	for (int i = 0; i < kpd.nparams; i++)
		if (strcmp(kpd.pkey[i], key) == 0)
			return kpd.pval[i];
	return def;
}

static KPD_UNUSED long kpd_param_long(const char *key, long def)
{
	const char *v = kpd_param_str(key, NULL);
	char *end;
	long r;
	if (!v)
		return def;
	errno = 0;
	r = strtol(v, &end, 0);
	if (errno || end == v)
		kpd_fail("parameter %s=%s is not an integer", key, v);
	/* k/m/g suffixes for sizes */
	if (*end == 'k' || *end == 'K')
		r <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		r <<= 20, end++;
	else if (*end == 'g' || *end == 'G')
		r <<= 30, end++;
	if (*end)
		kpd_fail("parameter %s=%s is not an integer", key, v);
	return r;
}

static KPD_UNUSED long long kpd_arg_ll(const char *opt, const char *v)
{
	char *end;
	long long r;
	if (!v)
		kpd_fail("option %s needs a value", opt);
	errno = 0;
	r = strtoll(v, &end, 0);
	if (errno || end == v || *end || r < 0)
		kpd_fail("option %s=%s is not a non-negative integer", opt, v);
	return r;
}

static KPD_UNUSED void kpd_init(int argc, char **argv)
{
	kpd.intervals = 11;
	kpd.warmup = 2;
	kpd.min_batch_ns = 10000000LL;
	if (argc < 2)
		kpd_fail("usage: %s BENCHMARK [--intervals N] [--warmup N] "
			 "[--min-batch-ns N] [--sync] [--count] [key=value ...]", argv[0]);
	kpd.bench = argv[1];
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--intervals") == 0)
			kpd.intervals = (int)kpd_arg_ll(a, i + 1 < argc ? argv[++i] : NULL);
		else if (strcmp(a, "--warmup") == 0)
			kpd.warmup = (int)kpd_arg_ll(a, i + 1 < argc ? argv[++i] : NULL);
		else if (strcmp(a, "--min-batch-ns") == 0)
			kpd.min_batch_ns = kpd_arg_ll(a, i + 1 < argc ? argv[++i] : NULL);
		else if (strcmp(a, "--sync") == 0)
			kpd.sync = 1;
		else if (strcmp(a, "--count") == 0)
			kpd.count = 1;
		else if (strchr(a, '=') && kpd.nparams < KPD_MAX_PARAMS) {
			char *eq = strchr(a, '=');
			*eq = '\0';
			kpd.pkey[kpd.nparams] = a;
			kpd.pval[kpd.nparams] = eq + 1;
			kpd.nparams++;
		} else
			kpd_fail("unknown argument %s", a);
	}
	if (kpd.intervals < 1 || kpd.intervals > KPD_MAX_INTERVALS)
		kpd_fail("--intervals must be between 1 and %d", KPD_MAX_INTERVALS);
	printf("kpd 1 %s\n", kpd.bench);
	fflush(stdout);
}

/* Declare the unit of the intervals: "ns/op", "GUP/s", "ops/s", ... */
static KPD_UNUSED void kpd_begin(const char *unit, const char *better)
{
	printf("unit %s %s\n", unit, better);
	fflush(stdout);
	kpd.begun = 1;
}

/* Set-up is done. With --sync, wait until every parallel copy is ready. */
static KPD_UNUSED void kpd_ready(void)
{
	if (kpd.ready_done)
		return;
	kpd.ready_done = 1;
	if (!kpd.sync)
		return;
	char c;
	printf("ready\n");
	fflush(stdout);
	if (read(0, &c, 1) != 1)
		kpd_fail("the parent went away before the start signal");
}

/* Report one interval: value in the declared unit, ops done, elapsed ns. */
static KPD_UNUSED void kpd_interval(double value, long long ops, long long ns)
{
	printf("interval %.6g %lld %lld\n", value, ops, ns);
	fflush(stdout);
	kpd.total_ops += ops;
}

/* Time one batch of n operations. */
static KPD_UNUSED long long kpd_time_batch(kpd_body fn, void *ctx, long n)
{
	long long t0 = kpd_now_ns();
	fn(ctx, n);
	kpd.batch_ops += n;
	return kpd_now_ns() - t0;
}

/*
 * Find n so that one batch of fn lasts at least min_ns. Doubles n until a
 * batch takes a tenth of the target, then scales; never returns < 1.
 */
static KPD_UNUSED long kpd_calibrate(kpd_body fn, void *ctx, long long min_ns)
{
	long n = 1;
	long long t;
	for (;;) {
		t = kpd_time_batch(fn, ctx, n);
		if (t >= min_ns / 10 || n >= (1L << 40))
			break;
		n *= 2;
	}
	if (t < min_ns) {
		double scale = (double)min_ns / (double)(t > 0 ? t : 1);
		n = (long)((double)n * scale * 1.05) + 1;
	}
	return n < 1 ? 1 : n;
}

static int kpd_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* Median ns/op of fn over `reps` calibrated batches (used for overheads). */
static KPD_UNUSED double kpd_median_ns(kpd_body fn, void *ctx, int reps)
{
	double v[64];
	long n;
	if (reps > 64)
		reps = 64;
	if (reps < 1)
		reps = 1;
	n = kpd_calibrate(fn, ctx, kpd.min_batch_ns);
	for (int i = 0; i < reps; i++)
		v[i] = (double)kpd_time_batch(fn, ctx, n) / (double)n;
	qsort(v, reps, sizeof v[0], kpd_cmp_double);
	return reps % 2 ? v[reps / 2] : (v[reps / 2 - 1] + v[reps / 2]) / 2;
}

/* Announce the per-op overhead that kpd_latency will subtract. */
static KPD_UNUSED void kpd_overhead(double ns)
{
	printf("overhead %.6g\n", ns);
	fflush(stdout);
}

/*
 * Instruction counters for --count: one for kernel mode, one for user mode,
 * inherited by the children the benchmark creates (their counts are added
 * when they exit). kpd_count_open() returns 0, or -1 after printing
 * "info count_error <reason>".
 */
static int kpd_count_fd[2] = {-1, -1};

static KPD_UNUSED int kpd_count_open(void)
{
	for (int i = 0; i < 2; i++) {
		struct perf_event_attr a;
		memset(&a, 0, sizeof a);
		a.size = sizeof a;
		a.type = PERF_TYPE_HARDWARE;
		a.config = PERF_COUNT_HW_INSTRUCTIONS;
		a.disabled = 1;
		a.inherit = 1;
		a.exclude_hv = 1;
		a.exclude_user = i == 0;
		a.exclude_kernel = i == 1;
		kpd_count_fd[i] = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
		if (kpd_count_fd[i] < 0) {
			kpd_info("count_error", "perf_event_open of %s instructions: %s",
				 i == 0 ? "kernel" : "user", strerror(errno));
			return -1;
		}
	}
	for (int i = 0; i < 2; i++)
		ioctl(kpd_count_fd[i], PERF_EVENT_IOC_ENABLE, 0);
	return 0;
}

static KPD_UNUSED void kpd_count_close(void)
{
	unsigned long long v[2] = {0, 0};
	for (int i = 0; i < 2; i++) {
		ioctl(kpd_count_fd[i], PERF_EVENT_IOC_DISABLE, 0);
		if (read(kpd_count_fd[i], &v[i], sizeof v[i]) != (ssize_t)sizeof v[i]) {
			kpd_info("count_error", "reading the instruction counters: %s", strerror(errno));
			return;
		}
		close(kpd_count_fd[i]);
	}
	kpd_info("instructions_kernel", "%llu", v[0]);
	kpd_info("instructions_user", "%llu", v[1]);
}

/*
 * The window marks of --count (see the header comment). x86_64: the 9-byte
 * NOP "nopw 0x4b504470(%rax,%rax,1)" (66 0f 1f 84 00 70 44 50 4b) and the
 * same with 0x71: compilers and assemblers pad with this NOP only with a
 * zero displacement, so the displacement "pDPK"/"qDPK" marks kperfdiff's.
 * Written as bytes so that no assembler picks another encoding.
 */
#if defined(__aarch64__) || defined(__x86_64__)
#define KPD_MARKS 1
#endif
static KPD_UNUSED void kpd_mark(int stop)
{
#if defined(__aarch64__)
	if (stop)
		__asm__ volatile("hint #0x71" ::: "memory");
	else
		__asm__ volatile("hint #0x70" ::: "memory");
#elif defined(__x86_64__)
	if (stop)
		__asm__ volatile(".byte 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x71, 0x44, 0x50, 0x4b" ::: "memory");
	else
		__asm__ volatile(".byte 0x66, 0x0f, 0x1f, 0x84, 0x00, 0x70, 0x44, 0x50, 0x4b" ::: "memory");
#else
	(void)stop;
#endif
}

/*
 * The standard latency measurement: declare ns/op (lower is better),
 * calibrate, warm up, then report --intervals timed batches as ns/op
 * minus overhead_ns. Waits for the start signal first when --sync.
 * Returns the median of the reported values.
 */
static KPD_UNUSED double kpd_latency(kpd_body fn, void *ctx, double overhead_ns)
{
	long n;
	double *v = calloc((size_t)kpd.intervals, sizeof *v), med;
	if (!v)
		kpd_die("calloc");
	if (!kpd.begun)
		kpd_begin("ns/op", "lower");
	if (overhead_ns > 0)
		kpd_overhead(overhead_ns);
	kpd_ready();
	n = kpd_calibrate(fn, ctx, kpd.min_batch_ns);
	for (int i = 0; i < kpd.warmup; i++)
		kpd_time_batch(fn, ctx, n);
	int counting = kpd.count && kpd_count_open() == 0;
	long long counted = 0;
	if (kpd.count)
		kpd_mark(0);
	for (int i = 0; i < kpd.intervals; i++) {
		long long t = kpd_time_batch(fn, ctx, n);
		v[i] = (double)t / (double)n - overhead_ns;
		counted += n;
		kpd_interval(v[i], n, t);
	}
	if (kpd.count) {
		kpd_mark(1);
#if defined(KPD_MARKS)
		kpd_info("marked", "1");
#endif
	}
	if (counting)
		kpd_count_close();
	if (kpd.count)
		kpd_info("counted_ops", "%lld", counted);
	qsort(v, (size_t)kpd.intervals, sizeof *v, kpd_cmp_double);
	med = kpd.intervals % 2 ? v[kpd.intervals / 2] : (v[kpd.intervals / 2 - 1] + v[kpd.intervals / 2]) / 2;
	free(v);
	return med;
}

/* Close the record: total operations and this process's CPU time
 * (including waited-for children). */
static KPD_UNUSED void kpd_end(void)
{
	struct rusage self, kids;
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &kids);
	long long u = (self.ru_utime.tv_sec + kids.ru_utime.tv_sec) * 1000000000LL +
		      (self.ru_utime.tv_usec + kids.ru_utime.tv_usec) * 1000LL;
	long long s = (self.ru_stime.tv_sec + kids.ru_stime.tv_sec) * 1000000000LL +
		      (self.ru_stime.tv_usec + kids.ru_stime.tv_usec) * 1000LL;
	printf("end %lld %lld %lld\n", kpd.batch_ops > kpd.total_ops ? kpd.batch_ops : kpd.total_ops, u, s);
	fflush(stdout);
}

/* A tiny deterministic generator (xorshift64*) for random page orders. */
static KPD_UNUSED uint64_t kpd_rand(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* Read one counter from /proc/vmstat (-1 when absent). */
static KPD_UNUSED long long kpd_vmstat(const char *name)
{
	FILE *f = fopen("/proc/vmstat", "r");
	char key[128];
	long long v;
	if (!f)
		return -1;
	while (fscanf(f, "%127s %lld", key, &v) == 2)
		if (strcmp(key, name) == 0) {
			fclose(f);
			return v;
		}
	fclose(f);
	return -1;
}

/* Whether transparent huge pages can be had here; if not, why (into why). */
static KPD_UNUSED int kpd_thp_available(char *why, size_t n)
{
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
	char buf[128] = "";
	if (!f) {
		snprintf(why, n, "transparent huge pages are not available "
			 "(/sys/kernel/mm/transparent_hugepage/enabled is absent)");
		return 0;
	}
	if (!fgets(buf, sizeof buf, f))
		buf[0] = 0;
	fclose(f);
	if (strstr(buf, "[never]")) {
		snprintf(why, n, "transparent huge pages are disabled "
			 "(/sys/kernel/mm/transparent_hugepage/enabled is [never])");
		return 0;
	}
	return 1;
}

/* AnonHugePages (kB) of the mapping containing addr, from /proc/self/smaps. */
static KPD_UNUSED long kpd_anon_huge_kb(const void *addr)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512];
	int in = 0;
	long kb = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		long v;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (in && sscanf(line, "AnonHugePages: %ld kB", &v) == 1) {
			kb = v;
			break;
		}
	}
	fclose(f);
	return kb;
}

#endif
