/*
 * ctx family: context switch latency, lmbench lat_ctx.
 *
 * A ring of procs processes (this one and procs-1 children) joined by
 * pipes passes a 4-byte token round; each process, on receiving it, sums
 * its own private size-byte array (its "working set") and passes it on.
 * One trip round the ring is procs switches. The overhead - one pipe write
 * + read + the sum, all in this process, cycling over procs pipes like
 * lmbench - is measured first and subtracted:
 *
 *     value = trip_ns / procs - overhead_ns        (ns per context switch)
 *
 * Names ctx.<procs>p.<size>k give the defaults; params procs= and size=
 * override them. cpus= places the ring:
 *   same  (default) every member, and the overhead measurement, on one CPU
 *         (the first this process may use): every hop is a switch there;
 *   split members alternate between two CPUs (0, 2, 4... on the first,
 *         1, 3, 5... on the second): every hop of an even ring is a
 *         cross-CPU wake-up; skipped with one CPU;
 *   any   no pinning, as lmbench: the scheduler spreads the ring, a hop may
 *         be either kind, and on a small SMP machine the result swings
 *         between the two from run to run (measured here: 7.6 and 2.6 us
 *         in one run for ctx.2p.16k).
 * pin=1 and pin=0, the older spelling, mean same and any. Children die
 * with the parent (PR_SET_PDEATHSIG) and leave
 * when their pipe closes, so none is ever left behind.
 */
#include "kpd.h"
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define MAXPROCS 1024

struct ring {
	int procs;
	long size; /* bytes summed per hop */
	int (*p)[2]; /* p[i]: from member i to member i+1 (mod procs) */
	pid_t *pids;
	int *data;
	int opipe; /* overhead: pipe index cycling like lmbench */
};

static volatile int sink;

/* Sum size bytes as ints (lmbench's sumit reads every int). */
static int sumit(const int *d, long size)
{
	int sum = 0;
	long n = size / (long)sizeof(int);
	for (long i = 0; i < n; i++)
		sum += d[i];
	return sum;
}

static int *working_set(long size)
{
	int *d;
	if (size <= 0)
		return NULL;
	d = malloc((size_t)size);
	if (!d)
		kpd_die("malloc");
	memset(d, 0, (size_t)size);
	return d;
}

static void xwrite(int fd, int v)
{
	if (write(fd, &v, sizeof v) != sizeof v)
		kpd_die("write on pipe");
}

static int xread(int fd)
{
	int v;
	ssize_t r = read(fd, &v, sizeof v);
	if (r != sizeof v) {
		if (r == 0)
			kpd_fail("a ring process went away");
		kpd_die("read on pipe");
	}
	return v;
}

static void pin_to(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) < 0)
		kpd_fail("cannot pin to CPU %d: %s", cpu, strerror(errno));
}

/* Member i (>0) of the ring: read from p[i-1], sum, write to p[i]. */
static void member(struct ring *r, int i)
{
	int *data = working_set(r->size);
	int rd = r->p[i - 1][0], wr = r->p[i][1];
	int v, sum = 0;
	for (;;) {
		if (read(rd, &v, sizeof v) != sizeof v)
			break; /* EOF: the ring is being torn down */
		sum += sumit(data, r->size);
		if (write(wr, &v, sizeof v) != sizeof v)
			break;
	}
	sink = sum;
	_exit(0);
}

/* Overhead: the same pipe traffic and sum without switching. */
static void body_overhead(void *c, long n)
{
	struct ring *r = c;
	int sum = 0;
	for (long i = 0; i < n; i++) {
		xwrite(r->p[r->opipe][1], 1);
		(void)xread(r->p[r->opipe][0]);
		if (++r->opipe == r->procs)
			r->opipe = 0;
		sum += sumit(r->data, r->size);
	}
	sink = sum;
}

/* n trips round the ring. */
static void body_ring(void *c, long n)
{
	struct ring *r = c;
	int sum = 0;
	for (long i = 0; i < n; i++) {
		xwrite(r->p[0][1], 1);
		(void)xread(r->p[r->procs - 1][0]);
		sum += sumit(r->data, r->size);
	}
	sink = sum;
}

/* The least-disturbed ns/op of fn over reps calibrated batches: the
 * overhead is a floor, and a noisy overhead batch would make the switch
 * time look smaller (even negative). lmbench takes the best of its runs too. */
static double min_ns(kpd_body fn, void *ctx, int reps)
{
	long n = kpd_calibrate(fn, ctx, kpd.min_batch_ns);
	double best = -1;
	for (int i = 0; i < reps; i++) {
		double v = (double)kpd_time_batch(fn, ctx, n) / (double)n;
		if (best < 0 || v < best)
			best = v;
	}
	return best;
}

static void parse_name(const char *name, long *procs, long *kb)
{
	int np, nk;
	char tail;
	if (sscanf(name, "ctx.%dp.%dk%c", &np, &nk, &tail) == 2) {
		*procs = np;
		*kb = nk;
	}
}

int main(int argc, char **argv)
{
	struct ring r;
	long procs = -1, kb = -1, size;
	int cpu[2] = { -1, -1 }; /* member i runs on cpu[i % 2]; -1: not pinned */
	const char *cpus;
	double ovh;
	long n;
	pid_t parent = getpid();

	kpd_init(argc, argv);
	if (strncmp(kpd.bench, "ctx.", 4) != 0)
		kpd_fail("unknown benchmark %s in family ctx", kpd.bench);
	parse_name(kpd.bench, &procs, &kb);
	procs = kpd_param_long("procs", procs);
	size = kpd_param_long("size", kb < 0 ? -1 : kb << 10);
	if (procs < 0 || size < 0)
		kpd_fail("benchmark %s: give procs= and size= (or a name like ctx.2p.16k)",
			 kpd.bench);
	if (procs < 2 || procs > MAXPROCS)
		kpd_fail("parameter procs=%ld must be between 2 and %d", procs, MAXPROCS);
	if (size > (1L << 30) || size % (long)sizeof(int))
		kpd_fail("parameter size=%ld must be a multiple of 4 up to 1g", size);

	cpus = kpd_param_str("cpus", NULL);
	if (!cpus) {
		long pin = kpd_param_long("pin", 1);
		if (pin != 0 && pin != 1)
			kpd_fail("parameter pin=%ld must be 0 or 1", pin);
		cpus = pin ? "same" : "any";
	}
	if (strcmp(cpus, "same") == 0 || strcmp(cpus, "split") == 0) {
		cpu_set_t set;
		if (sched_getaffinity(0, sizeof set, &set) < 0)
			kpd_die("sched_getaffinity");
		for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
			if (CPU_ISSET(c, &set))
				cpu[k++] = c;
		if (strcmp(cpus, "same") == 0)
			cpu[1] = cpu[0];
		else if (cpu[1] < 0)
			kpd_skip("cpus=split needs two CPUs, this process may use one");
		pin_to(cpu[0]);
		kpd_info("cpus", "%s %d %d", cpus, cpu[0], cpu[1]);
	} else if (strcmp(cpus, "any") == 0)
		kpd_info("cpus", "any -1 -1");
	else
		kpd_fail("parameter cpus=%s must be same, split or any", cpus);

	r.procs = (int)procs;
	r.size = size;
	r.opipe = 0;
	r.p = calloc((size_t)procs, sizeof *r.p);
	r.pids = calloc((size_t)procs, sizeof *r.pids);
	if (!r.p || !r.pids)
		kpd_die("calloc");
	for (int i = 0; i < r.procs; i++)
		if (pipe(r.p[i]) < 0)
			kpd_die("pipe");
	r.data = working_set(size);

	kpd_begin("ns/op", "lower");
	kpd_info("procs", "%d", r.procs);
	kpd_info("size", "%ld", size);
	ovh = min_ns(body_overhead, &r, 5);
	kpd_overhead(ovh);

	fflush(stdout);
	for (int i = 1; i < r.procs; i++) {
		pid_t pid = fork();
		if (pid < 0) {
			int e = errno;
			for (int j = 0; j < r.procs; j++)
				close(r.p[j][1]);
			for (int j = 1; j < i; j++)
				waitpid(r.pids[j], NULL, 0);
			errno = e;
			kpd_die("fork");
		}
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			if (getppid() != parent)
				_exit(0);
			/* Keep only this member's ends open. */
			for (int j = 0; j < r.procs; j++) {
				if (j != i - 1)
					close(r.p[j][0]);
				if (j != i)
					close(r.p[j][1]);
			}
			free(r.data);
			if (cpu[i % 2] != cpu[0])
				pin_to(cpu[i % 2]);
			member(&r, i);
		}
		r.pids[i] = pid;
	}
	/* The parent keeps p[0] write end and p[procs-1] read end. */
	for (int j = 0; j < r.procs; j++) {
		if (j != r.procs - 1)
			close(r.p[j][0]);
		if (j != 0)
			close(r.p[j][1]);
	}
	/* One trip to make sure everyone is up (lmbench does the same). */
	body_ring(&r, 1);

	kpd_ready();
	n = kpd_calibrate(body_ring, &r, kpd.min_batch_ns);
	for (int i = 0; i < kpd.warmup; i++)
		kpd_time_batch(body_ring, &r, n);
	for (int i = 0; i < kpd.intervals; i++) {
		long long t = kpd_time_batch(body_ring, &r, n);
		kpd_interval((double)t / (double)n / (double)r.procs - ovh,
			     (long long)n * r.procs, t);
	}

	/* Tear down: EOF travels round the ring. */
	close(r.p[0][1]);
	close(r.p[r.procs - 1][0]);
	for (int i = 1; i < r.procs; i++)
		waitpid(r.pids[i], NULL, 0);
	kpd_end();
	return 0;
}
