/*
 * signal family: signal handler installation, delivery and protection
 * faults, after lmbench's lat_sig.
 *
 *   signal.install  sigaction() of SIGUSR1 (with the old action returned)
 *   signal.catch    kill(self, SIGUSR1) delivered to an empty handler, minus
 *                   the cost of kill(self, 0), which the worker measures
 *                   first and announces as its overhead
 *   signal.prot     a store to a read-only page: the SIGSEGV handler
 *                   returns and the store faults again; minus the cost of
 *                   catching a signal (catch minus kill(self, 0)), both
 *                   measured by the worker first
 *
 * For signal.prot the page is anonymous, made read-only at the start of a
 * batch; the handler counts the faults and, at the n-th, makes the page
 * writable again so that the store completes and the batch ends. Two
 * mprotect() calls per batch (thousands of faults) are included in the
 * time.
 */
#include "kpd.h"
#include <signal.h>
#include <sys/mman.h>

struct sig_ctx {
	pid_t pid;
	char *page;
	long pagesize;
};

static volatile sig_atomic_t caught;

/* signal.prot state, read by the SIGSEGV handler */
static char *volatile prot_page;
static volatile long prot_left;
static long prot_pagesize;

static void handler_count(int sig)
{
	(void)sig;
	caught++;
}

static void handler_prot(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	char *addr = si->si_addr;
	if (!prot_page || addr < prot_page || addr >= prot_page + prot_pagesize) {
		/* A real crash, not ours: let it kill the process. */
		signal(sig, SIG_DFL);
		return;
	}
	if (--prot_left <= 0)
		mprotect(prot_page, prot_pagesize, PROT_READ | PROT_WRITE);
}

static void install(int sig, void (*fn)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = fn;
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) < 0)
		kpd_die("sigaction");
}

static void body_install(void *c, long n)
{
	struct sigaction sa, old;
	(void)c;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler_count;
	sigemptyset(&sa.sa_mask);
	for (long i = 0; i < n; i++)
		if (sigaction(SIGUSR1, &sa, &old) < 0)
			kpd_die("sigaction");
}

static void body_kill0(void *c, long n)
{
	struct sig_ctx *x = c;
	for (long i = 0; i < n; i++)
		if (kill(x->pid, 0) < 0)
			kpd_die("kill(self, 0)");
}

static void body_catch(void *c, long n)
{
	struct sig_ctx *x = c;
	sig_atomic_t before = caught;
	for (long i = 0; i < n; i++)
		if (kill(x->pid, SIGUSR1) < 0)
			kpd_die("kill(self, SIGUSR1)");
	if ((long)(sig_atomic_t)(caught - before) != (long)(sig_atomic_t)n)
		kpd_fail("sent %ld signals but the handler ran %ld times", n,
			 (long)(sig_atomic_t)(caught - before));
}

static void body_prot(void *c, long n)
{
	struct sig_ctx *x = c;
	volatile char *p = x->page;
	prot_left = n;
	if (mprotect(x->page, x->pagesize, PROT_READ) < 0)
		kpd_die("mprotect PROT_READ");
	/* Faults n times; the n-th handler call makes the page writable. */
	*p = 1;
	if (prot_left != 0)
		kpd_fail("expected %ld protection faults, %ld left over", n, prot_left);
}

/* Cost of catching a signal, without the cost of the kill() that sends it. */
static double catch_cost(struct sig_ctx *x, double *kill0)
{
	double raw;
	*kill0 = kpd_median_ns(body_kill0, x, 5);
	raw = kpd_median_ns(body_catch, x, 5);
	kpd_info("kill0_ns", "%.1f", *kill0);
	kpd_info("catch_raw_ns", "%.1f", raw);
	return raw - *kill0;
}

int main(int argc, char **argv)
{
	struct sig_ctx x;
	double kill0, catch_ns;
	kpd_init(argc, argv);
	memset(&x, 0, sizeof x);
	x.pid = getpid();
	x.pagesize = sysconf(_SC_PAGESIZE);

	if (strcmp(kpd.bench, "signal.install") == 0) {
		kpd_latency(body_install, &x, 0);
	} else if (strcmp(kpd.bench, "signal.catch") == 0) {
		install(SIGUSR1, handler_count);
		kill0 = kpd_median_ns(body_kill0, &x, 5);
		kpd_info("kill0_ns", "%.1f", kill0);
		kpd_latency(body_catch, &x, kill0);
	} else if (strcmp(kpd.bench, "signal.prot") == 0) {
		struct sigaction sa;
		install(SIGUSR1, handler_count);
		catch_ns = catch_cost(&x, &kill0);
		if (catch_ns < 0)
			catch_ns = 0;
		x.page = mmap(NULL, x.pagesize, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (x.page == MAP_FAILED)
			kpd_die("mmap");
		x.page[0] = 0; /* populate: later faults are protection faults */
		prot_page = x.page;
		prot_pagesize = x.pagesize;
		memset(&sa, 0, sizeof sa);
		sa.sa_sigaction = handler_prot;
		sa.sa_flags = SA_SIGINFO;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGSEGV, &sa, NULL) < 0 || sigaction(SIGBUS, &sa, NULL) < 0)
			kpd_die("sigaction SIGSEGV");
		kpd_latency(body_prot, &x, catch_ns);
	} else
		kpd_fail("unknown benchmark %s in family signal", kpd.bench);
	kpd_end();
	return 0;
}
