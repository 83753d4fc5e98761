/* Child processes as handles: spawn a program, learn of its exit on the
 * loop, kill it.
 *
 * Owns: a process handle's pidfd and its watcher, the parent's ends of the
 * child's stdio until they are handed over as streams, and reaping the
 * child. The child itself is made in src/spawn.c (clone with CLONE_PIDFD
 * and exit signal 0: why, there). One thread: the loop's; detached
 * children alone are reaped by a thread of lull's (the last section).
 *
 * Exit. The pidfd turns readable when the child has exited; the watcher
 * then reaps it with waitid(P_PIDFD, WNOHANG | __WALL), closes the pidfd
 * and calls on_exit: exactly once, the handle's last callback, never inside
 * the call that started or closed it. No SIGCHLD handler, no process-wide
 * table of watched children: nothing is shared with other loops, threads
 * or libraries (but the detached children's reaper), and
 * nothing waits for a pid it does not own. Another part of the program may
 * still reap lull's child first (a SIGCHLD handler that calls waitpid(-1),
 * or SIGCHLD set to SIG_IGN, which makes the kernel reap): waitid then says
 * ECHILD, and the status comes from what the kernel keeps for the pidfd
 * (PIDFD_INFO_EXIT, Linux 6.15); where it keeps nothing, on_exit gets
 * -ECHILD, still once. A pidfd is never reused for another process, so a
 * kill can never reach a stranger (kill(pid) can, once the pid is reaped and
 * reused).
 *
 * One free path. on_exit is the last callback whoever ended the child —
 * it exited, a kill, lull_process_close — and the owner frees the handle in
 * it. lull_process_detach is the one way to end a handle without it: the
 * handle is the caller's when the call returns, and the child's reaping
 * passes to the reaper thread (below). lull_process_close does not end the
 * handle: the child is killed (LULL_PROCESS_KILL_ON_CLOSE) or left to run, and
 * is reaped either way when it ends, so no zombie is left behind by a close. A
 * handle in a forked copy of the loop belongs to a process that is not this
 * one's child (waitid says ECHILD): its exit reports -ECHILD, and a close there
 * kills nothing and reports -ECHILD in a later turn (the done task).
 *
 * A tracer (ptrace) holds a traced child's exit: its pidfd is readable but
 * waitid has nothing until the tracer waits or goes. The pidfd is then
 * watched edge-triggered through an epoll of the handle's own (made on
 * first need), which the tracer's release wakes (wait_for_tracer).
 *
 * Spawn's own failures are its return value: the parent's fds (pipes,
 * /dev/null) and the streams over them are made before the child, and
 * everything made is undone on any failure, the child too (an exec that
 * failed is reaped before spawn returns: it has already exited).
 *
 * Invariants: STARTED from a successful spawn until on_exit is called; the
 * io watches the pidfd exactly while STARTED and the pidfd is open; EXITED
 * once on_exit was called (or is queued to be, DONE_QUEUED).
 *
 * The five rows (README, "The contracts"), for a running child:
 *   Trigger                 the child exits (pidfd readable)
 *   Source of truth         the kernel's state of the child: waitid, or the
 *                           pidfd's exit information
 *   Pending-work predicate  the pidfd is readable (while a tracer holds
 *                           the exit: the pidfd woke since last looked at)
 *   Next deadline or retry  none; a child reaped by someone else whose
 *                           status is not recorded yet is looked at again
 *                           next iteration (the fd stays readable), at most
 *                           EXIT_INFO_RETRIES times
 *   Quiet condition         always while the child runs, and while a
 *                           tracer holds its exit: one fd in epoll */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internal.h"
#include "spawn.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

/* PATH when neither envp nor the parent's environment has one. */
#define PATH_DEFAULT "/usr/local/bin:/usr/bin:/bin"
/* The fcntl fallback of the child's close-on-exec sweep (kernels before
 * close_range's CLOSE_RANGE_CLOEXEC) stops here however high the limit. */
#define FD_SWEEP_MAX (1 << 20)

#define FLAGS_ALL                                                              \
    (LULL_PROCESS_NEW_GROUP | LULL_PROCESS_NEW_SESSION |                       \
     LULL_PROCESS_KILL_ON_CLOSE | LULL_PROCESS_SETUID | LULL_PROCESS_SETGID |  \
     LULL_PROCESS_CONTROLLING_TTY)
/* setgroups' own bound (NGROUPS_MAX, Linux's 65536). */
#define GROUPS_MAX 65536

/* lull_process.state */
#define P_STARTED     0x1u  /* spawned, on_exit not yet called */
#define P_CLOSED      0x2u  /* lull_process_close was called */
#define P_EXITED      0x4u  /* on_exit called, or queued (DONE_QUEUED) */
#define P_DONE_QUEUED 0x8u  /* the done task will call on_exit */
#define P_DETACHED    0x10u /* lull_process_detach ended the handle */

extern char **environ;

/* PIDFD_GET_INFO (linux/pidfd.h of Linux 6.13; its exit information 6.15),
 * declared here for older headers: the first published layout, 64 bytes,
 * which later kernels still accept. */
typedef struct lull__pidfd_info {
    uint64_t mask;
    uint64_t cgroupid;
    uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
    int32_t exit_code; /* a wait status, as waitpid gives it */
} lull__pidfd_info;
#define LULL__PIDFD_INFO_EXIT (1ull << 3)
#define LULL__PIDFD_GET_INFO  _IOWR(0xFF, 11, lull__pidfd_info)
/* How many readable callbacks may find a child reaped by someone else
 * before the kernel recorded its status (microseconds: the reaper is
 * between its wait and release_task): then the status is given up
 * (-ECHILD) rather than spin. */
#define EXIT_INFO_RETRIES 100000

/* A handle made by this process, not inherited through fork(). */
static bool ours(const lull_process *p) {
    return p->owner_pid == (int)getpid();
}

/* pidfd_send_signal, which never reaches a stranger. Where it is refused
 * (ENOSYS: a seccomp filter, valgrind; EPERM: older seccomp profiles, for
 * any call they do not know), kill(pid) once the pidfd says the child has
 * not exited: until it is reaped its pid cannot be reused, and after its
 * exit there is nothing to send. (A child we truly may not signal, a
 * set-uid one, refuses kill() with EPERM too.) */
static int send_signal(int pidfd, int pid, int signum) {
    if (syscall(SYS_pidfd_send_signal, pidfd, signum, NULL, 0) == 0) return 0;
    if (errno != ENOSYS && errno != EPERM) return -errno;
    struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
    if (poll(&pfd, 1, 0) == 1) return 0; /* exited: as for a zombie */
    return kill(pid, signum) < 0 ? -errno : 0;
}

/* Stops watching and closes the pidfd (and the edge epoll, if any). */
static void release_fds(lull_process *p) {
    lull_io_stop(&p->io);
    if (p->io.fd >= 0 && p->io.fd != p->pidfd) close(p->io.fd);
    if (p->pidfd >= 0) close(p->pidfd);
    p->io.fd = -1;
    p->pidfd = -1;
}

static void finish(lull_process *p, int exit_status, int term_signal) {
    release_fds(p);
    p->exit_status = exit_status;
    p->term_signal = term_signal;
    p->state = (p->state & ~(P_STARTED | P_DONE_QUEUED)) | P_EXITED;
    lull__inuse_remove(p); /* free to spawn into, on any loop */
    /* The last callback: p may be freed inside it. */
    p->on_exit(p, exit_status, term_signal);
}

/* A wait status (as waitpid gives it) into on_exit's two values. */
static void finish_status(lull_process *p, int status) {
    if (WIFEXITED(status))
        finish(p, WEXITSTATUS(status), 0);
    else
        finish(p, 0, WTERMSIG(status));
}

/* The exit status the kernel kept for a child somebody else reaped
 * (PIDFD_GET_INFO with PIDFD_INFO_EXIT, Linux 6.15): 0 with *status set;
 * -EAGAIN while the reaping has not recorded it yet; another negative
 * errno where the kernel cannot say (older kernels). */
static int exit_info(int pidfd, int *status) {
    lull__pidfd_info info;
    memset(&info, 0, sizeof info);
    info.mask = LULL__PIDFD_INFO_EXIT;
    if (ioctl(pidfd, LULL__PIDFD_GET_INFO, &info) < 0) return -errno;
    if (!(info.mask & LULL__PIDFD_INFO_EXIT)) return -EAGAIN;
    *status = info.exit_code;
    return 0;
}

/* Points the watcher at fd (the pidfd, or the edge epoll over it),
 * keeping its reference state. False if the loop would not take it: the
 * watcher is then as it was. */
static bool watch_fd(lull_process *p, int fd) {
    int old = p->io.fd;
    lull_io_stop(&p->io);
    p->io.fd = fd;
    if (lull_io_start(&p->io, LULL_READABLE) == 0) return true;
    p->io.fd = old;
    (void)lull_io_start(&p->io, LULL_READABLE);
    return false;
}

/* Takes what the edge epoll collected, so that it reports only the next
 * wake-up of the pidfd. */
static void drain_edge(int ep) {
    struct epoll_event ev;
    while (epoll_wait(ep, &ev, 1, 0) > 0) {
    }
}

/* A tracer (ptrace) holds the child's exit: the child is a zombie, so its
 * pidfd is readable, but waitid reports nothing until the tracer has
 * waited for it or let go. Watched level-triggered, the pidfd would run
 * the loop without sleeping for as long as that lasts. So it is watched
 * edge-triggered instead, through an epoll of its own: the tracer's wait
 * or detach wakes the pidfd (the kernel notifies the real parent then),
 * and only that wake-up brings the loop back. Made when first needed,
 * since a traced exit is rare. Where it cannot be made, the level stays:
 * the loop spins, and is still right. */
static void wait_for_tracer(lull_process *p) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep >= 0) ep = lull__fd_above_stdio(ep); /* never the program's 0 to 2 */
    if (ep < 0) return;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, p->pidfd, &ev) < 0 || !watch_fd(p, ep)) {
        close(ep);
        return;
    }
    /* The add reported the pidfd's present readiness: take it; the caller
     * then looks again, so a release before the add is not missed. */
    drain_edge(ep);
}

/* The pidfd is readable (or woke, through the edge epoll): the child
 * exited. */
static void on_pidfd(lull_io *io, int events) {
    (void)events;
    lull_process *p = LULL_CONTAINER_OF(io, lull_process, io);
    /* The edge epoll is shared with the parent after fork(): a copy that
     * took its events would take the parent's wake-up. */
    if (io->fd != p->pidfd && ours(p)) drain_edge(io->fd);
    siginfo_t si;
    memset(&si, 0, sizeof si);
    int rc = waitid((idtype_t)P_PIDFD, (id_t)p->pidfd, &si,
                    WEXITED | WNOHANG | __WALL);
    if (rc == 0 && si.si_pid == 0 && io->fd == p->pidfd) {
        /* Readable but nothing to reap: a tracer holds the exit. */
        wait_for_tracer(p);
        memset(&si, 0, sizeof si);
        rc = waitid((idtype_t)P_PIDFD, (id_t)p->pidfd, &si,
                    WEXITED | WNOHANG | __WALL);
    }
    if (rc == 0) {
        if (si.si_pid == 0) return; /* held: the next wake-up says more */
        if (si.si_code == CLD_EXITED)
            finish(p, si.si_status, 0);
        else
            finish(p, 0, si.si_status); /* CLD_KILLED, CLD_DUMPED */
        return;
    }
    int err = errno;
    if (err == EINTR) return; /* still readable: again next iteration */
    if (err != ECHILD || !ours(p)) {
        /* A handle inherited through fork(): the parent's child, never
         * ours to wait for, and its exit status is the parent's. */
        finish(p, -err, 0);
        return;
    }
    /* Reaped by someone else: another library's waitpid(-1), or the
     * kernel itself while SIGCHLD is ignored (exec made the child's exit
     * signal SIGCHLD again: src/spawn.c). The kernel keeps its status for
     * the pidfd; between the reap and the record there is a short window,
     * which the fd, still readable, brings us back to. */
    int status = 0;
    rc = exit_info(p->pidfd, &status);
    if (rc == 0) {
        finish_status(p, status);
    } else if (rc != -EAGAIN || ++p->retries > EXIT_INFO_RETRIES) {
        finish(p, -ECHILD, 0);
    } else if (io->fd != p->pidfd) {
        /* The status is recorded without a wake-up: back to the level,
         * which brings the loop back each iteration until it is. */
        int ep = io->fd;
        if (watch_fd(p, p->pidfd)) close(ep);
    }
}
LULL__OWN_NAME(on_pidfd, "lull_process pidfd", lull_process, io);

/* A close in a forked copy of the loop: the exit this copy cannot see. */
static void done_task(lull_task *t) {
    lull_process *p = LULL_CONTAINER_OF(t, lull_process, done);
    finish(p, -ECHILD, 0);
}
LULL__OWN_NAME(done_task, "lull_process exit turn", lull_process, done);

/* ------------------------------------------------------------- spawning */

/* What spawn made so far, for undoing it. */
typedef struct made {
    int n;                     /* the child's fds: 3 + more_stdio_count */
    int child[LULL_STDIO_MAX]; /* the fds the child gets (ours to close:
                                  kind made) */
    bool own[LULL_STDIO_MAX];  /* child[i] is ours (a pipe or socket end) */
    lull_stream *streams[LULL_STDIO_MAX]; /* opened over the parent's ends */
    int devnull;
} made;

/* The child's fd i: stdio[i], or more_stdio[i - 3]. */
static const lull_stdio *stdio_at(const lull_process_options *o, int i) {
    return i < 3 ? &o->stdio[i] : &o->more_stdio[i - 3];
}

/* Fd i of a PIPE is the child's to read. */
static bool child_reads(const lull_process_options *o, int i) {
    return i == 0 ||
           (i >= 3 && (stdio_at(o, i)->flags & LULL_STDIO_CHILD_READS));
}

static bool fd_open(int fd) {
    return fd >= 0 && fcntl(fd, F_GETFD) >= 0;
}

static bool options_ok(const lull_process_options *o) {
    if (!o->argv || !o->argv[0] || (o->flags & ~FLAGS_ALL)) return false;
    const char *file = o->file ? o->file : o->argv[0];
    if (!file[0]) return false;
    if (o->more_stdio_count < 0 || o->more_stdio_count > LULL_STDIO_MAX - 3 ||
        (o->more_stdio_count && !o->more_stdio))
        return false;
    if (o->group_count < 0 || o->group_count > GROUPS_MAX ||
        (o->group_count && !o->groups))
        return false;
    if (o->rlimit_count < 0 || o->rlimit_count > LULL_RLIMIT_MAX ||
        (o->rlimit_count && !o->rlimits))
        return false;
    int n = 3 + o->more_stdio_count;
    for (int i = 0; i < n; i++) {
        const lull_stdio *io = stdio_at(o, i);
        unsigned allowed = LULL_STDIO_FRAMED;
        if (i >= 3 && io->kind == LULL_STDIO_PIPE)
            allowed |= LULL_STDIO_CHILD_READS;
        switch (io->kind) {
        case LULL_STDIO_INHERIT:
        case LULL_STDIO_NULL:
            break;
        case LULL_STDIO_PIPE:
        case LULL_STDIO_SOCKETPAIR:
            if (!io->stream || (io->flags & ~allowed)) return false;
            /* Framed on request contradicts raw asked for. */
            if ((io->flags & LULL_STDIO_FRAMED) && io->stream_opts &&
                (io->stream_opts->flags & LULL_STREAM_RAW))
                return false;
            /* One stream per fd, but for stdin and stdout as one pair. */
            for (int j = 0; j < i; j++) {
                const lull_stdio *o_j = stdio_at(o, j);
                if ((o_j->kind != LULL_STDIO_PIPE &&
                     o_j->kind != LULL_STDIO_SOCKETPAIR) ||
                    o_j->stream != io->stream)
                    continue;
                bool pair = j == 0 && i == 1 && io->kind == LULL_STDIO_PIPE &&
                            o->stdio[0].kind == LULL_STDIO_PIPE &&
                            o->stdio[0].flags == io->flags;
                if (!pair) return false;
            }
            break;
        case LULL_STDIO_FD:
            if (!fd_open(io->fd)) return false;
            break;
        case LULL_STDIO_DUP:
            /* A lower fd: made before this one, and no cycle to follow. */
            if (io->fd < 0 || io->fd >= i) return false;
            break;
        default:
            return false;
        }
        if (io->flags && io->kind != LULL_STDIO_PIPE &&
            io->kind != LULL_STDIO_SOCKETPAIR)
            return false; /* no stream to frame */
    }
    return true;
}

/* PATH for the lookup: envp's if it has one, else the parent's. */
static const char *path_of(char *const *envp) {
    if (envp) {
        for (char *const *e = envp; *e; e++)
            if (strncmp(*e, "PATH=", 5) == 0) return *e + 5;
    }
    const char *p = getenv("PATH");
    return p ? p : PATH_DEFAULT;
}

static void undo(made *m, int *parent_fds) {
    for (int i = 0; i < m->n; i++) {
        if (m->own[i] && m->child[i] >= 0 && m->child[i] != m->devnull)
            close(m->child[i]);
        if (parent_fds[i] >= 0) close(parent_fds[i]);
        if (m->streams[i]) lull_endpoint_close(&m->streams[i]->ep, 0);
    }
    if (m->devnull >= 0) close(m->devnull);
}

/* Makes the fds of the child's stdio: the child's in m->child, the
 * parent's ends in parent_fds. 0 or a negative errno. */
static int make_stdio(const lull_process_options *o, made *m, int *parent_fds) {
    /* Which inherited fds are open, asked before this makes any fd: a
     * pipe made for one slot may take the number of a closed one. */
    bool open_before[LULL_STDIO_MAX];
    for (int i = 0; i < m->n; i++)
        open_before[i] = fd_open(i);
    for (int i = 0; i < m->n; i++) {
        const lull_stdio *io = stdio_at(o, i);
        int fds[2];
        switch (io->kind) {
        case LULL_STDIO_INHERIT:
            /* A closed fd stays closed in the child. */
            m->child[i] = open_before[i] ? i : -1;
            break;
        case LULL_STDIO_FD:
            m->child[i] = io->fd;
            break;
        case LULL_STDIO_DUP:
            /* The same source as fd `fd` (own stays false: closed once, as
             * that fd's); a closed inherited fd leaves this one closed. */
            m->child[i] = m->child[io->fd];
            break;
        case LULL_STDIO_NULL:
            if (m->devnull < 0) {
                m->devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
                if (m->devnull < 0) return -errno;
            }
            m->child[i] = m->devnull;
            break;
        case LULL_STDIO_PIPE:
            if (pipe2(fds, O_CLOEXEC) < 0) return -errno;
            /* stdin: the child reads; stdout, stderr: the child writes;
             * above: as the flags say. */
            m->child[i] = child_reads(o, i) ? fds[0] : fds[1];
            m->own[i] = true;
            parent_fds[i] =
                lull__fd_above_stdio(child_reads(o, i) ? fds[1] : fds[0]);
            if (parent_fds[i] < 0) return parent_fds[i];
            break;
        case LULL_STDIO_SOCKETPAIR:
            if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
                return -errno;
            m->child[i] = fds[1];
            m->own[i] = true;
            parent_fds[i] = lull__fd_above_stdio(fds[0]);
            if (parent_fds[i] < 0) return parent_fds[i];
            break;
        }
    }
    return 0;
}

/* Opens the caller's streams over the parent's ends (each stream owns its
 * fds from the call on, also when it fails). */
static int open_streams(lull_loop *loop, const lull_process_options *o, made *m,
                        int *parent_fds) {
    bool pair = o->stdio[0].kind == LULL_STDIO_PIPE &&
                o->stdio[1].kind == LULL_STDIO_PIPE &&
                o->stdio[0].stream == o->stdio[1].stream;
    for (int i = 0; i < m->n; i++) {
        if (parent_fds[i] < 0 || (pair && i == 1)) continue;
        const lull_stdio *io = stdio_at(o, i);
        lull_stream *s = io->stream;
        /* A program's stdio is bytes: raw unless framing was asked for. */
        lull_stream_options opts = {0};
        if (io->stream_opts) opts = *io->stream_opts;
        if (!(io->flags & LULL_STDIO_FRAMED)) opts.flags |= LULL_STREAM_RAW;
        const lull_stream_options *so = &opts;
        int rc;
        if (pair && i == 0) {
            /* Reads the child's stdout, writes its stdin. */
            rc = lull_stream_open_pair(loop, s, parent_fds[1], parent_fds[0],
                                       so);
            parent_fds[1] = -1;
        } else {
            rc = lull_stream_open(loop, s, parent_fds[i], so);
        }
        parent_fds[i] = -1;
        if (rc < 0) return rc;
        m->streams[i] = s;
    }
    return 0;
}

/* Reaps a child known to have exited or to exit at once (a failed exec),
 * waiting for it. */
static void reap_now(int pidfd) {
    siginfo_t si;
    while (waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | __WALL) < 0 &&
           errno == EINTR) {
    }
    close(pidfd);
}

/* The child's report: nothing when it exec'd, else its errno. The pipe
 * is non-blocking. When the clone returned after the child's exec or exit
 * (CLONE_VFORK held: `settled`), whatever the child wrote is there already,
 * and an empty pipe means it exec'd: waiting for EOF instead would wait for
 * every other holder of the write end, such as a process another thread
 * forked while the pipe was open, which may live for hours. Where the
 * clone was run as a fork (valgrind), the child may not have got that far:
 * then the EOF is the only word of its exec, and it is waited for. */
static int read_report(int fd, bool settled) {
    int err = 0;
    ssize_t n;
    for (;;) {
        n = read(fd, &err, sizeof err);
        if (n >= 0 || errno == EINTR) {
            if (n >= 0) break;
            continue;
        }
        if (errno != EAGAIN) return -errno;
        if (settled) return 0; /* nothing written: it exec'd */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        (void)poll(&pfd, 1, -1);
    }
    if (n == (ssize_t)sizeof err) return err > 0 ? -err : -EINVAL;
    return n == 0 ? 0 : -EIO; /* a short report: cannot happen */
}

static int start_child(const lull_process_options *o, made *m, int *pidfd) {
    struct rlimit rl;
    int limit = FD_SWEEP_MAX;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)limit)
        limit = (int)rl.rlim_cur;
    int errp[2];
    if (pipe2(errp, O_CLOEXEC | O_NONBLOCK) < 0) return -errno;
    /* The child keeps the write end above the fds it places, and can say
     * nothing when no fd is free there: it would exit 127 unheard, and the
     * spawn look successful. Moved here, where that is -EMFILE. */
    if (errp[1] < m->n) {
        int fd = fcntl(errp[1], F_DUPFD_CLOEXEC, m->n);
        int err = -errno;
        close(errp[1]);
        if (fd < 0) {
            close(errp[0]);
            return err;
        }
        errp[1] = fd;
    }
    volatile int ran_shared = 0;
    lull__spawn sp = {
        .file = o->file ? o->file : o->argv[0],
        .argv = o->argv,
        .envp = o->envp ? o->envp : environ,
        .path = path_of(o->envp),
        .cwd = o->cwd,
        .stdio_count = m->n,
        .flags = o->flags,
        .uid = o->uid,
        .gid = o->gid,
        .groups = o->groups,
        .group_count = o->group_count,
        .set_groups = o->groups != NULL,
        .rlimits = o->rlimits,
        .rlimit_count = o->rlimit_count,
        .err_fd = errp[1],
        .ran_shared = &ran_shared,
        .fd_limit = limit,
    };
    memcpy(sp.stdio, m->child, (size_t)m->n * sizeof m->child[0]);
    int pid = lull__spawn_child(&sp, pidfd);
    close(errp[1]);
    if (pid < 0) {
        close(errp[0]);
        return pid;
    }
    int rc = read_report(errp[0], ran_shared == 1);
    close(errp[0]);
    if (rc == 0 && *pidfd <= 2) {
        /* The pidfd lives as long as the child: not in a stdio slot. Its
         * exec'd child cannot be kept without it. */
        int fd = fcntl(*pidfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0) {
            rc = -errno;
            (void)send_signal(*pidfd, pid, SIGKILL);
        } else {
            close(*pidfd);
            *pidfd = fd;
        }
    }
    if (rc < 0) {
        reap_now(*pidfd);
        return rc;
    }
    return pid;
}

int lull_process_spawn(lull_loop *loop, lull_process *p,
                       const lull_process_options *opts,
                       lull_process_exit_fn on_exit) {
    if (!loop || !p || !opts || !on_exit || !options_ok(opts)) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    /* Clearing a live handle would orphan its registered pidfd or cut its
     * queued exit turn. Asked by address of the process's set of handles
     * in use (a hash lookup; p is garbage before its first spawn), which
     * holds a handle from here until finish or detach: its pidfd is
     * watched and its exit turn queued only in between. Live on any loop,
     * or now marked live here before a child can exist. */
    int elsewhere = lull__inuse_add(p);
    if (elsewhere) return elsewhere < 0 ? elsewhere : -EBUSY;
    /* The child places fds 0 to n - 1 and keeps its report pipe at n:
     * past the fd limit that is -EMFILE, said here rather than as the
     * child's EBADF from dup3. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
        rl.rlim_cur < (rlim_t)(4 + opts->more_stdio_count)) {
        lull__inuse_remove(p);
        return -EMFILE;
    }
    memset(p, 0, sizeof *p);
    p->io.fd = -1;
    p->pidfd = -1;
    made m = {.n = 3 + opts->more_stdio_count, .devnull = -1};
    int parent_fds[LULL_STDIO_MAX];
    for (int i = 0; i < LULL_STDIO_MAX; i++)
        m.child[i] = parent_fds[i] = -1;
    int rc = make_stdio(opts, &m, parent_fds);
    if (rc == 0) rc = open_streams(loop, opts, &m, parent_fds);
    int pidfd = -1, pid = 0;
    if (rc == 0) {
        pid = start_child(opts, &m, &pidfd);
        if (pid < 0) rc = pid;
    }
    if (rc == 0) {
        lull__io_setup(loop, &p->io, pidfd, on_pidfd);
        p->pidfd = pidfd;
        rc = lull_io_start(&p->io, LULL_READABLE);
        if (rc < 0) {
            p->pid = pid;
            (void)send_signal(p->pidfd, p->pid, SIGKILL);
            reap_now(pidfd);
            p->io.fd = -1;
            p->pidfd = -1;
        }
    }
    if (rc < 0) {
        undo(&m, parent_fds);
        lull__inuse_remove(p);
        return rc;
    }
    /* The child has its copies; the parent's are done with. */
    memset(m.streams, 0, sizeof m.streams);
    undo(&m, parent_fds);
    lull_task_init(&p->done, done_task);
    p->loop = loop;
    p->pid = pid;
    p->on_exit = on_exit;
    p->owner_pid = (int)getpid();
    p->flags = opts->flags;
    p->state = P_STARTED;
    return 0;
}

/* ------------------------------------------------------------ controls */

int lull_process_kill(lull_process *p, int signum) {
    if (!p || !p->loop || signum < 0 || signum > 64) return -EINVAL;
    if (!(p->state & P_STARTED) || (p->state & P_DONE_QUEUED)) return -ESRCH;
    LULL_ASSERT_LOOP_THREAD(p->loop);
    if (!ours(p)) return -ECHILD;
    return send_signal(p->pidfd, p->pid, signum);
}

/* kill(-pid): the group whose id is the child's pid. A group's id is its
 * leader's pid, and the kernel keeps a pid from reuse while a process or a
 * group holds it, so until the child is reaped the only group that can
 * bear its pid is one the child made. lull reaps it only on the loop's
 * thread, here; that nobody else reaped it (a waitpid(-1) elsewhere in the
 * program) is asked with WNOWAIT just before: the one window left is a
 * reap by another thread between that question and the kill. */
int lull_process_kill_group(lull_process *p, int signum) {
    if (!p || !p->loop || signum < 0 || signum > 64) return -EINVAL;
    if (!(p->state & P_STARTED) || (p->state & P_DONE_QUEUED)) return -ESRCH;
    LULL_ASSERT_LOOP_THREAD(p->loop);
    if (!ours(p)) return -ECHILD;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    if (waitid((idtype_t)P_PIDFD, (id_t)p->pidfd, &si,
               WEXITED | WNOHANG | WNOWAIT | __WALL) < 0)
        return -ESRCH; /* reaped by someone else: the pid may be reused */
    return kill(-p->pid, signum) < 0 ? -errno : 0;
}

int lull_process_close(lull_process *p) {
    if (!p || !p->loop) return -EINVAL;
    /* Before the thread check: a handle whose child exited holds nothing,
     * and its loop may be freed (lull_loop_free accepts it). */
    if (!(p->state & P_STARTED) || (p->state & P_CLOSED)) return 0;
    LULL_ASSERT_LOOP_THREAD(p->loop);
    p->state |= P_CLOSED;
    if (!ours(p)) {
        /* Not our child: nothing to kill or wait for here. */
        release_fds(p);
        p->state |= P_DONE_QUEUED;
        lull_task_post(p->loop, &p->done);
        return 0;
    }
    if (p->flags & LULL_PROCESS_KILL_ON_CLOSE) {
        /* An error means it already exited: its reaping is on its way. */
        (void)send_signal(p->pidfd, p->pid, SIGKILL);
        lull_io_ref(&p->io); /* alive until reaped, though unreferenced */
    } else {
        lull_io_unref(&p->io); /* left to run: reaped whenever it ends */
    }
    return 0;
}

/* ------------------------------------------------------------ detached */

/* Detached children are reaped by a thread of lull's, so that one that
 * exits while the program runs on is never left a zombie, and no loop has
 * to stay for it. Started on the first detach, in each process (a fork()ed
 * copy has no thread: it starts its own, and closes what it inherited).
 *   Trigger                 a detached child's pidfd wakes
 *                           (edge-triggered: a tracer-held exit wakes it
 *                           again when released, as in on_pidfd)
 *   Source of truth         waitid(P_PIDFD) on that pidfd
 *   Pending-work predicate  a pidfd in its epoll woke
 *   Next deadline or retry  none
 *   Quiet condition         asleep in epoll_wait; no timer. The thread
 *                           lives as long as the process.
 * The lock guards the fields below; it is held across fork() (atfork) so a
 * copy never inherits it taken. The fork handlers are registered before
 * the lock is first taken: a fork made while a thread held the lock
 * before registering them would give the copy the lock taken for good. */
static pthread_once_t reaper_atfork_once = PTHREAD_ONCE_INIT;
static int reaper_atfork_error; /* pthread_atfork's, if it failed */
static pthread_mutex_t reaper_lock = PTHREAD_MUTEX_INITIALIZER;
static int reaper_ep = -1; /* the thread's epoll; -1 before the first */
static int reaper_owner;   /* the process whose thread watches it */
static int *reaper_fds;    /* pidfds it holds, to close in a fork's copy */
static size_t reaper_n, reaper_cap;

static void reaper_forget(int fd) {
    for (size_t i = 0; i < reaper_n; i++) {
        if (reaper_fds[i] != fd) continue;
        reaper_fds[i] = reaper_fds[--reaper_n];
        return;
    }
}

static void *reaper_main(void *arg) {
    int ep = (int)(intptr_t)arg;
    struct epoll_event evs[16]; /* a batch; more wait for the next call */
    for (;;) {
        int n = epoll_wait(ep, evs, 16, -1);
        if (n < 0 && errno != EINTR) return NULL; /* EBADF: cannot be */
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            siginfo_t si;
            memset(&si, 0, sizeof si);
            int rc = waitid((idtype_t)P_PIDFD, (id_t)fd, &si,
                            WEXITED | WNOHANG | __WALL);
            if (rc == 0 && si.si_pid == 0) continue; /* running, or held */
            /* Reaped, or reaped by someone else (ECHILD): done with it. */
            pthread_mutex_lock(&reaper_lock);
            epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
            close(fd);
            reaper_forget(fd);
            pthread_mutex_unlock(&reaper_lock);
        }
    }
}

static void reaper_prepare(void) {
    pthread_mutex_lock(&reaper_lock);
}

static void reaper_parent(void) {
    pthread_mutex_unlock(&reaper_lock);
}

/* The copy has no reaper thread, and the children are not its own. */
static void reaper_child(void) {
    if (reaper_ep >= 0) close(reaper_ep);
    for (size_t i = 0; i < reaper_n; i++)
        close(reaper_fds[i]);
    reaper_ep = -1;
    reaper_n = 0;
    pthread_mutex_unlock(&reaper_lock);
}

/* Starts this process's reaper if it has none. Under reaper_lock. */
static int reaper_start(void) {
    int self = (int)getpid();
    if (reaper_ep >= 0 && reaper_owner == self) return 0;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) return -errno;
    ep = lull__fd_above_stdio(
        ep); /* kept for good: never the program's 0 to 2 */
    if (ep < 0) return ep;
    /* No signal but its own faults in the thread: a process-directed
     * signal must reach the program's threads, never lull's
     * (src/signal.c). */
    sigset_t old;
    lull__block_for_thread(&old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Its frames are small: 64 KiB rather than the default 8 MiB. */
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_t t;
    int rc = pthread_create(&t, &attr, reaper_main, (void *)(intptr_t)ep);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        close(ep);
        return -rc;
    }
    reaper_ep = ep;
    reaper_owner = self;
    return 0;
}

static void reaper_register_atfork(void) {
    reaper_atfork_error =
        pthread_atfork(reaper_prepare, reaper_parent, reaper_child);
}

/* Hands a pidfd (owned from here on, also on failure) to the reaper. */
static int reaper_take(int fd) {
    pthread_once(&reaper_atfork_once, reaper_register_atfork);
    if (reaper_atfork_error != 0) {
        close(fd);
        return -reaper_atfork_error;
    }
    pthread_mutex_lock(&reaper_lock);
    int rc = reaper_start();
    if (rc == 0 && reaper_n == reaper_cap) {
        size_t cap = reaper_cap ? reaper_cap * 2 : 16;
        int *a = realloc(reaper_fds, cap * sizeof *a);
        if (a) {
            reaper_fds = a;
            reaper_cap = cap;
        } else {
            rc = -ENOMEM;
        }
    }
    if (rc == 0) {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = fd};
        if (epoll_ctl(reaper_ep, EPOLL_CTL_ADD, fd, &ev) < 0)
            rc = -errno;
        else
            reaper_fds[reaper_n++] = fd;
    }
    if (rc < 0) close(fd);
    pthread_mutex_unlock(&reaper_lock);
    return rc;
}

int lull_process_detach(lull_process *p) {
    if (!p || !p->loop) return -EINVAL;
    if (!(p->state & P_STARTED) || (p->state & P_DONE_QUEUED)) return -ESRCH;
    LULL_ASSERT_LOOP_THREAD(p->loop);
    if (ours(p)) {
        /* The reaper gets a copy of the pidfd, so that a failure leaves
         * the handle as it was, still watching; above 2, as every fd the
         * parent keeps (lull__fd_above_stdio). */
        int fd = fcntl(p->pidfd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0) return -errno;
        int rc = reaper_take(fd);
        if (rc < 0) return rc;
    }
    /* Not ours (a fork's copy): the parent's child, nothing to reap. */
    release_fds(p);
    p->state = (p->state & ~P_STARTED) | P_DETACHED;
    lull__inuse_remove(p); /* the handle is the caller's again */
    return 0;
}

/* After a close its ref is the close's: a child left to run stays
 * unreferenced, a killed one referenced until it is reaped. */
void lull_process_ref(lull_process *p) {
    if (!p || !p->loop || (p->state & P_CLOSED)) return;
    lull_io_ref(&p->io);
}

void lull_process_unref(lull_process *p) {
    if (!p || !p->loop || (p->state & P_CLOSED)) return;
    lull_io_unref(&p->io);
}
