/* The harness behind check.h: a registry of cases and a main() that runs one
 * case by name. Single-threaded; registration happens before main. */
#include "check.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK_MAX_CASES 256 /* far above the largest test file */

static struct {
    const char *name;
    check_fn fn;
} cases[CHECK_MAX_CASES];
static int ncases;

void check_register(const char *name, check_fn fn) {
    if (ncases == CHECK_MAX_CASES) {
        fprintf(stderr, "check: too many cases\n");
        abort();
    }
    cases[ncases].name = name;
    cases[ncases].fn = fn;
    ncases++;
}

void check_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s:%d: FAILED ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* Runs fn in a child process whose stderr goes to a pipe; returns its wait
 * status and fills err (NUL-terminated, truncated to cap - 1 bytes). */
static int run_child(void (*fn)(void *), void *arg, bool quiet_abort, char *err,
                     size_t cap) {
    int fds[2];
    if (pipe(fds) != 0) check_fail(__FILE__, __LINE__, "pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) check_fail(__FILE__, __LINE__, "fork");
    if (pid == 0) {
        close(fds[0]);
        if (quiet_abort) {
            /* The child is expected to abort: no core file. */
            struct rlimit none = {0, 0};
            setrlimit(RLIMIT_CORE, &none);
        }
        dup2(fds[1], STDERR_FILENO);
        close(fds[1]);
        fn(arg);
        fflush(NULL);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    for (;;) {
        char buf[512];
        ssize_t n = read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        size_t take = (size_t)n < cap - 1 - len ? (size_t)n : cap - 1 - len;
        memcpy(err + len, buf, take);
        len += take;
    }
    err[len] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) != pid) {
        if (errno != EINTR) check_fail(__FILE__, __LINE__, "waitpid");
    }
    return status;
}

#define CHILD_STDERR_CAP 8192 /* far above what an assert prints */

bool check_dies(void (*fn)(void *), void *arg, const char *message) {
    char err[CHILD_STDERR_CAP];
    int status = run_child(fn, arg, true, err, sizeof err);
    if (!WIFSIGNALED(status)) {
        fprintf(stderr,
                "check_dies: the child %s %d, expected to die with "
                "\"%s\"; its stderr:\n%s",
                WIFEXITED(status) ? "exited with" : "ended with status",
                WIFEXITED(status) ? WEXITSTATUS(status) : status, message, err);
        return false;
    }
    if (!strstr(err, message)) {
        fprintf(stderr,
                "check_dies: the child died by signal %d without "
                "\"%s\"; its stderr:\n%s",
                WTERMSIG(status), message, err);
        return false;
    }
    return true;
}

bool check_exits_cleanly(void (*fn)(void *), void *arg) {
    char err[CHILD_STDERR_CAP];
    int status = run_child(fn, arg, false, err, sizeof err);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
    fprintf(stderr,
            "check_exits_cleanly: the child ended with status %#x; "
            "its stderr:\n%s",
            status, err);
    return false;
}

bool check_yield_often(void) {
#ifdef LULL_TEST_YIELD_OFTEN
    return true;
#else
    return false;
#endif
}

bool check_debug_build(void) {
#ifdef NDEBUG
    return false;
#else
    return true;
#endif
}

uint64_t check_clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void check_spin_ns(uint64_t ns) {
    uint64_t end = check_clock_ns() + ns;
    while (check_clock_ns() < end) {
    }
}

#ifndef SYS_epoll_pwait2
#define SYS_epoll_pwait2 441 /* the unified number of new syscalls */
#endif

static bool epoll_wait_nr(long nr) {
#ifdef SYS_epoll_wait /* not on aarch64, where libc uses epoll_pwait */
    if (nr == SYS_epoll_wait) return true;
#endif
    return nr == SYS_epoll_pwait || nr == SYS_epoll_pwait2;
}

/* The syscall thread `tid` sleeps in ("running" while it runs) and its
 * first argument; false if it is not blocked in a syscall. */
static bool blocked_in(int tid, long *nr, unsigned long *arg0) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f) check_fail(__FILE__, __LINE__, "cannot read %s", path);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *end;
    *nr = strtol(buf, &end, 10);
    if (end == buf || *nr < 0) return false; /* "running", or -1: no syscall */
    *arg0 = strtoul(end, NULL, 16);
    return true;
}

bool check_in_futex_wait(int tid) {
    long nr;
    unsigned long arg0;
    return blocked_in(tid, &nr, &arg0) && nr == SYS_futex;
}

void check_wait_blocked(int tid, int epoll_fd, const void *futex_word) {
    uint64_t give_up = check_clock_ns() + 10000000000ull;
    for (;;) {
        long nr;
        unsigned long arg0;
        if (blocked_in(tid, &nr, &arg0)) {
            if (epoll_wait_nr(nr) && epoll_fd >= 0 &&
                arg0 == (unsigned long)epoll_fd)
                return;
            if (nr == SYS_futex && futex_word &&
                arg0 == (unsigned long)(uintptr_t)futex_word)
                return;
        }
        if (check_clock_ns() > give_up)
            check_fail(__FILE__, __LINE__,
                       "thread %d not asleep in its loop's wait in 10 s", tid);
        /* Polls every 100 us: a thread that spins here would slow the one
         * it waits for (under valgrind threads run one at a time). */
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

#define CHECK_TRACE_MAX 4096 /* far above the longest order a case records */

static int trace[CHECK_TRACE_MAX];
static int ntrace;

void check_trace_reset(void) {
    ntrace = 0;
}

void check_trace(int id) {
    if (ntrace == CHECK_TRACE_MAX) check_fail(__FILE__, __LINE__, "trace full");
    trace[ntrace++] = id;
}

int check_trace_len(void) {
    return ntrace;
}

int check_trace_find(int id) {
    for (int i = 0; i < ntrace; i++)
        if (trace[i] == id) return i;
    return -1;
}

static void trace_print(const char *what, const int *v, int n) {
    fprintf(stderr, "  %s:", what);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %d", v[i]);
    fputc('\n', stderr);
}

void check_trace_expect(const char *file, int line, const int *want, int n) {
    bool same = n == ntrace;
    for (int i = 0; same && i < n; i++)
        same = want[i] == trace[i];
    if (same) return;
    trace_print("want", want, n);
    trace_print("got ", trace, ntrace);
    check_fail(file, line, "trace differs");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        for (int i = 0; i < ncases; i++) {
            printf("%s\n", cases[i].name);
            cases[i].fn();
        }
        printf("%d passed, 0 failed\n", ncases);
        return 0;
    }
    for (int i = 0; i < ncases; i++) {
        if (strcmp(cases[i].name, argv[1]) == 0) {
            cases[i].fn();
            return 0;
        }
    }
    fprintf(stderr, "check: no case named %s\n", argv[1]);
    return 2;
}

#ifdef CHECK_SANDBOX_ARCH
void check_deny_syscalls(const int *nrs, int n, int err) {
    struct sock_filter f[16];
    int k = 0;
    if (n > 6) check_fail(__FILE__, __LINE__, "check_deny_syscalls: n > 6");
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, arch));
    f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                          CHECK_SANDBOX_ARCH, 1, 0);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    f[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                          offsetof(struct seccomp_data, nr));
    for (int i = 0; i < n; i++) {
        f[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                              (unsigned)nrs[i], 0, 1);
        f[k++] = (struct sock_filter)BPF_STMT(
            BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & 0xffff));
    }
    f[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {.len = (unsigned short)k, .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        check_fail(__FILE__, __LINE__, "seccomp filter refused: %s",
                   strerror(errno));
}
#endif

void check_fds_exhaust(struct rlimit *old) {
    CHECK_EQ(getrlimit(RLIMIT_NOFILE, old), 0);
    int probe = dup(0);
    CHECK(probe >= 0);
    close(probe);
    struct rlimit low = *old;
    low.rlim_cur = (rlim_t)probe; /* every fd below it is taken */
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
}

void check_fds_restore(const struct rlimit *old) {
    CHECK_EQ(setrlimit(RLIMIT_NOFILE, old), 0);
}
