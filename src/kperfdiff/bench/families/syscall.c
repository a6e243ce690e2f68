/*
 * syscall family: the cost of entering and leaving the kernel, lmbench's
 * lat_syscall. Each body performs n operations; the loop overhead is a few
 * cycles and is not subtracted (lmbench does not either).
 */
#include "kpd.h"
#include <fcntl.h>
#include <sys/stat.h>

struct sys_ctx {
	int fd;
	const char *path;
};

static void body_null(void *c, long n)
{
	(void)c;
	for (long i = 0; i < n; i++)
		getppid();
}

static void body_read(void *c, long n)
{
	struct sys_ctx *x = c;
	char ch;
	for (long i = 0; i < n; i++)
		if (read(x->fd, &ch, 1) != 1)
			kpd_die("read /dev/zero");
}

static void body_write(void *c, long n)
{
	struct sys_ctx *x = c;
	char ch = 0;
	for (long i = 0; i < n; i++)
		if (write(x->fd, &ch, 1) != 1)
			kpd_die("write /dev/null");
}

static void body_stat(void *c, long n)
{
	struct sys_ctx *x = c;
	struct stat st;
	for (long i = 0; i < n; i++)
		if (stat(x->path, &st) < 0)
			kpd_die("stat");
}

static void body_fstat(void *c, long n)
{
	struct sys_ctx *x = c;
	struct stat st;
	for (long i = 0; i < n; i++)
		if (fstat(x->fd, &st) < 0)
			kpd_die("fstat");
}

static void body_open(void *c, long n)
{
	struct sys_ctx *x = c;
	for (long i = 0; i < n; i++) {
		int fd = open(x->path, O_RDONLY);
		if (fd < 0)
			kpd_die("open");
		close(fd);
	}
}

int main(int argc, char **argv)
{
	struct sys_ctx x = { -1, NULL };
	kpd_init(argc, argv);
	/* lmbench stats and opens a file in /tmp by default; we take a path
	 * parameter so the file system under test can be chosen. */
	x.path = kpd_param_str("path", "/etc/passwd");

	if (strcmp(kpd.bench, "syscall.null") == 0)
		kpd_latency(body_null, &x, 0);
	else if (strcmp(kpd.bench, "syscall.read") == 0) {
		if ((x.fd = open("/dev/zero", O_RDONLY)) < 0)
			kpd_die("open /dev/zero");
		kpd_latency(body_read, &x, 0);
	} else if (strcmp(kpd.bench, "syscall.write") == 0) {
		if ((x.fd = open("/dev/null", O_WRONLY)) < 0)
			kpd_die("open /dev/null");
		kpd_latency(body_write, &x, 0);
	} else if (strcmp(kpd.bench, "syscall.stat") == 0) {
		kpd_latency(body_stat, &x, 0);
	} else if (strcmp(kpd.bench, "syscall.fstat") == 0) {
		if ((x.fd = open(x.path, O_RDONLY)) < 0)
			kpd_die("open");
		kpd_latency(body_fstat, &x, 0);
	} else if (strcmp(kpd.bench, "syscall.open") == 0) {
		kpd_latency(body_open, &x, 0);
	} else
		kpd_fail("unknown benchmark %s in family syscall", kpd.bench);
	kpd_end();
	return 0;
}
