/* A small test harness: TEST(name) registers a case; the binary runs the case
 * named by argv[1] (ctest gives each case its own process and timeout), or
 * every case in order when run without arguments.
 *
 * CHECK* macros report file:line and the values, then exit(1): a failing
 * check ends the case. TEST_THREADED marks cases that start threads, so the
 * ThreadSanitizer pass runs them. */
#ifndef LULL_CHECK_H
#define LULL_CHECK_H

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*check_fn)(void);
void check_register(const char *name, check_fn fn);
void check_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
/* Runs fn in a child process; true when the child died by a signal (an
 * assert aborts) and wrote `message` to stderr, so a death for another
 * reason (a failed CHECK, a crash elsewhere) does not pass. On false, the
 * child's stderr is printed. */
bool check_dies(void (*fn)(void *), void *arg, const char *message);
/* Runs fn in a child process; true when it returned (exit status 0). */
bool check_exits_cleanly(void (*fn)(void *), void *arg);
/* True when asserts are compiled into the library (debug builds). */
bool check_debug_build(void);
/* True in a LULL_TEST_YIELD_OFTEN build (src/clock.c), where slices end at
 * random points: a case that measures the quantum itself skips, with a
 * printed line, or skips the one check that measures it. */
bool check_yield_often(void);

/* Installs a seccomp filter on this process that fails the system calls
 * numbered nrs[0..n-1] (at most 6) with `err`, as container runtimes and
 * systemd's SystemCallFilter= do; no root needed (PR_SET_NO_NEW_PRIVS). A
 * filter cannot be removed: call it in a child (check_exits_cleanly).
 * Defined where CHECK_SANDBOX_ARCH is. */
#if defined(__x86_64__)
#define CHECK_SANDBOX_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define CHECK_SANDBOX_ARCH AUDIT_ARCH_AARCH64
#endif
void check_deny_syscalls(const int *nrs, int n, int err);

/* Lowers RLIMIT_NOFILE's soft limit to the lowest free fd, so that the
 * next fd any call opens fails with EMFILE; *old keeps the limit for
 * check_fds_restore. */
struct rlimit;
void check_fds_exhaust(struct rlimit *old);
void check_fds_restore(const struct rlimit *old);

/* The real monotonic clock in ns, and a busy-wait on it (for the cases that
 * need real CPU time: quantum, stalls). */
uint64_t check_clock_ns(void);
void check_spin_ns(uint64_t ns);

/* Waits until thread `tid` of this process sleeps in the kernel in an epoll
 * wait on `epoll_fd` or a futex wait on `futex_word` (pass a loop's
 * backend_fd and &sleeping, src/internal.h), as /proc says; fails after
 * 10 s. For a case that must act only once a loop has gone to sleep (a
 * wake-up it then causes is the only one): "S" in /proc's stat is not
 * enough, since a thread waiting for a lock (valgrind's scheduler lock, to
 * begin with) or on its way to the wait reads "S" too. */
void check_wait_blocked(int tid, int epoll_fd, const void *futex_word);
/* True when thread `tid` of this process sleeps in a futex wait on any
 * word, as /proc says: e.g. a fork() whose fork handler waits for a lock
 * another thread holds. */
bool check_in_futex_wait(int tid);

/* An order log: callbacks append ids, the case compares the sequence with
 * CHECK_TRACE(id, ...). Reset it at the start of every case that uses it. */
void check_trace_reset(void);
void check_trace(int id);
int check_trace_len(void);
int check_trace_find(int id); /* index of the first `id`, or -1 */
void check_trace_expect(const char *file, int line, const int *want, int n);

#define CHECK_REGISTER_(name)                                             \
    static void test_##name(void);                                        \
    __attribute__((constructor)) static void check_reg_##name(void) {     \
        check_register(#name, test_##name);                               \
    }                                                                     \
    static void test_##name(void)

#define CHECK_SKIP_IF_YIELD_OFTEN()                                       \
    do {                                                                  \
        if (check_yield_often()) {                                        \
            printf("skipped: measures the quantum, and slices end at "    \
                   "random in this build (LULL_TEST_YIELD_OFTEN)\n");     \
            return;                                                       \
        }                                                                 \
    } while (0)

#define TEST(name) CHECK_REGISTER_(name)
#define TEST_THREADED(name) CHECK_REGISTER_(name)

#define CHECK(cond)                                                       \
    do {                                                                  \
        if (!(cond)) check_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);  \
    } while (0)

#define CHECK_EQ(a, b)                                                    \
    do {                                                                  \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);   \
        if (check_a_ != check_b_)                                         \
            check_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a,  \
                       #b, check_a_, check_b_);                           \
    } while (0)

#define CHECK_U64_EQ(a, b)                                                \
    do {                                                                  \
        uint64_t check_a_ = (uint64_t)(a), check_b_ = (uint64_t)(b);      \
        if (check_a_ != check_b_)                                         \
            check_fail(__FILE__, __LINE__,                                \
                       "%s == %s: %" PRIu64 " != %" PRIu64, #a, #b,       \
                       check_a_, check_b_);                               \
    } while (0)

#define CHECK_LE(a, b)                                                    \
    do {                                                                  \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);   \
        if (!(check_a_ <= check_b_))                                      \
            check_fail(__FILE__, __LINE__, "%s <= %s: %lld > %lld", #a,   \
                       #b, check_a_, check_b_);                           \
    } while (0)

#define CHECK_TRACE(...)                                                  \
    check_trace_expect(__FILE__, __LINE__, (const int[]){__VA_ARGS__},    \
                       (int)(sizeof((const int[]){__VA_ARGS__}) /         \
                             sizeof(int)))

#endif
