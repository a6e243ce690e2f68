/*
 * insn_count.c - a QEMU TCG plugin that counts the instructions a guest
 * executes, per translation block, inside windows the guest marks.
 *
 * kperfdiff builds it on the host and loads it into deterministic arm64
 * guests (qemu:arm64,deterministic):
 *
 *     qemu-system-aarch64 ... -plugin insn_count.so,out=/host/dir/window
 *
 * A benchmark worker run with --count executes "hint #0x70" (a NOP on every
 * arm64 CPU) right before its timed intervals and "hint #0x71" right after.
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
 * The declarations below are the QEMU plugin ABI (version 1, QEMU 4.2 to
 * 8.x) that this file uses, stated here so the build needs no QEMU headers.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

struct block {
	uint64_t vaddr;
	uint64_t insns;
	uint64_t entered;       /* incremented inline by the translated code */
};

static struct block **chunks;
static size_t nchunks, used;     /* used: blocks in the last chunk */
static char out_prefix[4096];
static unsigned window;
static int open_window;

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

static void clear(struct block *b, void *arg)
{
	(void)arg;
	b->entered = 0;
}

static void dump(struct block *b, void *arg)
{
	if (b->entered)
		fprintf((FILE *)arg, "%" PRIx64 " %" PRIu64 "\n", b->vaddr, b->entered * b->insns);
}

static void on_start(unsigned int vcpu, void *arg)
{
	(void)vcpu, (void)arg;
	for_each_block(clear, NULL);
	open_window = 1;
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
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		uint32_t w = word(insn);
		if (w == (MARK_START))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_start, QEMU_PLUGIN_CB_NO_REGS, NULL);
		else if (w == (MARK_STOP))
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_stop, QEMU_PLUGIN_CB_NO_REGS, NULL);
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
	for (int i = 0; i < argc; i++)
		if (strncmp(argv[i], "out=", 4) == 0)
			snprintf(out_prefix, sizeof out_prefix, "%s", argv[i] + 4);
	if (!out_prefix[0]) {
		fprintf(stderr, "insn_count: give out=PATH_PREFIX\n");
		return -1;
	}
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
	qemu_plugin_register_atexit_cb(id, on_quit, NULL);
	return 0;
}
