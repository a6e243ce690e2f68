/*
 * gups family: HPCC RandomAccess (GUPS), single process, with 4 KB pages
 * (gups.4k, MADV_NOHUGEPAGE) or transparent huge pages (gups.huge,
 * MADV_HUGEPAGE on a 2 MB-aligned table).
 *
 * Method (HPCC RandomAccess, serial version):
 *   - a table of 2^log2_words 64-bit words, Table[i] = i (the first touch,
 *     timed apart and reported as "info first_touch_ns");
 *   - NUPDATE = 4 x table size updates Table[ran & (size-1)] ^= ran, where
 *     ran follows the LFSR x <- (x << 1) ^ (x < 0 ? POLY : 0), POLY = 0x7,
 *     run as 128 interleaved streams, stream j starting at
 *     starts(NUPDATE/128 * j) (HPCC's starts() jumps ahead in the sequence);
 *   - GUP/s = NUPDATE / 1e9 / seconds.
 * One interval is one full pass of NUPDATE updates (--min-batch-ns is not
 * used: the pass length is set by log2_words); at most one warm-up pass.
 * Default log2_words = 23 (64 MB), about 0.35 s per pass on a 2020s x86.
 *
 * Verification (HPCC's): XOR is its own inverse, so re-running the same
 * updates restores Table[i] = i. Every pass XORs the same sequence; after
 * the timed passes we make the count of 128-stream passes odd (one more
 * untimed pass when needed), then apply HPCC's serial generator once, which
 * undoes them, and count entries with Table[i] != i. More than 1% of the
 * table is an error (HPCC's threshold; a serial run should give 0).
 */
#include "kpd.h"
#include <sys/mman.h>

#define POLY 0x0000000000000007ULL
#define PERIOD 1317624576693539401LL
#define HUGE_SZ (2UL << 20)

static uint64_t lfsr_next(uint64_t x)
{
	return (x << 1) ^ ((int64_t)x < 0 ? POLY : 0);
}

/* HPCC starts(n): the n-th value of the LFSR sequence, by squaring. */
static uint64_t hpcc_starts(int64_t n)
{
	uint64_t m2[64], temp, ran;
	int i, j;

	while (n < 0)
		n += PERIOD;
	while (n > PERIOD)
		n -= PERIOD;
	if (n == 0)
		return 0x1;
	temp = 0x1;
	for (i = 0; i < 64; i++) {
		m2[i] = temp;
		temp = lfsr_next(temp);
		temp = lfsr_next(temp);
	}
	for (i = 62; i >= 0; i--)
		if ((n >> i) & 1)
			break;
	ran = 0x2;
	while (i > 0) {
		temp = 0;
		for (j = 0; j < 64; j++)
			if ((ran >> j) & 1)
				temp ^= m2[j];
		ran = temp;
		i -= 1;
		if ((n >> i) & 1)
			ran = lfsr_next(ran);
	}
	return ran;
}

struct gups {
	uint64_t *table;
	uint64_t size;    /* words */
	uint64_t nupdate; /* 4 x size */
	size_t bytes;
	void *map;
	size_t maplen;
};

/* One HPCC pass: 128 interleaved streams. */
static void gups_pass(struct gups *g)
{
	uint64_t ran[128];
	uint64_t mask = g->size - 1;
	uint64_t *t = g->table;
	int64_t per = (int64_t)(g->nupdate / 128);

	for (int j = 0; j < 128; j++)
		ran[j] = hpcc_starts(per * j);
	for (int64_t i = 0; i < per; i++)
		for (int j = 0; j < 128; j++) {
			ran[j] = lfsr_next(ran[j]);
			t[ran[j] & mask] ^= ran[j];
		}
}

/* HPCC's serial verification pass. */
static void gups_serial(struct gups *g)
{
	uint64_t ran = 0x1, mask = g->size - 1;
	for (uint64_t i = 0; i < g->nupdate; i++) {
		ran = lfsr_next(ran);
		g->table[ran & mask] ^= ran;
	}
}


int main(int argc, char **argv)
{
	struct gups g;
	int huge;
	long log2w;
	char why[256];
	long long t0, thp0, fb0;
	int passes = 0;

	kpd_init(argc, argv);
	/* gups.4k[.suffix] and gups.huge[.suffix]: the suffix names a
	 * catalogue variant (other parameters), e.g. gups.4k.2p27. */
	if (strcmp(kpd.bench, "gups.4k") == 0 || strncmp(kpd.bench, "gups.4k.", 8) == 0)
		huge = 0;
	else if (strcmp(kpd.bench, "gups.huge") == 0 ||
		 strncmp(kpd.bench, "gups.huge.", 10) == 0)
		huge = 1;
	else
		kpd_fail("unknown benchmark %s in family gups", kpd.bench);

	log2w = kpd_param_long("log2_words", 23);
	if (log2w < 10 || log2w > 40)
		kpd_fail("parameter log2_words=%ld must be between 10 and 40", log2w);
	if (huge && !kpd_thp_available(why, sizeof why))
		kpd_skip("%s", why);

	g.size = 1ULL << log2w;
	g.nupdate = 4 * g.size;
	g.bytes = g.size * sizeof(uint64_t);
	{
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
		if (pages > 0 && psz > 0 && g.bytes > (uint64_t)pages * (uint64_t)psz / 4 * 3)
			kpd_fail("log2_words=%ld needs a %llu MB table, more than 3/4 of "
				 "this machine's memory", log2w,
				 (unsigned long long)(g.bytes >> 20));
	}
	/* Reserve 2 MB more so the table can start on a 2 MB boundary. */
	g.maplen = g.bytes + HUGE_SZ;
	g.map = mmap(NULL, g.maplen, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (g.map == MAP_FAILED)
		kpd_die("mmap of the table");
	g.table = (uint64_t *)(((uintptr_t)g.map + HUGE_SZ - 1) & ~(HUGE_SZ - 1));
	if (madvise(g.table, g.bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) < 0) {
		if (huge)
			kpd_skip("madvise(MADV_HUGEPAGE) failed: %s", strerror(errno));
		kpd_die("madvise(MADV_NOHUGEPAGE)");
	}

	kpd_begin("GUP/s", "higher");
	kpd_info("table_words", "%llu", (unsigned long long)g.size);
	kpd_info("table_bytes", "%llu", (unsigned long long)g.bytes);
	kpd_info("updates_per_pass", "%llu", (unsigned long long)g.nupdate);

	thp0 = kpd_vmstat("thp_fault_alloc");
	fb0 = kpd_vmstat("thp_fault_fallback");
	t0 = kpd_now_ns();
	for (uint64_t i = 0; i < g.size; i++)
		g.table[i] = i;
	kpd_info("first_touch_ns", "%lld", kpd_now_ns() - t0);
	if (thp0 >= 0)
		kpd_info("thp_fault_alloc", "%lld", kpd_vmstat("thp_fault_alloc") - thp0);
	if (fb0 >= 0)
		kpd_info("thp_fault_fallback", "%lld", kpd_vmstat("thp_fault_fallback") - fb0);
	kpd_info("anon_huge_kb", "%ld", kpd_anon_huge_kb(g.table));

	kpd_ready();
	/* At most one warm-up pass: the first touch has already faulted the
	 * table in, and a pass lasts long. */
	for (int i = 0; i < kpd.warmup && i < 1; i++, passes++)
		gups_pass(&g);
	for (int i = 0; i < kpd.intervals; i++, passes++) {
		long long t = kpd_now_ns();
		gups_pass(&g);
		t = kpd_now_ns() - t;
		kpd_interval((double)g.nupdate / 1e9 / ((double)(t > 0 ? t : 1) / 1e9),
			     (long long)g.nupdate, t);
	}

	/* Verification: odd number of 128-stream passes, then the serial
	 * generator undoes them all. */
	if (passes % 2 == 0)
		gups_pass(&g);
	gups_serial(&g);
	{
		uint64_t errors = 0;
		for (uint64_t i = 0; i < g.size; i++)
			if (g.table[i] != i)
				errors++;
		kpd_info("verify_errors", "%llu", (unsigned long long)errors);
		if (errors > g.size / 100)
			kpd_fail("verification failed: %llu of %llu table entries wrong "
				 "(more than 1%%)", (unsigned long long)errors,
				 (unsigned long long)g.size);
	}
	munmap(g.map, g.maplen);
	kpd_end();
	return 0;
}
