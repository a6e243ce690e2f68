/*
 * mmap family: lmbench lat_mmap. One op = mmap() of a file (MAP_SHARED,
 * read+write), a one-byte write every 16 KB of its first tenth, munmap().
 * ns per mapping. The size comes from the benchmark name (mmap.1m,
 * mmap.16m, mmap.64m, ...) or the size= parameter; the file is file=
 * (at least size bytes, opened read+write: it is written to) or a
 * temporary file in dir= (default /var/tmp) created for the run and
 * unlinked at once, so it is never left behind.
 */
#include "kpd.h"
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define PSIZE (16UL << 10) /* lmbench: one touch every 16 KB */
#define FRACTION 10        /* of the first tenth of the mapping */

struct mm {
	int fd;
	size_t size;
	char c;
};

static void body(void *c, long n)
{
	struct mm *m = c;
	for (long i = 0; i < n; i++) {
		char *where = mmap(NULL, m->size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
		char *end;
		if (where == MAP_FAILED)
			kpd_die("mmap");
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
	kpd_info("size", "%zu", m.size);
	kpd_info("touches_per_op", "%zu", (m.size / FRACTION + PSIZE - 1) / PSIZE);
	kpd_latency(body, &m, 0);
	close(m.fd);
	kpd_end();
	return 0;
}
