/* The child's side of lull_process_spawn: the only code that runs in a new
 * child between its birth and exec.
 *
 * How the child is made: glibc's clone() with CLONE_VM | CLONE_VFORK |
 * CLONE_PIDFD and an exit signal of 0 (the low byte of the flags).
 *   - CLONE_PIDFD hands the parent a pidfd atomically with the child: no
 *     window in which the pid could be reaped by someone else and reused
 *     (posix_spawn + pidfd_open has one: another library's SIGCHLD handler
 *     calling waitpid(-1) may reap a fast child before pidfd_open runs).
 *   - Exit signal 0, until exec: a child that fails before or at exec
 *     raises no SIGCHLD, is not reaped by the kernel when SIGCHLD is
 *     ignored, and is skipped by waitpid(-1) without __WALL, so nobody but
 *     the spawn sees it, and the spawn reaps it (waitid(P_PIDFD, __WALL)).
 *     A successful exec gives it SIGCHLD back (the kernel does so for any
 *     exec'd child), so from then on another library's waitpid(-1), or the
 *     kernel while SIGCHLD is ignored, may reap it first: src/process.c
 *     then reads the status the kernel keeps for the pidfd.
 *   - CLONE_VM | CLONE_VFORK, as posix_spawn does: no copy of the parent's
 *     page tables (fork's cost grows with the parent's memory), and the
 *     calling thread sleeps until the child has exec'd or exited. The child
 *     runs on a stack of its own, an array in the caller's frame, which is
 *     free to use because that caller is asleep meanwhile.
 * clone3() would say the same with a struct, but glibc has no public
 * wrapper that takes a stack and a function, and a raw clone3 system call
 * cannot return into C code on a new stack.
 *
 * Rules for the child, which shares the parent's memory: it calls nothing
 * but system calls, made in place (sys() below), never through a function
 * (no libc function that keeps state, takes a lock or is intercepted by a
 * sanitizer: their interceptors would update the parent's bookkeeping from
 * the child; not even syscall(), which a program may define or wrap),
 * writes only to its own stack and to one int the parent reads once the
 * clone returned (sp->ran_shared: proof that the clone really was
 * CLONE_VM | CLONE_VFORK, so that its return means exec'd or exited), and
 * is compiled without sanitizers or loop-to-memcpy rewriting
 * (CMakeLists.txt). Signals: the parent blocks all of them before the
 * clone, so none runs a parent's handler in the child; the child sets every
 * disposition to its default (also the ignored ones: a child should not
 * inherit SIGPIPE ignored because its parent chose to) and then unblocks
 * all of them, just before exec. A failure writes its errno to a
 * close-on-exec pipe (not to shared memory: valgrind runs such a clone as a
 * fork, without CLONE_VM) and exits with 127; the parent finds the pipe
 * empty when exec succeeded. It does not wait for the pipe's EOF, which
 * every process another thread forks while the pipe is open holds off
 * (src/process.c).
 *
 * Thread: the loop's, which sleeps for the child's set-up and exec. Nothing
 * runs in the background. Spawns that change ids hold one process-wide
 * lock across the clone (ids_lock, below). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/close_range.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lull.h"
#include "spawn.h"

/* glibc's clone(), under its own name: sanitizers intercept `clone` and
 * treat it as fork (re-initialising their state in the child), which with
 * CLONE_VM would rewrite the parent's. */
extern int __clone(int (*fn)(void *), void *stack, int flags, void *arg, ...);

/* The child's stack: its frames plus a PATH_MAX buffer for the PATH
 * search, with room to spare. */
#define STACK_SIZE (32 * 1024)

/* rt_sigaction's and rt_sigprocmask's arguments: all zero is SIG_DFL with
 * no flags and an empty mask, whatever the architecture's struct layout;
 * 64 bytes is more than any layout. The kernel's sigset is 8 bytes. */
static const unsigned char zero_action[64];
static const uint64_t empty_set;

/* One system call, made here: the kernel's result, -errno on failure.
 * Not the C library's syscall(): that is a symbol, and a program may define
 * its own (lull-lab does, to count a library's calls), wrap it
 * (-Wl,--wrap=syscall) or preload a shim that does. Its code would run in
 * this child, in the parent's memory and on this stack, which is an array
 * in the parent's frame: its own state updated from the wrong process, and
 * in an ASan build its frame's redzones poisoned there and never cleared
 * (the exec does not return), stale poison the parent's later frames trip
 * on. glibc's posix_spawn makes its child's calls inline for the same
 * reason. Other architectures fall back to syscall(). */
static long sys(long nr, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8),
                       "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = nr;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory", "cc");
    return x0;
#else
    long ret = syscall(nr, a, b, c, d, e, f);
    return ret == -1 ? -errno : ret;
#endif
}

#define SYS0(nr)          sys(nr, 0, 0, 0, 0, 0, 0)
#define SYS1(nr, a)       sys(nr, (long)(a), 0, 0, 0, 0, 0)
#define SYS2(nr, a, b)    sys(nr, (long)(a), (long)(b), 0, 0, 0, 0)
#define SYS3(nr, a, b, c) sys(nr, (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define SYS4(nr, a, b, c, d)                                                   \
    sys(nr, (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)

static void child_fail(int err_fd, int err) {
    SYS3(SYS_write, err_fd, &err, sizeof err);
    SYS1(SYS_exit, 127);
}

/* The errno of a failed call's result: positive, never 0. */
static int err_of(long r) {
    return r < 0 ? (int)-r : EINVAL;
}

static size_t str_len(const char *s) {
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

static bool has_slash(const char *s) {
    for (; *s; s++)
        if (*s == '/') return true;
    return false;
}

/* execve of file, looked up in sp->path if it has no '/', as execvp does:
 * an entry that does not hold it is skipped; EACCES anywhere is remembered.
 * Returns the errno to report (exec only returns on failure). */
static int exec_search(const lull__spawn *sp) {
    if (has_slash(sp->file))
        return err_of(SYS3(SYS_execve, sp->file, sp->argv, sp->envp));
    char buf[PATH_MAX];
    size_t flen = str_len(sp->file);
    /* No directory holds it: every execve would say ENAMETOOLONG, which
     * the search below reads as "not in this one". */
    if (flen > NAME_MAX) return ENAMETOOLONG;
    bool eacces = false;
    const char *p = sp->path;
    for (;;) {
        const char *end = p;
        while (*end && *end != ':')
            end++;
        size_t dlen = (size_t)(end - p), k = 0;
        if (dlen + 1 + flen + 1 <= sizeof buf) {
            for (; k < dlen; k++)
                buf[k] = p[k];
            if (k) buf[k++] = '/'; /* an empty entry is the cwd */
            for (size_t i = 0; i <= flen; i++)
                buf[k + i] = sp->file[i];
            int err = err_of(SYS3(SYS_execve, buf, sp->argv, sp->envp));
            switch (err) {
            case EACCES:
                eacces = true;
                break;
            case ENOENT:
            case ENOTDIR:
            case ESTALE:
            case ENODEV:
            case ETIMEDOUT:
            case ELOOP:
            case ENAMETOOLONG:
                break;
            default:
                return err; /* it is there, and cannot run */
            }
        }
        if (!*end) break;
        p = end + 1;
    }
    return eacces ? EACCES : ENOENT;
}

static void mark_cloexec(int fd) {
    long fl = SYS2(SYS_fcntl, fd, F_GETFD);
    if (fl >= 0 && !(fl & FD_CLOEXEC))
        SYS3(SYS_fcntl, fd, F_SETFD, fl | FD_CLOEXEC);
}

/* The head of the kernel's struct linux_dirent64 (getdents64); the name
 * follows, NUL-terminated, and d_reclen bytes end the record. */
typedef struct {
    uint64_t d_ino;
    int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[1];
} dirent64;

/* The fd a /proc/self/fd entry names; -1 for "." and "..". */
static int fd_of(const char *name) {
    int fd = 0;
    if (!*name) return -1;
    for (; *name; name++) {
        if (*name < '0' || *name > '9' || fd > INT_MAX / 10 - 1) return -1;
        fd = fd * 10 + (*name - '0');
    }
    return fd;
}

/* Every fd from n up closes at exec: close_range marks them all at once
 * (Linux 5.11). Where it is missing or a seccomp filter refuses it, the
 * fds open are read from /proc/self/fd (as glibc's closefrom falls back
 * to): a sweep up to the soft RLIMIT_NOFILE would miss an fd above it
 * (opened before the limit was lowered, or inherited so) and cost one
 * system call per possible fd (a million, under some container
 * runtimes'). Without /proc, or no fd free to read it, that sweep. */
static void cloexec_the_rest(const lull__spawn *sp, int n) {
    if (SYS3(SYS_close_range, (unsigned)n, ~0u, CLOSE_RANGE_CLOEXEC) == 0)
        return;
    long dir = SYS4(SYS_openat, AT_FDCWD, "/proc/self/fd",
                    O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dir >= 0) {
        _Alignas(8) char buf[1024]; /* records are 8-byte aligned */
        long got;
        while ((got = SYS3(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
            for (long at = 0; at < got;) {
                const dirent64 *d = (const dirent64 *)(buf + at);
                at += d->d_reclen;
                int fd = fd_of(d->d_name);
                if (fd >= n && fd != dir) mark_cloexec(fd);
            }
        }
        SYS1(SYS_close, dir); /* it may hold a closed fd below n */
        if (got == 0) return;
    }
    for (int fd = n; fd < sp->fd_limit; fd++)
        mark_cloexec(fd);
}

/* The kernel's struct rlimit64 (prlimit64): two 64-bit limits. */
typedef struct {
    uint64_t cur, max;
} limit64;

/* Who the child runs as: limits first (raising a hard limit needs the
 * privilege the id change drops), then groups, gid, uid, in that order
 * (after setuid, setgid is no longer permitted). Raw system calls: glibc's
 * setuid would broadcast the change to every thread it knows, which in a
 * CLONE_VM child are the parent's. The child is a process of its own (no
 * CLONE_THREAD), so the call changes it alone. */
static void become(const lull__spawn *sp, int efd) {
    for (int i = 0; i < sp->rlimit_count; i++) {
        limit64 l = {sp->rlimits[i].cur, sp->rlimits[i].max};
        long r = SYS4(SYS_prlimit64, 0, sp->rlimits[i].resource, &l, NULL);
        if (r < 0) child_fail(efd, err_of(r));
    }
    bool ids = sp->flags & (LULL_PROCESS_SETUID | LULL_PROCESS_SETGID);
    long r;
    if (sp->set_groups) {
        if ((r = SYS2(SYS_setgroups, sp->group_count, sp->groups)) < 0)
            child_fail(efd, err_of(r));
    } else if (ids) {
        /* The parent's groups (root's, say) must not follow a drop; an
         * unprivileged parent cannot clear them, and its setuid below
         * reports that. */
        SYS2(SYS_setgroups, 0, NULL);
    }
    if ((sp->flags & LULL_PROCESS_SETGID) &&
        (r = SYS1(SYS_setgid, sp->gid)) < 0)
        child_fail(efd, err_of(r));
    if ((sp->flags & LULL_PROCESS_SETUID) &&
        (r = SYS1(SYS_setuid, sp->uid)) < 0)
        child_fail(efd, err_of(r));
}

/* Whether fd is still to be read by a placement not yet made. */
static bool read_by_pending(const int *src, const bool *placed, int n, int fd) {
    for (int j = 0; j < n; j++)
        if (!placed[j] && src[j] == fd) return true;
    return false;
}

/* Puts src[i] at fd i for every i below n, all as if at once: a parallel
 * move. A target is written only when no placement still to be made reads
 * it, so no source is overwritten before its last use, and no spare fd is
 * needed, which is what lets the fds reach the last one below the fd limit
 * (the report pipe takes that one). Only a cycle (7 to 8 and 8 to 7) needs
 * a spare: one source of it moves above the targets. Targets with no
 * source close last, once nothing reads them. */
static void place_fds(int *src, int n, int efd) {
    bool placed[LULL_STDIO_MAX];
    int left = 0;
    for (int i = 0; i < n; i++) {
        placed[i] = src[i] < 0 || src[i] == i;
        if (!placed[i]) left++;
    }
    while (left > 0) {
        bool moved = false;
        for (int i = 0; i < n; i++) {
            if (placed[i] || read_by_pending(src, placed, n, i)) continue;
            long r = SYS3(SYS_dup3, src[i], i, 0);
            if (r < 0) child_fail(efd, err_of(r));
            placed[i] = true;
            left--;
            moved = true;
        }
        if (moved) continue;
        int first = 0; /* every target left is read by another: a cycle */
        while (placed[first])
            first++;
        int spare = (int)SYS3(SYS_fcntl, first, F_DUPFD_CLOEXEC, n);
        if (spare < 0) child_fail(efd, err_of(spare));
        for (int j = 0; j < n; j++)
            if (!placed[j] && src[j] == first) src[j] = spare;
    }
    for (int i = 0; i < n; i++) {
        if (src[i] < 0)
            SYS1(SYS_close, i);
        else if (src[i] == i)
            SYS3(SYS_fcntl, i, F_SETFD, 0); /* keep it across exec */
    }
}

static int child_main(void *arg) {
    const lull__spawn *sp = arg;
    *sp->ran_shared = 1; /* the parent sleeps until exec or exit */
    int n = sp->stdio_count;
    int efd = sp->err_fd;
    for (int s = 1; s <= 64; s++)
        if (s != SIGKILL && s != SIGSTOP)
            SYS4(SYS_rt_sigaction, s, zero_action, NULL, sizeof empty_set);
    bool session =
        sp->flags & (LULL_PROCESS_NEW_SESSION | LULL_PROCESS_CONTROLLING_TTY);
    long r;
    if (session && (r = SYS0(SYS_setsid)) < 0) child_fail(efd, err_of(r));
    if ((sp->flags & LULL_PROCESS_NEW_GROUP) && !session &&
        (r = SYS2(SYS_setpgid, 0, 0)) < 0)
        child_fail(efd, err_of(r));
    /* The report pipe lives above the fds being placed, or placing one
     * would overwrite (or close) it. */
    if (efd < n) {
        efd = (int)SYS3(SYS_fcntl, efd, F_DUPFD_CLOEXEC, n);
        if (efd < 0) SYS1(SYS_exit, 127); /* no way to say why */
    }
    int src[LULL_STDIO_MAX];
    for (int i = 0; i < n; i++)
        src[i] = sp->stdio[i];
    place_fds(src, n, efd);
    if ((sp->flags & LULL_PROCESS_CONTROLLING_TTY) &&
        (r = SYS3(SYS_ioctl, 0, TIOCSCTTY, 0)) < 0)
        child_fail(efd, err_of(r));
    if (sp->cwd && (r = SYS1(SYS_chdir, sp->cwd)) < 0)
        child_fail(efd, err_of(r));
    become(sp, efd);
    cloexec_the_rest(sp, n);
    SYS4(SYS_rt_sigprocmask, SIG_SETMASK, &empty_set, NULL, sizeof empty_set);
    child_fail(efd, exec_search(sp));
    return 127;
}

/* A child that changes its ids (SETUID, SETGID) does so in the parent's
 * memory, and the kernel marks that memory not dumpable at the change
 * (fs.suid_dumpable: 0 on most systems): the parent, whose ids never
 * changed, would lose its core dumps, and its /proc files and ptrace would
 * be root's alone, for the rest of its life. So the parent puts its flag
 * back once the clone returned, when the child has exec'd (a memory of its
 * own, whose flag exec sets) or exited. Never the child itself, before
 * exec: a task of the new uid sharing the parent's memory must stay out of
 * that uid's ptrace reach (the reason the kernel clears the flag). Such
 * spawns go one at a time, so that none puts the flag back while another
 * child of changed ids still shares the memory, nor reads the flag another
 * cleared; and fork() waits for one in flight (atfork), so that no copy is
 * made with the flag cleared. A flag of 2 (SUID_DUMP_ROOT, the parent's
 * own id change) cannot be set by prctl and is left as the kernel makes
 * it. A PR_SET_DUMPABLE another thread makes during such a spawn may be
 * undone by its restore: the flag read before the clone wins. But not the
 * kernel's mark for an id change of the process's own made meanwhile
 * (another thread's setuid or setgid, which glibc makes on every thread,
 * this one in a signal handler at any point here): that mark stands, or
 * a service that drops its privileges while it spawns a worker would be
 * dumpable, and its memory open to the new ids' ptrace, under them. */
static pthread_once_t ids_atfork_once = PTHREAD_ONCE_INIT;
static int ids_atfork_error; /* pthread_atfork's, if it failed */
static pthread_mutex_t ids_lock = PTHREAD_MUTEX_INITIALIZER;

static void ids_lock_take(void) {
    pthread_mutex_lock(&ids_lock);
}

static void ids_lock_give(void) {
    pthread_mutex_unlock(&ids_lock);
}

static void ids_register_atfork(void) {
    ids_atfork_error =
        pthread_atfork(ids_lock_take, ids_lock_give, ids_lock_give);
}

/* The parent's side of a spawn that changes ids, read before the clone:
 * its dumpable flag and the ids the kernel's mark follows (this thread's
 * euid and egid, every thread's under glibc). */
typedef struct ids_before {
    int dumpable;
    uid_t euid;
    gid_t egid;
} ids_before;

static bool ids_same(const ids_before *b) {
    return geteuid() == b->euid && getegid() == b->egid;
}

/* Once the child has exec'd or exited: the flag put back, unless the
 * process changed its own ids since it was read. One that comes after the
 * test but before the restore is seen after it, and marked as the kernel
 * would have (0; where fs.suid_dumpable is 1, stricter than it); one
 * after that marks the memory itself, after the restore. */
static void ids_restore(const ids_before *b) {
    if (b->dumpable != 0 && b->dumpable != 1) return;
    if (!ids_same(b) || prctl(PR_GET_DUMPABLE) == b->dumpable) return;
    (void)prctl(PR_SET_DUMPABLE, b->dumpable);
    if (!ids_same(b)) (void)prctl(PR_SET_DUMPABLE, 0);
}

int lull__spawn_child(const lull__spawn *sp, int *pidfd) {
    bool ids = sp->flags & (LULL_PROCESS_SETUID | LULL_PROCESS_SETGID);
    ids_before before = {.dumpable = -1};
    if (ids) {
        pthread_once(&ids_atfork_once, ids_register_atfork);
        if (ids_atfork_error != 0) return -ids_atfork_error;
        ids_lock_take();
        before.euid = geteuid();
        before.egid = getegid();
        before.dumpable = prctl(PR_GET_DUMPABLE);
    }
    /* Stacks grow down on every architecture lull builds for. */
    _Alignas(16) char stack[STACK_SIZE];
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int fd = -1;
    int pid = __clone(child_main, stack + sizeof stack,
                      CLONE_VM | CLONE_VFORK | CLONE_PIDFD, (void *)sp, &fd);
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ids) {
        /* Shared only when the clone was CLONE_VM (and so CLONE_VFORK: the
         * child has exec'd or exited by now); run as a fork (valgrind),
         * the child changed a copy. */
        if (pid >= 0 && *sp->ran_shared == 1) ids_restore(&before);
        ids_lock_give();
    }
    if (pid < 0) return -err;
    *pidfd = fd;
    return pid;
}
