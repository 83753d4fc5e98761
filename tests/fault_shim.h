/* The fault-injection shim (fault_shim.c): the system calls lull makes,
 * wrapped at link time (-Wl,--wrap=, tests/CMakeLists.txt and
 * kv/CMakeLists.txt list them) so that a program linked with lull
 * statically can make them fail on demand. Two ways to drive it:
 *
 *   - rules (tests/test_faults.c): the Nth matching call, or seeded random
 *     calls, fail with an errno or come up short, while armed;
 *   - an I/O plan (kv/sim.c): shim_io_before decides, for every recv,
 *     recvmsg, sendmsg and send, whether the call fails, is cut short at a
 *     length it picks, or goes through; shim_io_after sees what each
 *     call that went through moved, and may change what a sendmsg
 *     returns (planted miscounts). The plan
 *     draws from its own seeded generator, so a seed replays its faults.
 *
 * With neither, every call goes straight to the real one. */
#ifndef LULL_FAULT_SHIM_H
#define LULL_FAULT_SHIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum {
    K_RECV, /* recv and recvmsg */
    K_SENDMSG, /* sendmsg and send */
    K_ACCEPT,
    K_CONNECT,
    K_EPOLL_CTL,
    K_EPOLL_WAIT,
    K_EPOLL_PWAIT2,
    K_EVENTFD_WRITE,
    K_EVENTFD_READ,
    K_FUTEX_WAIT,
    K_MALLOC, /* malloc, calloc and realloc */
    K_COUNT
};
extern const char *const kind_name[K_COUNT];

/* Not an errno: the call is made with a shorter length (recv, sendmsg). */
#define SHORT (-1)
/* The errnos counted, in the order they are printed. */
#define NERR 11
extern const int err_list[NERR];
const char *err_name(int e);
int err_index(int e);

/* A rule: the calls of `kind` on `fd` (-1: any) with epoll op `op` (0: any)
 * are counted; calls from..from+count-1 (1-based) fail, each with
 * probability 1/one_in (1: always), with an errno drawn from errs. */
typedef struct rule {
    int kind, fd, op;
    uint64_t from, count;
    uint32_t one_in;
    int errs[12];
    int nerr;
    uint64_t seen, hits;
} rule;

#define RULES_MAX 16
extern rule rules[RULES_MAX];
extern int nrules;
extern bool armed; /* atomic */
extern pthread_mutex_t shim_lock;
extern uint64_t injected[K_COUNT][NERR]; /* under shim_lock */
extern uint64_t calls[K_COUNT];          /* atomic: every call, armed or not */
extern uint64_t shim_rng;
/* Told of every injected fault (the random case attributes them). */
extern void (*on_inject)(int kind, int fd, int err);

uint64_t rng_next(uint64_t *s);
rule *add_rule(int kind, int fd, int op, uint64_t from, uint64_t count,
               uint32_t one_in, const int *errs, int nerr);
/* The Nth matching call (and `count` after it) fails with err. */
rule *fail_nth(int kind, int fd, uint64_t nth, uint64_t count, int err);
void arm(bool on);
void shim_reset(uint64_t seed);
uint64_t hits_of(const rule *r);
uint64_t injected_total(int kind);
/* The fault for this call: 0 (none), an errno, or SHORT. */
int fault_for(int kind, int fd, int op);
size_t shorter(size_t len);
/* Prints what was injected, one line per kind. */
void report(const char *what);

/* The I/O plan (one thread: the loop's). Before each recv, recvmsg,
 * sendmsg or send (kind K_RECV or K_SENDMSG) of `*len` bytes: 0 makes the
 * call as asked, an errno fails it with that errno, SHORT makes it with
 * *len cut down (1 <= *len < asked). After a call that went through and
 * moved n of `asked` bytes: what it returns (a sendmsg's or send's count
 * may be planted wrong; a recv's is counted, never changed); after one the
 * kernel failed, n is -1 and errno says why (returned as it came, errno
 * kept: the plan learns of the kernel's own failures). NULL: no plan. */
extern int (*shim_io_before)(int kind, int fd, size_t *len);
extern ssize_t (*shim_io_after)(int kind, int fd, ssize_t n, size_t asked);

#endif
