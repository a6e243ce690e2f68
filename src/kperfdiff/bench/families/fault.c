/*
 * fault family: page faults of every kind, per page.
 *
 *   fault.file       lmbench lat_pagefault: a MAP_SHARED, PROT_READ mapping
 *                    of a cached file, one byte read per page in a random
 *                    page order; the cost of mmap+munmap alone is measured
 *                    and subtracted (per page). ns per page touched.
 *   fault.anon.4k    anonymous zero-fill, MADV_NOHUGEPAGE: one byte written
 *                    per 4 KB. ns per 4 KB of memory (= per fault).
 *   fault.anon.huge  anonymous zero-fill on a 2 MB-aligned MADV_HUGEPAGE
 *                    region: one byte written per 4 KB. ns per 4 KB of
 *                    memory (one fault serves 512 of them), so the value is
 *                    directly comparable with fault.anon.4k. Reports
 *                    thp_fault_alloc and the mapping's AnonHugePages.
 *   fault.cow        copy-on-write after fork: the parent populates an
 *                    anonymous region (4 KB pages), forks, and the child
 *                    writes one byte per page. ns per page (= per copy).
 *   fault.prot       write-protection fault resolved in the kernel: the
 *                    PTE is read-only (write-protected by a fork whose
 *                    child has exited), the VMA writable, the page has one
 *                    user, so the fault just makes the PTE writable (no
 *                    copy, no signal). ns per page (= per fault). The
 *                    signal-delivering protection fault of lmbench's
 *                    lat_sig prot is signal.prot.
 *
 * The anonymous and COW variants time only the touching loop: the mmap,
 * madvise, fork and munmap of each round are done outside the timed part
 * (lmbench has no such benchmarks; timing the teardown would charge page
 * freeing to the fault).
 */
#include "kpd.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define PAGE 4096UL
#define HUGE_SZ (2UL << 20)

/* ---------------------------------------------------------------- helpers */


static long long minflt(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* An anonymous region of len bytes starting on a 2 MB boundary, with the
 * slack unmapped so that the VMA is exactly the region. */
static char *map_aligned(size_t len)
{
	size_t maplen = len + HUGE_SZ;
	char *m = mmap(NULL, maplen, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p;
	if (m == MAP_FAILED)
		kpd_die("mmap");
	p = (char *)(((uintptr_t)m + HUGE_SZ - 1) & ~(HUGE_SZ - 1));
	if (p > m)
		munmap(m, (size_t)(p - m));
	if (m + maplen > p + len)
		munmap(p + len, (size_t)(m + maplen - (p + len)));
	return p;
}

/*
 * A measurement whose rounds do untimed set-up and tear-down: round() times
 * its own critical part and returns (ns, ops). Each interval accumulates
 * rounds until --min-batch-ns of timed work. Returns the median ns/op.
 */
typedef long long (*round_fn)(void *ctx, long long *ops);

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double split_latency(round_fn fn, void *ctx)
{
	double *v = calloc((size_t)kpd.intervals, sizeof *v);
	double med;
	long long ops;
	if (!v)
		kpd_die("calloc");
	kpd_begin("ns/op", "lower");
	kpd_ready();
	for (int i = 0; i < kpd.warmup; i++)
		fn(ctx, &ops);
	for (int i = 0; i < kpd.intervals; i++) {
		long long ns = 0, n = 0;
		do {
			ns += fn(ctx, &ops);
			n += ops;
		} while (ns < kpd.min_batch_ns);
		v[i] = (double)ns / (double)n;
		kpd_interval(v[i], n, ns);
	}
	qsort(v, (size_t)kpd.intervals, sizeof *v, cmp_dbl);
	med = v[kpd.intervals / 2];
	free(v);
	return med;
}

/* A temporary file of size bytes (unlinked at once, so never left behind)
 * in dir, or the file named by the file= parameter. */
static int open_file(size_t *size, int writable)
{
	const char *file = kpd_param_str("file", NULL);
	const char *dir = kpd_param_str("dir", "/var/tmp");
	char path[4096];
	int fd;
	if (file) {
		struct stat st;
		if ((fd = open(file, writable ? O_RDWR : O_RDONLY)) < 0)
			kpd_fail("cannot open file=%s: %s", file, strerror(errno));
		if (fstat(fd, &st) < 0)
			kpd_die("fstat");
		if ((size_t)st.st_size < *size)
			kpd_fail("file=%s is smaller than size=%zu", file, *size);
		return fd;
	}
	snprintf(path, sizeof path, "%s/kpd-fault-XXXXXX", dir);
	if ((fd = mkstemp(path)) < 0)
		kpd_fail("cannot create a temporary file in dir=%s: %s", dir, strerror(errno));
	unlink(path);
	{
		char buf[65536];
		memset(buf, 'k', sizeof buf);
		for (size_t done = 0; done < *size;) {
			size_t w = *size - done < sizeof buf ? *size - done : sizeof buf;
			ssize_t r = write(fd, buf, w);
			if (r <= 0)
				kpd_die("write of the temporary file");
			done += (size_t)r;
		}
	}
	if (fsync(fd) < 0)
		kpd_die("fsync of the temporary file");
	return fd;
}

static size_t param_size(const char *key, long def, long min)
{
	long v = kpd_param_long(key, def);
	if (v < min)
		kpd_fail("parameter %s=%ld must be at least %ld bytes", key, v, min);
	return (size_t)v & ~(PAGE - 1);
}

/* ------------------------------------------------------------ fault.file */

struct ffile {
	int fd;
	size_t size;
	long npages;
	size_t *off; /* random page order, byte offsets */
	char *where;
	long idx;
	int sum;
};

static void ffile_map(struct ffile *f)
{
	f->where = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0);
	if (f->where == MAP_FAILED)
		kpd_die("mmap of the file");
}

static void body_file(void *c, long n)
{
	struct ffile *f = c;
	for (long i = 0; i < n; i++) {
		if (!f->where)
			ffile_map(f);
		f->sum += *(volatile char *)(f->where + f->off[f->idx]);
		if (++f->idx == f->npages) {
			munmap(f->where, f->size);
			f->where = NULL;
			f->idx = 0;
		}
	}
}

static void body_file_map(void *c, long n)
{
	struct ffile *f = c;
	for (long i = 0; i < n; i++) {
		ffile_map(f);
		munmap(f->where, f->size);
		f->where = NULL;
	}
}

static void run_file(void)
{
	struct ffile f = { 0 };
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	double map_ns;
	long long m0;

	f.size = param_size("size", 16L << 20, 1L << 20);
	f.fd = open_file(&f.size, 0);
	f.npages = (long)(f.size / PAGE);
	f.off = malloc((size_t)f.npages * sizeof *f.off);
	if (!f.off)
		kpd_die("malloc");
	for (long i = 0; i < f.npages; i++)
		f.off[i] = (size_t)i * PAGE;
	for (long i = f.npages - 1; i > 0; i--) {
		long j = (long)(kpd_rand(&seed) % (uint64_t)(i + 1));
		size_t t = f.off[i];
		f.off[i] = f.off[j];
		f.off[j] = t;
	}
	/* Bring the file into the page cache: these are minor faults. */
	ffile_map(&f);
	for (long i = 0; i < f.npages; i++)
		f.sum += f.where[(size_t)i * PAGE];
	munmap(f.where, f.size);
	f.where = NULL;

	map_ns = kpd_median_ns(body_file_map, &f, 5);
	kpd_info("pages", "%ld", f.npages);
	kpd_info("mmap_munmap_ns", "%.1f", map_ns);
	m0 = minflt();
	kpd_latency(body_file, &f, map_ns / (double)f.npages);
	/* Fault-around maps up to fault_around_bytes of cached neighbours
	 * per fault, so there are fewer faults than pages. */
	kpd_info("faults_per_page", "%.3f", (double)(minflt() - m0) / (double)kpd.total_ops);
	if (f.where)
		munmap(f.where, f.size);
	close(f.fd);
}

/* ------------------------------------------------------- fault.anon.* */

struct fanon {
	size_t size;
	int huge;
	int check;
	long huge_kb;
};

static long long round_anon(void *c, long long *ops)
{
	struct fanon *a = c;
	char *p = map_aligned(a->size);
	long long t0, t;
	if (madvise(p, a->size, a->huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) < 0)
		kpd_die(a->huge ? "madvise(MADV_HUGEPAGE)" : "madvise(MADV_NOHUGEPAGE)");
	t0 = kpd_now_ns();
	for (size_t off = 0; off < a->size; off += PAGE)
		*(volatile char *)(p + off) = 1;
	t = kpd_now_ns() - t0;
	if (a->check)
		a->huge_kb = kpd_anon_huge_kb(p);
	munmap(p, a->size);
	*ops = (long long)(a->size / PAGE);
	return t;
}

static void run_anon(int huge)
{
	struct fanon a = { 0 };
	char why[256];
	long long thp0, fb0, m0, ops;

	a.huge = huge;
	a.size = param_size("size", 16L << 20, 2L << 20);
	a.size = (a.size + HUGE_SZ - 1) & ~(HUGE_SZ - 1);
	if (huge && !kpd_thp_available(why, sizeof why))
		kpd_skip("%s", why);
	kpd_info("bytes_per_round", "%zu", a.size);
	kpd_info("op", "4KB");
	thp0 = kpd_vmstat("thp_fault_alloc");
	fb0 = kpd_vmstat("thp_fault_fallback");
	m0 = minflt();
	split_latency(round_anon, &a);
	kpd_info("faults_per_4kb", "%.4f", (double)(minflt() - m0) / (double)kpd.total_ops);
	if (thp0 >= 0)
		kpd_info("thp_fault_alloc", "%lld", kpd_vmstat("thp_fault_alloc") - thp0);
	if (fb0 >= 0)
		kpd_info("thp_fault_fallback", "%lld", kpd_vmstat("thp_fault_fallback") - fb0);
	/* One more (untimed) round that looks at the mapping before unmapping. */
	a.check = 1;
	round_anon(&a, &ops);
	kpd_info("anon_huge_kb", "%ld", a.huge_kb);
}

/* ------------------------------------------------------------ fault.cow */

struct fcow {
	char *p;
	size_t size;
};

/* The region of the cow and prot rounds: size= bytes (16 MB) of private
 * anonymous memory in 4 KB pages, every page present and written once. */
static void populate_4k(struct fcow *w)
{
	w->size = param_size("size", 16L << 20, 1L << 20);
	w->p = map_aligned(w->size);
	if (madvise(w->p, w->size, MADV_NOHUGEPAGE) < 0)
		kpd_die("madvise(MADV_NOHUGEPAGE)");
	for (size_t off = 0; off < w->size; off += PAGE)
		w->p[off] = 1;
	kpd_info("bytes_per_round", "%zu", w->size);
}

static long long round_cow(void *c, long long *ops)
{
	struct fcow *w = c;
	int pfd[2];
	long long ns = -1;
	pid_t pid;
	int st;

	if (pipe(pfd) < 0)
		kpd_die("pipe");
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		kpd_die("fork");
	if (pid == 0) {
		long long t0 = kpd_now_ns(), t;
		for (size_t off = 0; off < w->size; off += PAGE)
			*(volatile char *)(w->p + off) = 2;
		t = kpd_now_ns() - t0;
		if (write(pfd[1], &t, sizeof t) != sizeof t)
			_exit(1);
		_exit(0);
	}
	close(pfd[1]);
	if (read(pfd[0], &ns, sizeof ns) != sizeof ns)
		ns = -1;
	close(pfd[0]);
	if (waitpid(pid, &st, 0) < 0)
		kpd_die("waitpid");
	if (ns < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		kpd_fail("the copy-on-write child failed");
	*ops = (long long)(w->size / PAGE);
	return ns;
}

static void run_cow(void)
{
	struct fcow w;
	populate_4k(&w);
	split_latency(round_cow, &w);
	munmap(w.p, w.size);
}

/* ----------------------------------------------------------- fault.prot */

/*
 * A write-protection fault the kernel resolves by itself: the PTE is
 * present and read-only while the VMA is writable, and the page has one
 * user, so the fault only makes the PTE writable (do_wp_page reusing the
 * page: no allocation, no copy, no signal). Each round sets this up by
 * forking a child that exits at once: fork write-protects every PTE of the
 * private region, and when the child is gone the parent is again the only
 * user. The untimed part is fork + exit + wait; the timed part is one
 * write per page. (The user-visible protection fault, SIGSEGV delivered and
 * retried, is lmbench's lat_sig prot: see signal.prot.)
 */
static long long round_prot(void *c, long long *ops)
{
	struct fcow *w = c;
	long long t0, t;
	int st;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		kpd_die("fork");
	if (pid == 0)
		_exit(0);
	if (waitpid(pid, &st, 0) < 0)
		kpd_die("waitpid");
	t0 = kpd_now_ns();
	for (size_t off = 0; off < w->size; off += PAGE)
		*(volatile char *)(w->p + off) = 3;
	t = kpd_now_ns() - t0;
	*ops = (long long)(w->size / PAGE);
	return t;
}

static void run_prot(void)
{
	struct fcow w;
	long long m0;
	populate_4k(&w);
	m0 = minflt();
	split_latency(round_prot, &w);
	kpd_info("faults_per_page", "%.3f", (double)(minflt() - m0) / (double)kpd.total_ops);
	munmap(w.p, w.size);
}

int main(int argc, char **argv)
{
	kpd_init(argc, argv);
	if (strcmp(kpd.bench, "fault.file") == 0)
		run_file();
	else if (strcmp(kpd.bench, "fault.anon.4k") == 0)
		run_anon(0);
	else if (strcmp(kpd.bench, "fault.anon.huge") == 0)
		run_anon(1);
	else if (strcmp(kpd.bench, "fault.cow") == 0)
		run_cow();
	else if (strcmp(kpd.bench, "fault.prot") == 0)
		run_prot();
	else
		kpd_fail("unknown benchmark %s in family fault", kpd.bench);
	kpd_end();
	return 0;
}
