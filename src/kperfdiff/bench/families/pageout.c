/*
 * pageout family: the loop of the arm64 batched-TLB-shootdown study
 * (Linux 6.6, 2023): read one byte per page of a 1 MiB shared mapping,
 * then madvise(MADV_PAGEOUT) the whole mapping, and again. One op = one
 * loop (touch every page + MADV_PAGEOUT); "info ns_per_page" is the median
 * divided by the pages of the mapping.
 *
 *   pageout.anon   MAP_SHARED|MAP_ANONYMOUS (shmem) memory: every loop
 *                  swaps the pages out and faults them back in from swap.
 *                  Needs active swap (the study used zram).
 *   pageout.file   MAP_SHARED mapping of a temporary file (dir=, default
 *                  /var/tmp, must not be tmpfs/ramfs): MADV_PAGEOUT drops
 *                  the clean page-cache pages, the next read faults them
 *                  back from the file system. Needs no swap.
 *
 * Params: size= (default 1m, as the study), dir= (pageout.file).
 * Counters: pswpout, pswpin, pgpgout, pgpgin, pgmajfault deltas over the
 * timed run and per loop, so a run where the kernel did not page out is
 * visible (pswpout/pgpgin per loop near 0).
 */
#include "kpd.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#define PAGE 4096UL
#define TMPFS_MAGIC_ 0x01021994
#define RAMFS_MAGIC_ 0x858458f6

struct po {
	char *p;
	size_t len;
	unsigned long sum;
	long long loops; /* every loop done, calibration included */
};

static void body(void *c, long n)
{
	struct po *x = c;
	unsigned long sum = 0;
	for (long i = 0; i < n; i++) {
		for (size_t off = 0; off < x->len; off += PAGE)
			sum += *(volatile char *)(x->p + off);
		if (madvise(x->p, x->len, MADV_PAGEOUT) < 0)
			kpd_die("madvise(MADV_PAGEOUT)");
	}
	x->sum += sum;
	x->loops += n;
}

static int swap_active(void)
{
	FILE *f = fopen("/proc/swaps", "r");
	char line[512];
	int n = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof line, f))
		n++;
	fclose(f);
	return n > 1; /* first line is the header */
}

static const char *counters[] = { "pswpout", "pswpin", "pgpgout", "pgpgin", "pgmajfault" };
#define NC (sizeof counters / sizeof counters[0])

int main(int argc, char **argv)
{
	struct po x = { 0 };
	int file;
	long size;
	int fd = -1;
	long long c0[NC], loops0;
	double med;
	long pages;

	kpd_init(argc, argv);
	if (strcmp(kpd.bench, "pageout.anon") == 0)
		file = 0;
	else if (strcmp(kpd.bench, "pageout.file") == 0)
		file = 1;
	else
		kpd_fail("unknown benchmark %s in family pageout", kpd.bench);
	size = kpd_param_long("size", 1L << 20);
	if (size < (long)PAGE || size > (1L << 34))
		kpd_fail("parameter size=%ld must be between 4096 and 16g", size);
	x.len = (size_t)size & ~(PAGE - 1);
	pages = (long)(x.len / PAGE);

	if (!file) {
		if (!swap_active())
			kpd_skip("no active swap (/proc/swaps is empty): MADV_PAGEOUT "
				 "cannot page out anonymous memory");
		x.p = mmap(NULL, x.len, PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		if (x.p == MAP_FAILED)
			kpd_die("mmap");
		/* Distinct, compressible contents: not zero-filled pages,
		 * which zram would store without compressing. */
		for (long i = 0; i < pages; i++)
			memcpy(x.p + (size_t)i * PAGE, &i, sizeof i);
	} else {
		const char *dir = kpd_param_str("dir", "/var/tmp");
		char path[4096];
		struct statfs sfs;
		char buf[PAGE];
		if (statfs(dir, &sfs) < 0)
			kpd_fail("cannot statfs dir=%s: %s", dir, strerror(errno));
		if (sfs.f_type == TMPFS_MAGIC_ || sfs.f_type == RAMFS_MAGIC_)
			kpd_skip("dir=%s is on tmpfs/ramfs: its pages cannot be "
				 "paged out to a file system; give dir= on a disk", dir);
		snprintf(path, sizeof path, "%s/kpd-pageout-XXXXXX", dir);
		if ((fd = mkstemp(path)) < 0)
			kpd_fail("cannot create a temporary file in dir=%s: %s", dir,
				 strerror(errno));
		unlink(path);
		for (long i = 0; i < pages; i++) {
			memset(buf, 'p', sizeof buf);
			memcpy(buf, &i, sizeof i);
			if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
				kpd_die("write of the temporary file");
		}
		if (fsync(fd) < 0)
			kpd_die("fsync of the temporary file");
		x.p = mmap(NULL, x.len, PROT_READ, MAP_SHARED, fd, 0);
		if (x.p == MAP_FAILED)
			kpd_die("mmap of the temporary file");
	}
	if (madvise(x.p, x.len, MADV_PAGEOUT) < 0) {
		if (errno == EINVAL)
			kpd_skip("madvise(MADV_PAGEOUT) is not supported by this "
				 "kernel (EINVAL; it needs Linux 5.4 or later)");
		kpd_die("madvise(MADV_PAGEOUT)");
	}
	kpd_info("pages_per_op", "%ld", pages);

	for (size_t k = 0; k < NC; k++)
		c0[k] = kpd_vmstat(counters[k]);
	loops0 = x.loops;
	med = kpd_latency(body, &x, 0);
	kpd_info("ns_per_page", "%.1f", med / (double)pages);
	{
		/* The deltas cover calibration and warm-up too, so the per-loop
		 * figures divide by every loop done. */
		long long loops = x.loops - loops0;
		char key[64];
		kpd_info("loops", "%lld", loops);
		for (size_t k = 0; k < NC; k++) {
			long long v = kpd_vmstat(counters[k]);
			if (c0[k] < 0 || v < 0)
				continue;
			kpd_info(counters[k], "%lld", v - c0[k]);
			snprintf(key, sizeof key, "%s_per_loop", counters[k]);
			kpd_info(key, "%.2f", (double)(v - c0[k]) / (double)(loops > 0 ? loops : 1));
		}
	}
	munmap(x.p, x.len);
	if (fd >= 0)
		close(fd);
	kpd_end();
	return 0;
}
