/*
 * insn_count.c - a QEMU TCG plugin that counts the instructions a guest
 * executes, per translation block, inside windows the guest marks.
 *
 * kperfdiff builds it on the host and loads it into deterministic arm64 and
 * x86_64 guests (qemu:arm64,deterministic, qemu:x86_64,deterministic):
 *
 *     qemu-system-aarch64 ... -plugin insn_count.so,out=/host/dir/window
 *
 * A benchmark worker run with --count executes "hint #0x70" (a NOP on every
 * arm64 CPU) right before its timed intervals and "hint #0x71" right after;
 * on x86_64 the NOPs "nopw 0x4b504470(%rax,%rax,1)" and 0x4b504471 (see
 * insn_count_mark, which tells the marks from instruction bytes).
 * The first clears every counter; the second writes
 * <out>.<N> (N = 0, 1, ... in order) with one line per executed block:
 *
 *     <guest virtual address of the block, hex> <instructions executed>
 *
 * counting every CPU of the guest during the window. A block counts whole
 * each time it is entered, so one left early by an exception or interrupt
 * is counted in full; kperfdiff maps kernel addresses to functions with the
 * guest's kallsyms.
 *
 * Two more windows need no help from the guest (boot.map_* benchmarks,
 * arm64 only):
 *
 *   boot=PATH       the boot window: from reset to the first block below
 *                   user=ADDR (default 0x40000000, the virt machine's RAM
 *                   base: a static /init runs at 0x400000) translated after
 *                   the kernel's virtual addresses (top bit set) ran, i.e.
 *                   the first user instruction, /init's; written to PATH.
 *   call=ADDR       (up to 4) an inclusive window around every outermost
 *                   call of the function at ADDR: a "bl ADDR" seen when
 *                   translating opens it when executed and remembers its
 *                   return address (the bl's address + 4); the next
 *                   execution of that return address closes it and writes
 *                   <callout>.<ADDR hex>.<N> (N = 0, 1, ... per function).
 *                   Everything the CPU runs meanwhile counts: the function
 *                   and all it calls. The header gives the host time the
 *                   call took under emulation (host_ns, CLOCK_MONOTONIC). Calls through a register or a tail
 *                   call (b ADDR) are not seen.
 *
 * Their lines carry three more columns, the TLB maintenance the block
 * executed (each time it was entered): TLBI, DSB and ISB instructions,
 *
 *     <address> <instructions> <tlbi> <dsb> <isb>
 *
 * after one header line starting with '#'.
 *
 * The declarations below are the QEMU plugin ABI (version 1, QEMU 4.2 to
 * 8.x) that this file uses, stated here so the build needs no QEMU headers.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *tb, enum qemu_plugin_op op,
					      void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_udata_cb_t cb,
					    enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
const void *qemu_plugin_insn_data(const struct qemu_plugin_insn *insn);
size_t qemu_plugin_insn_size(const struct qemu_plugin_insn *insn);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

#define MARK_START 0xd503201fu | (0x70u << 5)   /* hint #0x70 */
#define MARK_STOP  0xd503201fu | (0x71u << 5)   /* hint #0x71 */
#define CHUNK 65536
#define MAX_CALLS 4
#define MAX_SITES 4096
#define SLOT_MARK 0             /* base slot of the marked windows; 1 + i for call window i */

uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);

/* TLB maintenance on AArch64: TLBI is SYS with op0=1, CRn=8; DSB any option; ISB. */
#define IS_TLBI(w) (((w) & 0xFFF8F000u) == 0xD5088000u)
#define IS_DSB(w)  (((w) & 0xFFFFF0FFu) == 0xD503309Fu)
#define IS_ISB(w)  ((w) == 0xD5033FDFu)
#define IS_BL(w)   (((w) & 0xFC000000u) == 0x94000000u)

struct block {
	uint64_t vaddr;
	uint32_t insns, tlbi, dsb, isb;
	uint64_t entered;       /* incremented inline by the translated code, never cleared */
	uint64_t base[1 + MAX_CALLS];   /* 'entered' when each window opened */
};

struct site {                   /* a translated "bl <watched function>" */
	uint64_t ret;
	unsigned fn;
};

static struct block **chunks;
static size_t nchunks, used;     /* used: blocks in the last chunk */
static char out_prefix[4096];
static unsigned window;
static int open_window;

static char boot_path[4096], call_prefix[4096];
static uint64_t user_limit = 0x40000000u;
static int boot_open, kernel_seen;
static uint64_t call_fn[MAX_CALLS];
static unsigned ncalls;
static int call_open[MAX_CALLS];
static uint64_t call_ret[MAX_CALLS];
static unsigned call_n[MAX_CALLS];
static uint64_t call_t0[MAX_CALLS];
static struct site sites[MAX_SITES];
static unsigned nsites;

static struct block *new_block(void)
{
	if (!nchunks || used == CHUNK) {
		struct block **c = realloc(chunks, (nchunks + 1) * sizeof *c);
		if (!c)
			return NULL;
		chunks = c;
		chunks[nchunks] = calloc(CHUNK, sizeof **chunks);
		if (!chunks[nchunks])
			return NULL;
		nchunks++;
		used = 0;
	}
	return &chunks[nchunks - 1][used++];
}

static void for_each_block(void (*fn)(struct block *, void *), void *arg)
{
	for (size_t c = 0; c < nchunks; c++) {
		size_t n = c + 1 == nchunks ? used : CHUNK;
		for (size_t i = 0; i < n; i++)
			fn(&chunks[c][i], arg);
	}
}

static unsigned cur_slot;       /* the slot clear/dump work on */
static FILE *cur_file;

static void clear(struct block *b, void *arg)
{
	(void)arg;
	b->base[cur_slot] = b->entered;
}

static void dump(struct block *b, void *arg)
{
	uint64_t n = b->entered - b->base[SLOT_MARK];
	if (n)
		fprintf((FILE *)arg, "%" PRIx64 " %" PRIu64 "\n", b->vaddr, n * b->insns);
}

static void dump_events(struct block *b, void *arg)
{
	uint64_t n = arg ? b->entered : b->entered - b->base[cur_slot];
	if (n)
		fprintf(cur_file, "%" PRIx64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", b->vaddr,
			n * b->insns, n * b->tlbi, n * b->dsb, n * b->isb);
}

static void on_start(unsigned int vcpu, void *arg)
{
	(void)vcpu, (void)arg;
	cur_slot = SLOT_MARK;
	for_each_block(clear, NULL);
	open_window = 1;
}

/* the boot window closes at the first user block: everything since reset, per block */
static void on_boot_end(unsigned int vcpu, void *arg)
{
	(void)vcpu, (void)arg;
	if (!boot_open)
		return;
	boot_open = 0;
	cur_file = fopen(boot_path, "w");
	if (!cur_file)
		return;
	fprintf(cur_file, "# boot: reset to the first user instruction\n");
	for_each_block(dump_events, (void *)1);
	fclose(cur_file);
}

static uint64_t host_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void on_call(unsigned int vcpu, void *arg)
{
	struct site *s = arg;
	(void)vcpu;
	if (call_open[s->fn])
		return;         /* a nested (recursive) call: the outermost window goes on */
	call_open[s->fn] = 1;
	call_ret[s->fn] = s->ret;
	cur_slot = 1 + s->fn;
	for_each_block(clear, NULL);
	call_t0[s->fn] = host_ns();     /* after the snapshot: the host time the call took, emulated */
}

static void on_return(unsigned int vcpu, void *arg)
{
	struct site *s = arg;
	char path[4200];
	(void)vcpu;
	if (!call_open[s->fn] || call_ret[s->fn] != s->ret)
		return;
	uint64_t took = host_ns() - call_t0[s->fn];
	call_open[s->fn] = 0;
	snprintf(path, sizeof path, "%s.%" PRIx64 ".%u", call_prefix, call_fn[s->fn], call_n[s->fn]++);
	cur_file = fopen(path, "w");
	if (!cur_file)
		return;
	fprintf(cur_file, "# call %" PRIx64 " return %" PRIx64 " host_ns %" PRIu64 "\n", call_fn[s->fn], s->ret, took);
	cur_slot = 1 + s->fn;
	for_each_block(dump_events, NULL);
	fclose(cur_file);
}

static struct site *add_site(uint64_t ret, unsigned fn)
{
	for (unsigned i = 0; i < nsites; i++)
		if (sites[i].ret == ret && sites[i].fn == fn)
			return &sites[i];
	if (nsites == MAX_SITES)
		return NULL;
	sites[nsites].ret = ret;
	sites[nsites].fn = fn;
	return &sites[nsites++];
}

static void on_stop(unsigned int vcpu, void *arg)
{
	char path[4200];
	(void)vcpu, (void)arg;
	if (!open_window)
		return;
	open_window = 0;
	snprintf(path, sizeof path, "%s.%u", out_prefix, window++);
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	for_each_block(dump, f);
	fclose(f);
}

/*
 * The window marks: 0 no mark, 1 start, 2 stop. arm64: the words of "hint #0x70"
 * and "hint #0x71". x86_64: the 9-byte NOPs "nopw 0x4b504470(%rax,%rax,1)" and
 * "...71..." (66 0f 1f 84 00 70|71 44 50 4b); compilers pad with this NOP only
 * with a zero displacement.
 */
static const unsigned char X86_MARK[9] = {0x66, 0x0f, 0x1f, 0x84, 0x00, 0x70, 0x44, 0x50, 0x4b};

int insn_count_mark(const unsigned char *data, size_t size)
{
	uint32_t w;
	if (size == 4) {
		memcpy(&w, data, 4);
		return w == (MARK_START) ? 1 : w == (MARK_STOP) ? 2 : 0;
	}
	if (size == sizeof X86_MARK && memcmp(data, X86_MARK, 5) == 0 && memcmp(data + 6, X86_MARK + 6, 3) == 0)
		return data[5] == 0x70 ? 1 : data[5] == 0x71 ? 2 : 0;
	return 0;
}

static uint32_t word(const struct qemu_plugin_insn *insn)
{
	uint32_t w = 0;
	if (qemu_plugin_insn_size(insn) == 4)
		memcpy(&w, qemu_plugin_insn_data(insn), 4);
	return w;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	(void)id;
	size_t n = qemu_plugin_tb_n_insns(tb);
	struct block *b = new_block();
	if (!b)
		return;
	b->vaddr = qemu_plugin_tb_vaddr(tb);
	b->insns = n;
	qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &b->entered, 1);
	if (boot_path[0] && boot_open) {
		if (b->vaddr >> 63)
			kernel_seen = 1;
		else if (kernel_seen && b->vaddr < user_limit)
			qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, 0), on_boot_end,
							       QEMU_PLUGIN_CB_NO_REGS, NULL);
	}
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint32_t w = word(insn);
		if (IS_TLBI(w))
			b->tlbi++;
		else if (IS_DSB(w))
			b->dsb++;
		else if (IS_ISB(w))
			b->isb++;
		int mark = insn_count_mark(qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn));
		if (mark == 1)
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_start, QEMU_PLUGIN_CB_NO_REGS, NULL);
		else if (mark == 2)
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_stop, QEMU_PLUGIN_CB_NO_REGS, NULL);
		if (!ncalls)
			continue;
		uint64_t pc = qemu_plugin_insn_vaddr(insn);
		for (unsigned s = 0; s < nsites; s++)       /* a return address of a watched call */
			if (sites[s].ret == pc)
				qemu_plugin_register_vcpu_insn_exec_cb(insn, on_return, QEMU_PLUGIN_CB_NO_REGS, &sites[s]);
		if (IS_BL(w)) {
			int64_t off = (int64_t)((uint64_t)(w & 0x03FFFFFFu) << 38) >> 36;   /* imm26 * 4, signed */
			uint64_t target = pc + (uint64_t)off;
			for (unsigned f = 0; f < ncalls; f++) {
				struct site *st = target == call_fn[f] ? add_site(pc + 4, f) : NULL;
				if (st)
					qemu_plugin_register_vcpu_insn_exec_cb(insn, on_call, QEMU_PLUGIN_CB_NO_REGS, st);
			}
		}
	}
}

static void on_quit(qemu_plugin_id_t id, void *arg)
{
	(void)id, (void)arg;
	for (size_t c = 0; c < nchunks; c++)
		free(chunks[c]);
	free(chunks);
}

__attribute__((visibility("default")))
int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
	(void)info;
	for (int i = 0; i < argc; i++) {
		if (strncmp(argv[i], "out=", 4) == 0)
			snprintf(out_prefix, sizeof out_prefix, "%s", argv[i] + 4);
		else if (strncmp(argv[i], "boot=", 5) == 0)
			snprintf(boot_path, sizeof boot_path, "%s", argv[i] + 5);
		else if (strncmp(argv[i], "callout=", 8) == 0)
			snprintf(call_prefix, sizeof call_prefix, "%s", argv[i] + 8);
		else if (strncmp(argv[i], "user=", 5) == 0)
			user_limit = strtoull(argv[i] + 5, NULL, 0);
		else if (strncmp(argv[i], "call=", 5) == 0) {
			if (ncalls == MAX_CALLS) {
				fprintf(stderr, "insn_count: at most %d call= functions\n", MAX_CALLS);
				return -1;
			}
			call_fn[ncalls++] = strtoull(argv[i] + 5, NULL, 16);
		}
	}
	boot_open = boot_path[0] != 0;
	if (ncalls && !call_prefix[0]) {
		fprintf(stderr, "insn_count: call= needs callout=PATH_PREFIX\n");
		return -1;
	}
	if (!out_prefix[0]) {
		fprintf(stderr, "insn_count: give out=PATH_PREFIX\n");
		return -1;
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
	qemu_plugin_register_atexit_cb(id, on_quit, NULL);
	return 0;
}
