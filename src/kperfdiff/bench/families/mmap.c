/*
 * mmap family: lmbench lat_mmap. One op = mmap() of a file (MAP_SHARED,
 * read+write), a one-byte write every 16 KB of its first tenth, munmap().
 * ns per mapping. The size comes from the benchmark name (mmap.1m,
 * mmap.16m, mmap.64m, ...) or the size= parameter; the file is file=
 * (at least size bytes, opened read+write: it is written to) or a
 * temporary file in dir= (default /var/tmp) created for the run and
 * unlinked at once, so it is never left behind.
 *
 * Every mapping is placed at the same address: pmd_offset= (default 0)
 * bytes past a 2 MB boundary. Where the kernel would put it depends on
 * address-space randomisation, and the cost does too: a mapping smaller
 * than 2 MB that crosses a 2 MB boundary is faulted one page at a time
 * (each write fault on ext4 runs block_page_mkwrite over the whole large
 * folio), while one inside a 2 MB region gets the whole folio mapped by
 * its first fault (1 MB on ext4, Linux 6.18: 54 vs 19 us per mapping).
 */
#include "kpd.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define PSIZE (16UL << 10) /* lmbench: one touch every 16 KB */
#define FRACTION 10        /* of the first tenth of the mapping */

#define PMD (2UL << 20)

struct mm {
	int fd;
	size_t size;
	char c;
	char *at;   /* where every mapping goes */
};

static void body(void *c, long n)
{
	struct mm *m = c;
	for (long i = 0; i < n; i++) {
		char *where = mmap(m->at, m->size, PROT_READ | PROT_WRITE,
				   MAP_SHARED | MAP_FIXED_NOREPLACE, m->fd, 0);
		char *end;
		if (where == MAP_FAILED)
			kpd_die("mmap");
		if (where != m->at)  /* an old kernel taking the flag as a hint */
			kpd_fail("mmap placed the mapping at %p, not at %p", where, m->at);
		end = where + m->size / FRACTION;
		for (char *p = where; p < end; p += PSIZE)
			*(volatile char *)p = m->c;
		munmap(where, m->size);
	}
}

/* Default size from a name like mmap.16m: the last component. */
static long size_from_name(const char *name)
{
	const char *dot = strrchr(name, '.');
	char *end;
	long v;
	if (!dot)
		return -1;
	v = strtol(dot + 1, &end, 10);
	if (end == dot + 1)
		return -1;
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	else if (*end == 'g' || *end == 'G')
		v <<= 30, end++;
	return *end ? -1 : v;
}

int main(int argc, char **argv)
{
	struct mm m = { -1, 0, 0 };
	const char *file, *dir;
	long size;

	kpd_init(argc, argv);
	if (strncmp(kpd.bench, "mmap.", 5) != 0 ||
	    ((size = size_from_name(kpd.bench)) < 0 && !kpd_param_str("size", NULL)))
		kpd_fail("unknown benchmark %s in family mmap (expected mmap.<size>, "
			 "e.g. mmap.16m, or a size= parameter)", kpd.bench);
	size = kpd_param_long("size", size);
	/* lmbench refuses sizes below two strides of 10 x 16 KB. */
	if (size < (long)(2 * FRACTION * PSIZE) || size > (1L << 36))
		kpd_fail("size=%ld must be between 320k and 64g", size);
	m.size = (size_t)size;
	m.c = (char)(size & 0xff);

	file = kpd_param_str("file", NULL);
	dir = kpd_param_str("dir", "/var/tmp");
	if (file) {
		struct stat st;
		if ((m.fd = open(file, O_RDWR)) < 0)
			kpd_fail("cannot open file=%s for reading and writing: %s", file,
				 strerror(errno));
		if (fstat(m.fd, &st) < 0)
			kpd_die("fstat");
		if ((size_t)st.st_size < m.size)
			kpd_fail("file=%s (%lld bytes) is smaller than size=%ld", file,
				 (long long)st.st_size, size);
	} else {
		char path[4096], buf[65536];
		snprintf(path, sizeof path, "%s/kpd-mmap-XXXXXX", dir);
		if ((m.fd = mkstemp(path)) < 0)
			kpd_fail("cannot create a temporary file in dir=%s: %s", dir,
				 strerror(errno));
		unlink(path);
		memset(buf, 'm', sizeof buf);
		for (size_t done = 0; done < m.size;) {
			size_t w = m.size - done < sizeof buf ? m.size - done : sizeof buf;
			ssize_t r = write(m.fd, buf, w);
			if (r <= 0)
				kpd_die("write of the temporary file");
			done += (size_t)r;
		}
		if (fsync(m.fd) < 0)
			kpd_die("fsync of the temporary file");
	}
	{
		/* An address range that is free, pmd_offset bytes past a 2 MB
		 * boundary: reserve size + 4 MB, note the spot, release it. */
		long off = kpd_param_long("pmd_offset", 0);
		size_t span = m.size + 2 * PMD;
		char *r;
		if (off < 0 || off >= (long)PMD || off % 4096)
			kpd_fail("pmd_offset=%ld must be a multiple of 4k below 2m", off);
		r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (r == MAP_FAILED)
			kpd_die("mmap of the address reservation");
		m.at = (char *)((((uintptr_t)r + PMD - 1) & ~(uintptr_t)(PMD - 1)) + (uintptr_t)off);
		munmap(r, span);
		kpd_info("pmd_offset", "%lu", (unsigned long)((uintptr_t)m.at & (PMD - 1)));
	}
	kpd_info("size", "%zu", m.size);
	kpd_info("touches_per_op", "%zu", (m.size / FRACTION + PSIZE - 1) / PSIZE);
	kpd_latency(body, &m, 0);
	close(m.fd);
	kpd_end();
	return 0;
}
