/*
 * The part of QEMU's TCG plugin API (version 1, as in QEMU 7.2, Debian 12's qemu-user) that
 * qemu-count.c uses, declared from the API's documented signatures. Debian 12 ships no
 * qemu-plugin.h in any package (`dpkg -S qemu-plugin.h` finds nothing); the symbols themselves
 * are exported by the dynamic /usr/bin/qemu-aarch64 (`nm -D /usr/bin/qemu-aarch64 | grep
 * qemu_plugin_`), which resolves them when it dlopens the plugin. Every struct here is opaque:
 * the plugin never looks inside one.
 */
#ifndef QEMU_COUNT_PLUGIN_V1_H
#define QEMU_COUNT_PLUGIN_V1_H

#include <stddef.h>
#include <stdint.h>

#define QEMU_COUNT_EXPORT __attribute__((visibility("default")))

typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;

/* How a callback may touch guest registers; counting needs none. */
enum qemu_plugin_cb_flags {
    QEMU_PLUGIN_CB_NO_REGS,
    QEMU_PLUGIN_CB_R_REGS,
    QEMU_PLUGIN_CB_RW_REGS,
};

typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id,
                                           qemu_plugin_vcpu_tb_trans_cb_t cb);
void qemu_plugin_register_vcpu_tb_exec_cb(struct qemu_plugin_tb *tb,
                                          qemu_plugin_vcpu_udata_cb_t cb,
                                          enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn,
                                            qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb,
                                    void *userdata);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
void qemu_plugin_outs(const char *string);

#endif
