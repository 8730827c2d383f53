/*
 * qemu-count: counts the guest instructions a program executes under QEMU's user-mode emulator
 * (qemu-aarch64 with -plugin), and writes the total when the guest exits.
 *
 *   qemu-aarch64 -plugin libqemu-count.so,outfile=PATH[,mode=tb|insn][,format=plain|cachegrind] PROG...
 *
 * Counting is per vCPU (in user mode, one vCPU per guest thread): every callback adds to the
 * slot of the vCPU that runs it, with a relaxed atomic add, so threads never lose each other's
 * counts (unlike a shared inline counter, which drifts by a fraction of a percent on a
 * multi-threaded tokio program). The total is the sum of all slots at exit.
 *
 *   mode=tb    (default) one callback per executed translation block, adding its instruction
 *              count. Exact unless a block is left in its middle (a guest fault or a
 *              non-parallel atomic restarting the block), which a server's normal run does not do.
 *   mode=insn  one callback per executed instruction: exact in every case, slower (see
 *              bench/qemu-count/README.md for the two compared).
 *
 *   format=plain       (default) "instructions N" and "vcpus N" lines.
 *   format=cachegrind  a cachegrind-style "events:"/"summary:" pair, so that `trainer
 *              instructions` can read it (bench/instructions-per-request-emulated): the columns
 *              I1mr and Bcm are written as 0, because QEMU models neither caches nor a branch
 *              predictor.
 *
 * In outfile, "%p" is replaced by the emulator's pid (the guest's pid under qemu-user).
 * Written against plugin API version 1 (QEMU 7.2, Debian 12).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qemu-plugin-v1.h"

QEMU_COUNT_EXPORT int qemu_plugin_version = 1;

#define MAX_VCPUS 1024

/* One cache line per vCPU: threads do not share lines. */
struct slot {
    uint64_t n;
    char pad[56];
};

static struct slot *slots;
static uint64_t overflow;          /* vCPUs beyond MAX_VCPUS, shared */
static unsigned int max_index_seen;
static char *outfile;
static int per_insn;
static int cachegrind;

static inline void add(unsigned int vcpu, uint64_t k)
{
    if (vcpu < MAX_VCPUS) {
        __atomic_fetch_add(&slots[vcpu].n, k, __ATOMIC_RELAXED);
    } else {
        __atomic_fetch_add(&overflow, k, __ATOMIC_RELAXED);
    }
    unsigned int seen = __atomic_load_n(&max_index_seen, __ATOMIC_RELAXED);
    while (vcpu + 1 > seen &&
           !__atomic_compare_exchange_n(&max_index_seen, &seen, vcpu + 1, 1,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

static void tb_exec(unsigned int vcpu, void *udata)
{
    add(vcpu, (uint64_t)(uintptr_t)udata);
}

static void insn_exec(unsigned int vcpu, void *udata)
{
    (void)udata;
    add(vcpu, 1);
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (per_insn) {
        for (size_t i = 0; i < n; i++) {
            qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, i), insn_exec,
                                                   QEMU_PLUGIN_CB_NO_REGS, NULL);
        }
    } else {
        qemu_plugin_register_vcpu_tb_exec_cb(tb, tb_exec, QEMU_PLUGIN_CB_NO_REGS,
                                             (void *)(uintptr_t)n);
    }
}

/* outfile with every "%p" replaced by our pid. */
static char *expand(const char *pattern)
{
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    size_t len = strlen(pattern) + 1;
    for (const char *p = strstr(pattern, "%p"); p; p = strstr(p + 2, "%p")) {
        len += strlen(pid);
    }
    char *out = malloc(len), *o = out;
    if (!out) {
        return NULL;
    }
    for (const char *p = pattern; *p;) {
        if (p[0] == '%' && p[1] == 'p') {
            o += sprintf(o, "%s", pid);
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

static void at_exit(qemu_plugin_id_t id, void *udata)
{
    (void)id;
    (void)udata;
    uint64_t total = __atomic_load_n(&overflow, __ATOMIC_RELAXED);
    for (unsigned int i = 0; i < MAX_VCPUS; i++) {
        total += __atomic_load_n(&slots[i].n, __ATOMIC_RELAXED);
    }
    unsigned int vcpus = __atomic_load_n(&max_index_seen, __ATOMIC_RELAXED);
    char *path = expand(outfile);
    FILE *f = path ? fopen(path, "w") : NULL;
    if (!f) {
        fprintf(stderr, "qemu-count: cannot write %s: %s\n", path ? path : outfile,
                strerror(errno));
        free(path);
        return;
    }
    if (cachegrind) {
        fprintf(f,
                "# qemu-count (mode=%s): guest instructions; QEMU models no caches and no "
                "branch predictor, so I1mr and Bcm are not measured (0)\n"
                "events: Ir I1mr Bcm\nsummary: %llu 0 0\n",
                per_insn ? "insn" : "tb", (unsigned long long)total);
    } else {
        fprintf(f, "instructions %llu\nvcpus %u\nmode %s\n", (unsigned long long)total, vcpus,
                per_insn ? "insn" : "tb");
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "qemu-count: writing %s: %s\n", path, strerror(errno));
    }
    free(path);
}

QEMU_COUNT_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                          int argc, char **argv)
{
    (void)info;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "outfile=", 8) == 0) {
            outfile = strdup(a + 8);
        } else if (strcmp(a, "mode=tb") == 0) {
            per_insn = 0;
        } else if (strcmp(a, "mode=insn") == 0) {
            per_insn = 1;
        } else if (strcmp(a, "format=plain") == 0) {
            cachegrind = 0;
        } else if (strcmp(a, "format=cachegrind") == 0) {
            cachegrind = 1;
        } else {
            fprintf(stderr, "qemu-count: unknown argument %s (outfile=PATH, mode=tb|insn, "
                            "format=plain|cachegrind)\n", a);
            return -1;
        }
    }
    if (!outfile || !*outfile) {
        fprintf(stderr, "qemu-count: needs outfile=PATH\n");
        return -1;
    }
    slots = aligned_alloc(64, MAX_VCPUS * sizeof *slots);
    if (!slots) {
        return -1;
    }
    memset(slots, 0, MAX_VCPUS * sizeof *slots);
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
