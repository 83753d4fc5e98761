/* cmd_int.h: what lull-kv's command files share (cmd.c, and the
 * collection commands in cmd_types.c): the command table's entries and
 * the helpers every command uses. Not for the socket side: that goes
 * through cmd.h. */
#ifndef LULL_KV_CMD_INT_H
#define LULL_KV_CMD_INT_H

#include "cmd.h"

typedef void kv_cmd_fn(kv *k, kv_client *cl, const resp_arg *a, size_t argc,
                       buf *out);

enum {
    CMD_WRITE = 0x1,      /* changes the keyspace: refused on a replica, and
                             what a primary's log may hold */
    CMD_PUBSUB = 0x2,     /* allowed while subscribed (RESP2) */
    CMD_NOQUEUE = 0x4,    /* runs at once inside MULTI (MULTI, EXEC, DISCARD) */
    CMD_SERVER = 0x8,     /* the server's to run (REPLSYNC): kv_exec
                             returns KV_SERVER once its checks pass */
    CMD_NOMULTI = 0x10,   /* refused inside MULTI, and the transaction with
                             it (REPLSYNC, as Redis refuses SYNC) */
    CMD_CONTAINER = 0x20, /* runs as its subcommand (CLIENT KILL ...,
                             CONFIG GET ...): kv_client_subcommand */
    CMD_LOGGED = 0x40,    /* not a write, but logged, so a replica runs it
                             from the log too (PUBLISH) */
};

typedef struct kv_cmd {
    const char *name; /* lower case: Redis' errors name commands so; a
                         subcommand "client|kill", as Redis names it */
    int arity;        /* Redis' convention: n exactly, -n at least n
                         (the name counts) */
    unsigned flags;   /* CMD_* */
    kv_cmd_fn *fn;    /* NULL for a container and a CMD_SERVER command */
} kv_cmd;

/* The subcommand of CLIENT or PUBSUB (container) named by name, or NULL
 * (CONFIG, the other CMD_CONTAINER command, has its table in cmd.c). The
 * subcommand is found before the checks (an unknown one is refused as
 * Redis refuses it, spoiling a transaction), and its own arity and flags
 * are the ones checked. */
const kv_cmd *kv_client_subcommand(const kv_cmd *container,
                                   const resp_arg *name);
/* Redis' error for a container's subcommand it does not know (lead
 * "unknown subcommand"), or one a subcommand's own check refuses (lead
 * "unknown subcommand or wrong number of arguments for"): a[1] as sent,
 * a[0] in upper case. */
void kv_reply_bad_sub(buf *out, const char *lead, const resp_arg *a);

/* A channel's (or pattern's) subscribers: the data of its entry in
 * kv.channels or kv.patterns. */
typedef struct kv_chan {
    kv_sub *head;
    size_t subs; /* how many: PUBSUB NUMSUB in one step */
} kv_chan;

/* The commands of cmd_types.c and cmd_client.c: add them to the table. */
void kv_types_init(void);
void kv_client_commands_init(void);
/* Runs a command that passed kv_exec's checks (EXEC's queue). */
void kv_run(kv *k, kv_client *cl, const resp_arg *a, size_t argc, buf *out);
/* Queues a copy of a command (MULTI). False when out of memory. */
bool kv_queue(kv_client *cl, const resp_arg *a, size_t argc);
/* Drops the transaction: its queue freed, the client out of MULTI, its
 * watches gone. */
void kv_discard(kv *k, kv_client *cl);
/* WATCH's side of a write: the keys record a[0..argc) names (as kv_log
 * is given it) are written; every watched key that is there is (a flush:
 * kv_watch_touch_all's rule with nothing to replace the keyspace, as
 * Redis' FLUSHALL). Neither while a snapshot loads (kv.loading). */
void kv_watch_touch_record(kv *k, const resp_arg *a, size_t argc);
void kv_watch_touch_present(kv *k);
/* A write that changed nothing, so logs nothing, yet is one to WATCH in
 * Redis (an LTRIM that removes nothing): the key's watchers fail. */
void kv_watch_touch_key(kv *k, const resp_arg *key);
/* The client watches nothing (EXEC, DISCARD, UNWATCH, RESET, its end). */
void kv_unwatch(kv *k, kv_client *cl);
/* Adds commands to the table (at start-up, once). */
void kv_commands_add(const kv_cmd *cmds, size_t n);
const kv_cmd *kv_command(const resp_arg *name);
static inline bool kv_arity_ok(const kv_cmd *c, size_t argc) {
    return c->arity > 0 ? argc == (size_t)c->arity : argc >= (size_t)-c->arity;
}

/* The current command's time (ms, kv.clock), read once per command. */
int64_t kv_now(kv *k);
/* The key as a command sees it: NULL when missing or expired (a primary
 * deletes an expired key at once and logs the DEL; a replica leaves it
 * for its primary's DEL). */
dict_entry *kv_lookup(kv *k, const resp_arg *key);
/* Drops a key (no log: the command logs what it did). */
void kv_delete(kv *k, dict_entry *e);
/* Sets or (when <= 0) clears a key's expiry. 0 or -ENOMEM. */
int kv_set_expire(kv *k, dict_entry *e, int64_t when);
/* Appends a record to a primary's log (nothing on a replica). Out of
 * memory stops lull-kv: a replica must never miss a write. */
void kv_log(kv *k, const resp_arg *a, size_t argc);
/* Room in the write log for what the write `a` (argc words; a transaction:
 * the lengths of its records, `len` and `nrec` added up by the caller)
 * will log, asked before it runs: false, with -OOM said in out, when there
 * is none, and the write must not run. */
bool kv_log_room(kv *k, size_t len, size_t nrec, buf *out);
/* The room kv_log_room asks for one write of these words: its record, and
 * what it may log besides or instead (a MULTI before it, a record
 * rewritten with longer numbers, the DELs of keys it finds expired). */
size_t kv_log_need(const resp_arg *a, size_t argc, size_t *nrec);
/* EXEC asked the log for len bytes and nrec records for its writes (0:
 * none, its end): kv_log_room and a read's DEL of an expired key inside
 * it ask for what is left of them too. */
void kv_exec_room_set(kv *k, size_t len, size_t nrec);
/* What was logged since the log's end and record count were (end, nrec)
 * asked for room of its own (kv_log_room): it leaves EXEC's writes
 * theirs. */
void kv_exec_room_extra(kv *k, uint64_t end, size_t nrec);
void kv_oom(const char *what) __attribute__((noreturn));

/* SCAN's cursor as Redis reads it (strtoul's rules); false: invalid. */
bool kv_scan_cursor(const resp_arg *arg, unsigned long long *cur);

/* INCRBYFLOAT's numbers, as Redis reads (string2ld) and writes
 * (ld2string, LD_STR_HUMAN) them. KV_LD_MAX: Redis' MAX_LONG_DOUBLE_CHARS,
 * the longest spelling read (less one) and the room a result needs. */
#define KV_LD_MAX 5120
bool kv_parse_ld(const char *p, size_t n, long double *v);
size_t kv_format_ld(long double v, char *out); /* out: KV_LD_MAX bytes */
/* v + by spelled into out (KV_LD_MAX bytes): its length, or 0 with Redis'
 * error in `err` when the sum is NaN or infinite. */
size_t kv_add_ld(long double v, long double by, char *out, buf *err);

/* Redis' glob patterns (KEYS, SCAN MATCH, PSUBSCRIBE, CONFIG GET), in
 * O(plen * slen) at worst. */
bool kv_glob(const char *pat, size_t plen, const char *s, size_t slen,
             bool nocase);
/* kv_glob, counting its steps (elements compared with a byte, and bytes
 * of a class read) into *steps: the tests' bound on its work. */
bool kv_glob_steps(const char *pat, size_t plen, const char *s, size_t slen,
                   bool nocase, size_t *steps);

/* What lull-kv answers as (INFO, HELLO): the Redis whose replies it
 * gives, word for word (clients read redis_version to pick the commands
 * and replies they may use). */
#define KV_REDIS_VERSION "7.0.0"

/* Replies, in Redis' words. */
void reply_wrongtype(buf *out);
void reply_not_integer(buf *out);
void reply_syntax(buf *out);
void reply_nil(buf *out);
void reply_ok(buf *out);
void reply_oom(buf *out);
/* An integer argument, or false with the reply. */
bool arg_i64(const resp_arg *a, long long *v, buf *out);

#endif
