/*
 * proc family: process creation, after lmbench's lat_proc.
 *
 *   proc.fork   fork(); the child _exit()s at once; the parent waits for it
 *               (exit=exit: the child calls exit(), the C library's clean-up
 *               first, as lmbench's does)
 *   proc.exec   fork(); the child execve()s the small static program
 *               kpd-hello (empty environment); the parent waits
 *   proc.shell  fork(); the child execs /bin/sh -c kpd-hello; the parent
 *               waits
 *
 * One operation is the whole round: create, run, exit and reap. The child
 * closes its standard output first, as lmbench's does. kpd-hello is found
 * from the parameter hello=PATH, by default next to this worker (the
 * directory of argv[0], or of /proc/self/exe when argv[0] has no slash).
 */
#include "kpd.h"
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>

extern char **environ;

struct proc_ctx {
	const char *hello;
	char cmd[PATH_MAX * 4 + 8]; /* the hello path quoted for sh -c */
	int mode;                   /* 0 fork, 1 exec, 2 shell */
	int libc_exit;              /* proc.fork's child calls exit(), not _exit() */
};

static void reap(pid_t pid, const struct proc_ctx *x)
{
	int st;
	while (waitpid(pid, &st, 0) < 0) {
		if (errno == EINTR)
			continue;
		kill(pid, SIGKILL);
		kpd_die("waitpid");
	}
	if (WIFSIGNALED(st))
		kpd_fail("the child was killed by signal %d", WTERMSIG(st));
	if (WEXITSTATUS(st) != 0) {
		if (x->mode == 1)
			kpd_fail("execve of %s failed in the child (status %d)",
				 x->hello, WEXITSTATUS(st));
		if (x->mode == 2)
			kpd_fail("/bin/sh -c %s exited with status %d", x->cmd,
				 WEXITSTATUS(st));
		kpd_fail("the child exited with status %d", WEXITSTATUS(st));
	}
}

static void child(const struct proc_ctx *x)
{
	char *nav[2];
	char *empty[1] = { NULL };
	if (x->mode == 0) {
		if (x->libc_exit)
			exit(0);
		_exit(0);
	}
	close(1);
	if (x->mode == 1) {
		nav[0] = (char *)x->hello;
		nav[1] = NULL;
		execve(x->hello, nav, empty);
	} else {
		char *sav[4] = { "sh", "-c", (char *)x->cmd, NULL };
		execve("/bin/sh", sav, environ);
	}
	_exit(127);
}

static void body_proc(void *c, long n)
{
	struct proc_ctx *x = c;
	for (long i = 0; i < n; i++) {
		pid_t pid = fork();
		if (pid < 0)
			kpd_die("fork");
		if (pid == 0)
			child(x);
		reap(pid, x);
	}
}

/* Single-quote s for the shell: ' becomes '\''. */
static void shell_quote(char *dst, size_t size, const char *s)
{
	size_t j = 0;
	dst[j++] = '\'';
	for (; *s && j + 6 < size; s++) {
		if (*s == '\'') {
			memcpy(dst + j, "'\\''", 4);
			j += 4;
		} else
			dst[j++] = *s;
	}
	dst[j++] = '\'';
	dst[j] = '\0';
}

static const char *default_hello(const char *argv0)
{
	static char path[PATH_MAX];
	char exe[PATH_MAX];
	const char *slash = strrchr(argv0, '/');
	if (slash) {
		snprintf(path, sizeof path, "%.*s/kpd-hello",
			 (int)(slash - argv0), argv0);
		return path;
	}
	ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (len <= 0)
		return "kpd-hello";
	exe[len] = '\0';
	if (!strrchr(exe, '/'))
		return "kpd-hello";
	*strrchr(exe, '/') = '\0';
	snprintf(path, sizeof path, "%.*s/kpd-hello", PATH_MAX - 16, exe);
	return path;
}

int main(int argc, char **argv)
{
	struct proc_ctx x;
	kpd_init(argc, argv);
	memset(&x, 0, sizeof x);
	if (strcmp(kpd.bench, "proc.fork") == 0)
		x.mode = 0;
	else if (strcmp(kpd.bench, "proc.exec") == 0)
		x.mode = 1;
	else if (strcmp(kpd.bench, "proc.shell") == 0)
		x.mode = 2;
	else
		kpd_fail("unknown benchmark %s in family proc", kpd.bench);

	const char *how = kpd_param_str("exit", "_exit");
	if (strcmp(how, "exit") != 0 && strcmp(how, "_exit") != 0)
		kpd_fail("exit=%s: the child's exit is _exit or exit", how);
	x.libc_exit = x.mode == 0 && strcmp(how, "exit") == 0;

	x.hello = kpd_param_str("hello", NULL);
	if (!x.hello)
		x.hello = default_hello(argv[0]);
	if (strlen(x.hello) >= PATH_MAX)
		kpd_fail("hello=... is longer than PATH_MAX");
	if (x.mode >= 1) {
		if (access(x.hello, X_OK) < 0)
			kpd_fail("hello=%s: %s (build kpd-hello or pass hello=PATH)",
				 x.hello, strerror(errno));
		kpd_info("hello", "%s", x.hello);
	}
	if (x.mode == 2) {
		if (access("/bin/sh", X_OK) < 0)
			kpd_skip("/bin/sh: %s", strerror(errno));
		shell_quote(x.cmd, sizeof x.cmd, x.hello);
	}
	/* One untimed round: a broken kpd-hello fails here with a clear error. */
	body_proc(&x, 1);
	kpd_latency(body_proc, &x, 0);
	kpd_end();
	return 0;
}
