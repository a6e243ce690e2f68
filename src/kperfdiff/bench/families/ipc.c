/*
 * ipc family: local communication latency between two processes, after
 * lmbench's lat_pipe, lat_unix, lat_udp, lat_tcp and lat_connect.
 *
 *   ipc.pipe     round trip of 1 byte over a pair of pipes
 *   ipc.unix     round trip of 1 byte over an AF_UNIX stream socketpair
 *   ipc.udp      round trip of a 4-byte datagram over loopback UDP
 *   ipc.tcp      round trip of 1 byte over a loopback TCP connection
 *   ipc.connect  socket() + connect() + close() to a loopback TCP server
 *
 * The worker forks the peer (echo or accept server) itself; the peer dies
 * with the worker (PR_SET_PDEATHSIG) and is killed and reaped on every
 * exit path. Sockets use 127.0.0.1 and a port chosen by the kernel. The
 * parameter size= sets the message size of unix, udp and tcp.
 *
 * cpus= places the two processes: any (default, as lmbench: the scheduler
 * decides, and on a small SMP machine the result moves between a same-CPU
 * and a cross-CPU round trip from run to run), same (both pinned to the
 * CPU the worker started on: wake-up plus context switch), split (pinned
 * to two different CPUs: cross-CPU wake-up).
 */
#include "kpd.h"
#include <signal.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#define IPC_MAX_SIZE 65507

struct ipc_ctx {
	int rfd, wfd;      /* the worker's ends */
	long size;
	char *buf;
	struct sockaddr_in addr; /* ipc.connect: the server */
};

static pid_t peer_pid;
static int worker_cpu = -1, peer_cpu = -1; /* -1: not pinned */

static void pin(int cpu, const char *who)
{
	cpu_set_t set;
	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof set, &set) < 0)
		kpd_fail("cannot pin the %s to CPU %d: %s", who, cpu, strerror(errno));
}

/* Choose the CPUs from cpus=any|same|split, and pin the worker. */
static void place(const char *policy)
{
	cpu_set_t set;
	int here = sched_getcpu();
	if (strcmp(policy, "any") == 0)
		return;
	if (here < 0 || sched_getaffinity(0, sizeof set, &set) < 0)
		kpd_fail("cpus=%s: cannot read this process's CPUs: %s", policy,
			 strerror(errno));
	worker_cpu = here;
	if (strcmp(policy, "same") == 0)
		peer_cpu = here;
	else if (strcmp(policy, "split") == 0) {
		for (int c = 1; c < CPU_SETSIZE && peer_cpu < 0; c++)
			if (CPU_ISSET((here + c) % CPU_SETSIZE, &set) &&
			    (here + c) % CPU_SETSIZE != here)
				peer_cpu = (here + c) % CPU_SETSIZE;
		if (peer_cpu < 0)
			kpd_skip("cpus=split needs two CPUs, this process may use one");
	} else
		kpd_fail("parameter cpus=%s must be any, same or split", policy);
	pin(worker_cpu, "worker");
	kpd_info("cpus", "worker %d peer %d", worker_cpu, peer_cpu);
}

/* Kill and reap the peer (registered with atexit: runs after kpd_fail). */
static void stop_peer(void)
{
	if (peer_pid > 0) {
		kill(peer_pid, SIGKILL);
		while (waitpid(peer_pid, NULL, 0) < 0 && errno == EINTR)
			;
		peer_pid = 0;
	}
}

static int readn(int fd, char *buf, long size)
{
	long got = 0;
	while (got < size) {
		ssize_t r = read(fd, buf + got, size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			return -2; /* end of file */
		got += r;
	}
	return 0;
}

static int writen(int fd, const char *buf, long size)
{
	long put = 0;
	while (put < size) {
		ssize_t r = write(fd, buf + put, size - put);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		put += r;
	}
	return 0;
}

/*
 * Fork the peer: in the child, close the worker's ends and run fn (never
 * returns). Returns in the parent.
 */
static void start_peer(void (*fn)(struct ipc_ctx *, int, int), struct ipc_ctx *x,
		       int prfd, int pwfd)
{
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		kpd_die("fork");
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(0);
		if (peer_cpu >= 0) {
			cpu_set_t set;
			CPU_ZERO(&set);
			CPU_SET(peer_cpu, &set);
			if (sched_setaffinity(0, sizeof set, &set) < 0)
				_exit(3);
		}
		if (x->rfd >= 0)
			close(x->rfd);
		if (x->wfd >= 0 && x->wfd != x->rfd)
			close(x->wfd);
		fn(x, prfd, pwfd);
		_exit(0);
	}
	peer_pid = pid;
	if (prfd >= 0)
		close(prfd);
	if (pwfd >= 0 && pwfd != prfd)
		close(pwfd);
}

/* Stream echo: read size bytes, write them back, until EOF. */
static void peer_echo(struct ipc_ctx *x, int rfd, int wfd)
{
	while (readn(rfd, x->buf, x->size) == 0)
		if (writen(wfd, x->buf, x->size) < 0)
			break;
}

/* Datagram echo: send every datagram back to its sender. */
static void peer_udp(struct ipc_ctx *x, int fd, int unused)
{
	struct sockaddr_in from;
	(void)unused;
	for (;;) {
		socklen_t len = sizeof from;
		ssize_t r = recvfrom(fd, x->buf, IPC_MAX_SIZE, 0,
				     (struct sockaddr *)&from, &len);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (sendto(fd, x->buf, r, 0, (struct sockaddr *)&from, len) < 0)
			break;
	}
}

/* Accept server: take each connection, wait for the client to close it,
 * close it (lmbench's lat_connect server). */
static void peer_accept(struct ipc_ctx *x, int lfd, int unused)
{
	(void)unused;
	for (;;) {
		int s = accept(lfd, NULL, NULL);
		if (s < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			break;
		}
		while (read(s, x->buf, 1) > 0)
			;
		close(s);
	}
}

static void body_roundtrip(void *c, long n)
{
	struct ipc_ctx *x = c;
	for (long i = 0; i < n; i++) {
		if (writen(x->wfd, x->buf, x->size) < 0)
			kpd_die("write to the peer");
		int r = readn(x->rfd, x->buf, x->size);
		if (r < 0)
			kpd_fail("no reply from the peer: %s",
				 r == -2 ? "end of file" : strerror(errno));
	}
}

static void body_udp(void *c, long n)
{
	struct ipc_ctx *x = c;
	for (long i = 0; i < n; i++) {
		if (send(x->wfd, x->buf, x->size, 0) != x->size)
			kpd_die("send UDP datagram");
		if (recv(x->rfd, x->buf, x->size, 0) != x->size)
			kpd_die("receive UDP datagram (lost?)");
	}
}

static void body_connect(void *c, long n)
{
	struct ipc_ctx *x = c;
	for (long i = 0; i < n; i++) {
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s < 0)
			kpd_die("socket");
		if (connect(s, (struct sockaddr *)&x->addr, sizeof x->addr) < 0)
			kpd_die("connect to 127.0.0.1");
		close(s);
	}
}

static void loopback(struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa->sin_port = 0;
}

/* A socket bound to 127.0.0.1 on a kernel-chosen port, its address in *sa. */
static int bound_socket(int type, struct sockaddr_in *sa)
{
	socklen_t len = sizeof *sa;
	int fd = socket(AF_INET, type, 0);
	if (fd < 0)
		kpd_die("socket");
	loopback(sa);
	if (bind(fd, (struct sockaddr *)sa, sizeof *sa) < 0)
		kpd_die("bind 127.0.0.1:0");
	if (getsockname(fd, (struct sockaddr *)sa, &len) < 0)
		kpd_die("getsockname");
	return fd;
}

/* Never wait for ever on a socket: a lost peer becomes an error. */
static void recv_timeout(int fd)
{
	struct timeval tv = { 30, 0 };
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
		kpd_die("setsockopt SO_RCVTIMEO");
}

static void setup_pipe(struct ipc_ctx *x)
{
	int to_peer[2], from_peer[2];
	if (pipe(to_peer) < 0 || pipe(from_peer) < 0)
		kpd_die("pipe");
	x->wfd = to_peer[1];
	x->rfd = from_peer[0];
	start_peer(peer_echo, x, to_peer[0], from_peer[1]);
}

static void setup_unix(struct ipc_ctx *x)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		kpd_die("socketpair AF_UNIX");
	x->rfd = x->wfd = sv[0];
	start_peer(peer_echo, x, sv[1], sv[1]);
}

static void setup_udp(struct ipc_ctx *x)
{
	struct sockaddr_in server, client;
	int s = bound_socket(SOCK_DGRAM, &server);
	int c = bound_socket(SOCK_DGRAM, &client);
	if (connect(c, (struct sockaddr *)&server, sizeof server) < 0)
		kpd_die("connect UDP socket");
	recv_timeout(c);
	x->rfd = x->wfd = c;
	start_peer(peer_udp, x, s, s);
}

static void setup_tcp(struct ipc_ctx *x)
{
	struct sockaddr_in server;
	int l = bound_socket(SOCK_STREAM, &server);
	int c, a;
	if (listen(l, 1) < 0)
		kpd_die("listen");
	if ((c = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		kpd_die("socket");
	if (connect(c, (struct sockaddr *)&server, sizeof server) < 0)
		kpd_die("connect to 127.0.0.1");
	if ((a = accept(l, NULL, NULL)) < 0)
		kpd_die("accept");
	close(l);
	recv_timeout(c);
	x->rfd = x->wfd = c;
	start_peer(peer_echo, x, a, a);
}

static void setup_connect(struct ipc_ctx *x)
{
	int l = bound_socket(SOCK_STREAM, &x->addr);
	if (listen(l, SOMAXCONN) < 0)
		kpd_die("listen");
	start_peer(peer_accept, x, l, l);
}

int main(int argc, char **argv)
{
	struct ipc_ctx x;
	long defsize = 1;

	kpd_init(argc, argv);
	memset(&x, 0, sizeof x);
	x.rfd = x.wfd = -1;
	signal(SIGPIPE, SIG_IGN);
	atexit(stop_peer);

	if (strcmp(kpd.bench, "ipc.udp") == 0)
		defsize = 4;
	x.size = kpd_param_long("size", defsize);
	if (x.size < 1 || x.size > IPC_MAX_SIZE)
		kpd_fail("parameter size=%ld must be between 1 and %d", x.size,
			 IPC_MAX_SIZE);
	if (strcmp(kpd.bench, "ipc.pipe") == 0 && x.size != 1)
		kpd_fail("ipc.pipe has no size parameter (lmbench sends 1 byte)");
	if (!(x.buf = calloc(1, IPC_MAX_SIZE)))
		kpd_die("calloc");
	place(kpd_param_str("cpus", "any"));

	if (strcmp(kpd.bench, "ipc.pipe") == 0)
		setup_pipe(&x);
	else if (strcmp(kpd.bench, "ipc.unix") == 0)
		setup_unix(&x);
	else if (strcmp(kpd.bench, "ipc.udp") == 0)
		setup_udp(&x);
	else if (strcmp(kpd.bench, "ipc.tcp") == 0)
		setup_tcp(&x);
	else if (strcmp(kpd.bench, "ipc.connect") == 0)
		setup_connect(&x);
	else
		kpd_fail("unknown benchmark %s in family ipc", kpd.bench);

	if (strcmp(kpd.bench, "ipc.connect") != 0)
		kpd_info("message_bytes", "%ld", x.size);
	if (strcmp(kpd.bench, "ipc.connect") == 0) {
		body_connect(&x, 1); /* the server is up */
		kpd_latency(body_connect, &x, 0);
	} else if (strcmp(kpd.bench, "ipc.udp") == 0) {
		body_udp(&x, 1); /* one round trip: both processes are running */
		kpd_latency(body_udp, &x, 0);
	} else {
		body_roundtrip(&x, 1);
		kpd_latency(body_roundtrip, &x, 0);
	}
	stop_peer();
	kpd_end();
	return 0;
}
