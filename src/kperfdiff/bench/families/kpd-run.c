/* kpd-run: kperfdiff's one copy runner, here and on every target: run N
 * copies of a benchmark worker, each in its own session, stdout and stderr
 * to files, an optional start barrier (every copy prints "ready", then all
 * get one byte on stdin), a timeout that kills every copy's process group.
 *
 *   kpd-run -o OUTDIR -n COPIES -t TIMEOUT_S [-s] [-w] [-c CPUS] [-g FILE] -- ARGV...
 *
 * -c CPUS (a comma-separated list of CPU numbers) pins copy I to CPU number
 * I of the list (modulo its length) before it starts; -g FILE first moves each
 * copy into a cgroup by writing 0 to FILE (that cgroup's tasks or cgroup.procs).
 *
 * A word of ARGV containing @COPY@ has it replaced by the copy index (one
 * perf.data per copy). Writes OUTDIR/c<i>.out, OUTDIR/c<i>.err and
 * OUTDIR/status ("copy I exit N" | "copy I signal N" | "copy I timeout",
 * "rusage I NVCSW NIVCSW MAXRSS_KB" for each copy reaped, then "wall_ns N").
 * Exit status 0 unless kpd-run itself failed.
 *
 * -w (watched, for a driver that reads the copies' scheduler counters in
 * /proc): prints "pid I PID" for every copy once all are started, and when a
 * copy has exited but is not yet reaped (its counters are still readable)
 * prints "exited I" and reaps it only after reading one byte on stdin.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXCOPIES 256

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static char *subst(const char *word, int copy)
{
	const char *p = strstr(word, "@COPY@");
	if (!p)
		return (char *)word;
	size_t n = strlen(word) + 16;
	char *out = malloc(n);
	snprintf(out, n, "%.*s%d%s", (int)(p - word), word, copy, p + 6);
	return out;
}

static void die(const char *what)
{
	fprintf(stderr, "kpd-run: %s: %s\n", what, strerror(errno));
	exit(125);
}

int main(int argc, char **argv)
{
	const char *outdir = NULL;
	int copies = 1, sync = 0, opt;
	double timeout = 120;
	int watched = 0;
	int pin[MAXCOPIES], npin = 0;
	const char *cgfile = NULL;
	while ((opt = getopt(argc, argv, "+o:n:t:swc:g:")) != -1) {
		switch (opt) {
		case 'o': outdir = optarg; break;
		case 'n': copies = atoi(optarg); break;
		case 't': timeout = atof(optarg); break;
		case 's': sync = 1; break;
		case 'w': watched = 1; break;
		case 'c':
			for (char *p = optarg; *p && npin < MAXCOPIES;) {
				char *end;
				long c = strtol(p, &end, 10);
				if (end == p || c < 0 || c >= CPU_SETSIZE) {
					fprintf(stderr, "kpd-run: -c takes CPU numbers like 1,3: %s\n", optarg);
					return 125;
				}
				pin[npin++] = (int)c;
				p = *end == ',' ? end + 1 : end;
			}
			break;
		case 'g': cgfile = optarg; break;
		default: return 125;
		}
	}
	if (!outdir || optind >= argc || copies < 1 || copies > MAXCOPIES) {
		fprintf(stderr, "usage: kpd-run -o OUTDIR -n COPIES -t TIMEOUT_S [-s] [-w] [-c CPUS] [-g FILE] -- ARGV...\n");
		return 125;
	}
	char **cmd = argv + optind;
	int ncmd = argc - optind;
	mkdir(outdir, 0755);
	pid_t pids[MAXCOPIES];
	int outfd[MAXCOPIES], infd[MAXCOPIES], filefd[MAXCOPIES], ready[MAXCOPIES], done[MAXCOPIES];
	char tail[MAXCOPIES][8];
	int status[MAXCOPIES];
	struct rusage usage[MAXCOPIES];
	char path[4096];
	signal(SIGPIPE, SIG_IGN);
	long long t0 = now_ns();
	long long deadline = t0 + (long long)(timeout * 1e9);
	for (int i = 0; i < copies; i++) {
		int po[2], pi[2];
		if (pipe(po) || pipe(pi))
			die("pipe");
		snprintf(path, sizeof path, "%s/c%d.out", outdir, i);
		filefd[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		snprintf(path, sizeof path, "%s/c%d.err", outdir, i);
		int errfd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (filefd[i] < 0 || errfd < 0)
			die("open output file");
		char **av = calloc(ncmd + 1, sizeof *av);
		for (int k = 0; k < ncmd; k++)
			av[k] = subst(cmd[k], i);
		pid_t pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			setsid();
			dup2(pi[0], 0);
			dup2(po[1], 1);
			dup2(errfd, 2);
			close(pi[0]); close(pi[1]); close(po[0]); close(po[1]); close(errfd);
			if (cgfile) {
				int fd = open(cgfile, O_WRONLY);
				if (fd < 0 || write(fd, "0", 1) != 1) {
					fprintf(stderr, "kpd-run: cannot move copy %d into the cgroup of %s: %s\n", i, cgfile,
						strerror(errno));
					_exit(126);
				}
				close(fd);
			}
			if (npin) {
				cpu_set_t set;
				CPU_ZERO(&set);
				CPU_SET(pin[i % npin], &set);
				if (sched_setaffinity(0, sizeof set, &set)) {
					fprintf(stderr, "kpd-run: cannot pin copy %d to CPU %d: %s\n", i, pin[i % npin],
						strerror(errno));
					_exit(126);
				}
			}
			execvp(av[0], av);
			fprintf(stderr, "kpd-run: cannot run %s: %s\n", av[0], strerror(errno));
			_exit(127);
		}
		close(pi[0]);
		close(po[1]);
		close(errfd);
		pids[i] = pid;
		outfd[i] = po[0];
		infd[i] = pi[1];
		ready[i] = !sync;
		done[i] = 0;
		status[i] = -1;
		memset(&usage[i], 0, sizeof usage[i]);
		tail[i][0] = '\n';
		tail[i][1] = 0;
	}
	if (watched) {
		for (int i = 0; i < copies; i++)
			printf("pid %d %d\n", i, (int)pids[i]);
		fflush(stdout);
	}
	int released = !sync, open_streams = copies, timed_out = 0;
	struct pollfd pfd[MAXCOPIES];
	char buf[65536];
	while (open_streams > 0) {
		long long left = deadline - now_ns();
		if (left <= 0) {
			timed_out = 1;
			break;
		}
		int n = 0, idx[MAXCOPIES];
		for (int i = 0; i < copies; i++)
			if (!done[i]) {
				pfd[n].fd = outfd[i];
				pfd[n].events = POLLIN;
				idx[n++] = i;
			}
		int ms = left / 1000000 > 500 ? 500 : (int)(left / 1000000) + 1;
		int r = poll(pfd, n, ms);
		if (r < 0 && errno != EINTR)
			die("poll");
		for (int k = 0; k < n && r > 0; k++) {
			if (!(pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			int i = idx[k];
			ssize_t got = read(outfd[i], buf, sizeof buf);
			if (got <= 0) {
				done[i] = 1;
				ready[i] = 1; /* ended before ready: do not wait on it */
				open_streams--;
				continue;
			}
			if (write(filefd[i], buf, got) != got)
				die("write output");
			if (!ready[i]) {
				/* look for a line "ready" across chunk boundaries */
				char win[sizeof buf + 8];
				size_t tl = strlen(tail[i]);
				memcpy(win, tail[i], tl);
				memcpy(win + tl, buf, got);
				win[tl + got] = 0;
				if (memmem(win, tl + got, "\nready\n", 7))
					ready[i] = 1;
				size_t keep = tl + got < 7 ? tl + got : 7;
				memcpy(tail[i], win + tl + got - keep, keep);
				tail[i][keep] = 0;
			}
		}
		if (!released) {
			int all = 1;
			for (int i = 0; i < copies; i++)
				all &= ready[i];
			if (all) {
				released = 1;
				for (int i = 0; i < copies; i++)
					if (write(infd[i], "g", 1) < 0) { /* copy already gone */ }
			}
		}
	}
	int left_procs = copies;
	while (left_procs > 0 && !timed_out) {
		for (int i = 0; i < copies; i++) {
			if (status[i] != -1)
				continue;
			if (watched) {
				/* exited but not reaped: let the driver read its counters first */
				siginfo_t si;
				si.si_pid = 0;
				if (waitid(P_PID, pids[i], &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid != pids[i])
					continue;
				char byte;
				printf("exited %d\n", i);
				fflush(stdout);
				if (read(0, &byte, 1) < 0) { /* driver gone: reap anyway */ }
			}
			int st;
			pid_t w = wait4(pids[i], &st, WNOHANG, &usage[i]);
			if (w == pids[i]) {
				status[i] = st;
				left_procs--;
			}
		}
		if (left_procs == 0)
			break;
		if (now_ns() >= deadline) {
			timed_out = 1;
			break;
		}
		usleep(2000);
	}
	long long wall = now_ns() - t0;
	if (timed_out) {
		for (int i = 0; i < copies; i++)
			if (status[i] == -1)
				kill(-pids[i], SIGKILL);
		for (int i = 0; i < copies; i++)
			if (status[i] == -1)
				waitpid(pids[i], &status[i], 0), status[i] = -2;
	}
	snprintf(path, sizeof path, "%s/status", outdir);
	FILE *f = fopen(path, "w");
	if (!f)
		die("open status");
	for (int i = 0; i < copies; i++) {
		if (status[i] == -2 || status[i] == -1)
			fprintf(f, "copy %d timeout\n", i);
		else if (WIFSIGNALED(status[i]))
			fprintf(f, "copy %d signal %d\n", i, WTERMSIG(status[i]));
		else
			fprintf(f, "copy %d exit %d\n", i, WEXITSTATUS(status[i]));
		if (status[i] >= 0)
			fprintf(f, "rusage %d %ld %ld %ld\n", i, usage[i].ru_nvcsw, usage[i].ru_nivcsw, usage[i].ru_maxrss);
		close(filefd[i]);
		close(infd[i]);
	}
	fprintf(f, "wall_ns %lld\n", wall);
	fclose(f);
	return 0;
}
