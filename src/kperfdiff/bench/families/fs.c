/*
 * fs family: file creation and deletion, per file, after lmbench's lat_fs.
 *
 *   fs.create.0k   creat() + close() of a new empty file
 *   fs.delete.0k   unlink() of an empty file
 *   fs.create.10k  creat() + write() of 10 KB + close() of a new file
 *   fs.delete.10k  unlink() of a 10 KB file
 *
 * As in lmbench, a batch of n files is spread over fresh subdirectories of
 * at most 100 files each (param per_dir=), names are made before timing,
 * and nothing is synced. Only the n creations (or the n deletions) are
 * timed: the subdirectories, the files a delete batch removes, and the
 * clean-up after a create batch are made outside the timed part, so this
 * family has its own batch loop (calibration, warm-up and intervals as
 * kpd_latency). As lmbench's benchmp, every batch is sized from the one
 * before to last about --min-batch-ns (fs_resize): on ext4 without a
 * journal a create scans past every inode deleted in the last 30 s to
 * 5 min, so a file costs more after each batch, and batches of the size
 * calibrated at the start grew to seconds (and deleted ever more files). Everything lives in a fresh directory kpd-fs-XXXXXX made
 * inside dir= (default /tmp) and removed at the end, also after an error.
 * The parameter size= overrides the file size.
 */
#include "kpd.h"
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#define FS_NAME_MAX 48 /* "/d%ld/%ld" relative names */

struct fs_ctx {
	char root[PATH_MAX];
	int rootfd;        /* names are opened relative to the root */
	long size;
	long per_dir;
	int delete;        /* 0: time creation, 1: time deletion */
	char *names;       /* cap names of FS_NAME_MAX bytes */
	long cap;
	char *buf;         /* the file contents */
};

static char fs_cleanup_root[PATH_MAX];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* Remove the benchmark's directory tree (atexit: runs after kpd_fail). */
static void fs_cleanup(void)
{
	if (fs_cleanup_root[0]) {
		nftw(fs_cleanup_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
		fs_cleanup_root[0] = '\0';
	}
}

static const char *name_of(struct fs_ctx *x, long i)
{
	return x->names + (size_t)i * FS_NAME_MAX;
}

static void make_names(struct fs_ctx *x, long n)
{
	if (n <= x->cap)
		return;
	char *p = realloc(x->names, (size_t)n * FS_NAME_MAX);
	if (!p)
		kpd_fail("out of memory for %ld file names", n);
	x->names = p;
	for (long i = x->cap; i < n; i++)
		snprintf(x->names + (size_t)i * FS_NAME_MAX, FS_NAME_MAX,
			 "d%ld/%ld", i / x->per_dir, i % x->per_dir);
	x->cap = n;
}

static long ndirs(struct fs_ctx *x, long n)
{
	return (n + x->per_dir - 1) / x->per_dir;
}

static void make_dirs(struct fs_ctx *x, long n)
{
	char d[32];
	for (long i = 0; i < ndirs(x, n); i++) {
		snprintf(d, sizeof d, "d%ld", i);
		if (mkdirat(x->rootfd, d, 0700) < 0)
			kpd_die("mkdir in the benchmark directory");
	}
}

static void remove_dirs(struct fs_ctx *x, long n)
{
	char d[32];
	for (long i = 0; i < ndirs(x, n); i++) {
		snprintf(d, sizeof d, "d%ld", i);
		if (unlinkat(x->rootfd, d, AT_REMOVEDIR) < 0)
			kpd_die("rmdir in the benchmark directory");
	}
}

static void create_files(struct fs_ctx *x, long n)
{
	for (long i = n - 1; i >= 0; i--) {
		int fd = openat(x->rootfd, name_of(x, i),
				O_WRONLY | O_CREAT | O_TRUNC, 0666);
		if (fd < 0)
			kpd_die("create file");
		if (x->size > 0 && write(fd, x->buf, x->size) != x->size)
			kpd_die("write file");
		close(fd);
	}
}

static void delete_files(struct fs_ctx *x, long n)
{
	for (long i = n - 1; i >= 0; i--)
		if (unlinkat(x->rootfd, name_of(x, i), 0) < 0)
			kpd_die("unlink file");
}

/* One batch of n files; returns the nanoseconds of the timed part. */
static long long fs_batch(struct fs_ctx *x, long n)
{
	long long t0, t;
	make_names(x, n);
	make_dirs(x, n);
	if (x->delete) {
		create_files(x, n);
		t0 = kpd_now_ns();
		delete_files(x, n);
		t = kpd_now_ns() - t0;
	} else {
		t0 = kpd_now_ns();
		create_files(x, n);
		t = kpd_now_ns() - t0;
		delete_files(x, n);
	}
	remove_dirs(x, n);
	return t;
}

/* kpd_calibrate's rule, for batches with untimed set-up. */
static long fs_calibrate(struct fs_ctx *x)
{
	long n = 1;
	long long t;
	for (;;) {
		t = fs_batch(x, n);
		if (t >= kpd.min_batch_ns / 10 || n >= (1L << 24))
			break;
		n *= 2;
	}
	if (t < kpd.min_batch_ns) {
		double scale = (double)kpd.min_batch_ns / (double)(t > 0 ? t : 1);
		n = (long)((double)n * scale * 1.05) + 1;
	}
	if (n > (1L << 24))
		kpd_fail("a batch would need %ld files: lower --min-batch-ns", n);
	return n < 1 ? 1 : n;
}

/* lmbench benchmp's rule: a batch outside 0.99-1.2 times the target
 * length sets the next one's size to 1.1 times the target at its rate. */
static long fs_resize(long n, long long t)
{
	double target = (double)kpd.min_batch_ns;
	if (t <= 0 || (t >= 0.99 * target && t <= 1.2 * target))
		return n;
	double m = (double)n * 1.1 * target / (double)t + 1;
	return m > (double)(1L << 24) ? (1L << 24) : (long)m;
}

int main(int argc, char **argv)
{
	struct fs_ctx x;
	const char *dir;
	struct statfs sfs;
	long n;

	kpd_init(argc, argv);
	memset(&x, 0, sizeof x);
	if (strcmp(kpd.bench, "fs.create.0k") == 0)
		x.delete = 0, x.size = 0;
	else if (strcmp(kpd.bench, "fs.delete.0k") == 0)
		x.delete = 1, x.size = 0;
	else if (strcmp(kpd.bench, "fs.create.10k") == 0)
		x.delete = 0, x.size = 10240;
	else if (strcmp(kpd.bench, "fs.delete.10k") == 0)
		x.delete = 1, x.size = 10240;
	else
		kpd_fail("unknown benchmark %s in family fs", kpd.bench);
	x.size = kpd_param_long("size", x.size);
	if (x.size < 0 || x.size > (64L << 20))
		kpd_fail("parameter size=%ld must be between 0 and 64m", x.size);
	x.per_dir = kpd_param_long("per_dir", 100);
	if (x.per_dir < 1)
		kpd_fail("parameter per_dir=%ld must be at least 1", x.per_dir);
	dir = kpd_param_str("dir", "/tmp");
	if (!(x.buf = calloc(1, x.size > 0 ? x.size : 1)))
		kpd_die("calloc");
	memset(x.buf, 'k', x.size);

	if (snprintf(x.root, sizeof x.root, "%s/kpd-fs-XXXXXX", dir) >= (int)sizeof x.root)
		kpd_fail("dir=%s is too long", dir);
	if (!mkdtemp(x.root))
		kpd_fail("dir=%s: cannot make a directory in it: %s", dir,
			 strerror(errno));
	strcpy(fs_cleanup_root, x.root);
	atexit(fs_cleanup);
	if ((x.rootfd = open(x.root, O_RDONLY | O_DIRECTORY)) < 0)
		kpd_die("open the benchmark directory");
	if (statfs(x.root, &sfs) == 0)
		kpd_info("fs_type", "0x%lx", (unsigned long)sfs.f_type);
	kpd_info("dir", "%s", x.root);
	kpd_info("file_bytes", "%ld", x.size);

	kpd_begin("ns/op", "lower");
	kpd_ready();
	n = fs_calibrate(&x);
	for (int i = 0; i < kpd.warmup; i++)
		n = fs_resize(n, fs_batch(&x, n));
	for (int i = 0; i < kpd.intervals; i++) {
		long long t = fs_batch(&x, n);
		kpd_interval((double)t / (double)n, n, t);
		n = fs_resize(n, t);
	}
	close(x.rootfd);
	fs_cleanup();
	kpd_end();
	return 0;
}
