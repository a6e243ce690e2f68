/*
 * select family: select() with a zero timeout on N descriptors that are all
 * ready, after lmbench's lat_select.
 *
 *   select.file.N  N descriptors of one open regular file (dup()s)
 *   select.tcp.N   N descriptors of one connected loopback TCP socket
 *
 * As in lmbench, one descriptor is opened and dup()ed N times, every
 * descriptor is put in the write set, and the timeout is zero, so each
 * call polls N descriptors and returns at once. The parameter n= changes N.
 */
#include "kpd.h"
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/select.h>
#include <sys/socket.h>

struct sel_ctx {
	fd_set set;
	int nfds;
	int count;
};

static void body_select(void *c, long n)
{
	struct sel_ctx *x = c;
	fd_set w;
	struct timeval tv;
	for (long i = 0; i < n; i++) {
		w = x->set;
		tv.tv_sec = 0;
		tv.tv_usec = 0;
		int r = select(x->nfds, NULL, &w, NULL, &tv);
		if (r != x->count) {
			if (r < 0)
				kpd_die("select");
			kpd_fail("select returned %d ready descriptors, expected %d",
				 r, x->count);
		}
	}
}

/* Open a temporary regular file (unlinked at once: nothing is left). */
static int open_file(void)
{
	char path[] = "/tmp/kpd-select-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		kpd_die("mkstemp /tmp/kpd-select-XXXXXX");
	unlink(path);
	return fd;
}

/* A connected loopback TCP socket; its peer stays open in *peer. */
static int open_tcp(int *listener, int *peer)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof sa;
	int l, c, a;

	if ((l = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		kpd_die("socket");
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = 0;
	if (bind(l, (struct sockaddr *)&sa, sizeof sa) < 0)
		kpd_die("bind 127.0.0.1:0");
	if (listen(l, 8) < 0)
		kpd_die("listen");
	if (getsockname(l, (struct sockaddr *)&sa, &len) < 0)
		kpd_die("getsockname");
	if ((c = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		kpd_die("socket");
	if (connect(c, (struct sockaddr *)&sa, sizeof sa) < 0)
		kpd_die("connect to 127.0.0.1");
	if ((a = accept(l, NULL, NULL)) < 0)
		kpd_die("accept");
	*listener = l;
	*peer = a;
	return c;
}

int main(int argc, char **argv)
{
	struct sel_ctx x;
	int fd, listener = -1, peer = -1;
	long count;
	const char *kind;

	kpd_init(argc, argv);
	memset(&x, 0, sizeof x);
	if (strcmp(kpd.bench, "select.file.10") == 0) {
		kind = "file";
		count = 10;
	} else if (strcmp(kpd.bench, "select.file.100") == 0) {
		kind = "file";
		count = 100;
	} else if (strcmp(kpd.bench, "select.tcp.10") == 0) {
		kind = "tcp";
		count = 10;
	} else if (strcmp(kpd.bench, "select.tcp.100") == 0) {
		kind = "tcp";
		count = 100;
	} else
		kpd_fail("unknown benchmark %s in family select", kpd.bench);
	count = kpd_param_long("n", count);
	if (count < 1 || count > FD_SETSIZE - 16)
		kpd_fail("parameter n=%ld must be between 1 and %d", count,
			 FD_SETSIZE - 16);

	if (strcmp(kind, "file") == 0)
		fd = open_file();
	else
		fd = open_tcp(&listener, &peer);

	FD_ZERO(&x.set);
	for (long i = 0; i < count; i++) {
		int d = dup(fd);
		if (d < 0)
			kpd_die("dup");
		if (d >= FD_SETSIZE)
			kpd_fail("descriptor %d does not fit in an fd_set", d);
		FD_SET(d, &x.set);
		if (d + 1 > x.nfds)
			x.nfds = d + 1;
	}
	close(fd);
	x.count = (int)count;
	kpd_info("descriptors", "%ld %s", count, kind);
	kpd_latency(body_select, &x, 0);
	for (int d = 0; d < x.nfds; d++)
		if (FD_ISSET(d, &x.set))
			close(d);
	if (peer >= 0)
		close(peer);
	if (listener >= 0)
		close(listener);
	kpd_end();
	return 0;
}
