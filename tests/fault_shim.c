/* The fault-injection shim (fault_shim.h says how to drive it): the
 * wrapped calls, the rules and the I/O plan. A fault is injected only
 * while a rule matches (kind, fd, epoll op) and the shim is armed, or the
 * plan says so; everything else goes straight to the real call. Linked
 * into tests/test_faults.c and kv/sim.c (lull-kv-sim --streams), each with
 * lull linked statically, so the library's own calls come here. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fault_shim.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

const char *const kind_name[K_COUNT] = {
    "recv",         "sendmsg",    "accept4",      "connect",
    "epoll_ctl",    "epoll_wait", "epoll_pwait2", "eventfd write",
    "eventfd read", "futex wait", "malloc",
};

const int err_list[NERR] = {EINTR,        EAGAIN,       SHORT,    ECONNRESET,
                            EPIPE,        EMFILE,       ENOMEM,   EPERM,
                            ECONNABORTED, ECONNREFUSED, ETIMEDOUT};

const char *err_name(int e) {
    switch (e) {
    case EINTR:
        return "EINTR";
    case EAGAIN:
        return "EAGAIN";
    case SHORT:
        return "short";
    case ECONNRESET:
        return "ECONNRESET";
    case EPIPE:
        return "EPIPE";
    case EMFILE:
        return "EMFILE";
    case ENOMEM:
        return "ENOMEM";
    case EPERM:
        return "EPERM";
    case ECONNABORTED:
        return "ECONNABORTED";
    case ECONNREFUSED:
        return "ECONNREFUSED";
    case ETIMEDOUT:
        return "ETIMEDOUT";
    }
    return "?";
}

int err_index(int e) {
    for (int i = 0; i < NERR; i++)
        if (err_list[i] == e) return i;
    return -1;
}

rule rules[RULES_MAX];
int nrules;
bool armed; /* atomic */
pthread_mutex_t shim_lock = PTHREAD_MUTEX_INITIALIZER;
uint64_t injected[K_COUNT][NERR]; /* under shim_lock */
uint64_t calls[K_COUNT];          /* atomic: every call, armed or not */
uint64_t shim_rng = 1;
/* Told of every injected fault (the random case attributes them). */
void (*on_inject)(int kind, int fd, int err);

uint64_t rng_next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

rule *add_rule(int kind, int fd, int op, uint64_t from, uint64_t count,
               uint32_t one_in, const int *errs, int nerr) {
    if (nrules >= RULES_MAX || nerr < 1 || nerr > 12) {
        fprintf(stderr, "fault shim: too many rules, or no errno\n");
        abort();
    }
    pthread_mutex_lock(&shim_lock);
    rule *r = &rules[nrules];
    *r = (rule){.kind = kind,
                .fd = fd,
                .op = op,
                .from = from,
                .count = count,
                .one_in = one_in ? one_in : 1,
                .nerr = nerr};
    memcpy(r->errs, errs, (size_t)nerr * sizeof *errs);
    nrules++;
    pthread_mutex_unlock(&shim_lock);
    return r;
}

/* The Nth matching call (and `count` after it) fails with err. */
rule *fail_nth(int kind, int fd, uint64_t nth, uint64_t count, int err) {
    return add_rule(kind, fd, 0, nth, count, 1, &err, 1);
}

void arm(bool on) {
    __atomic_store_n(&armed, on, __ATOMIC_SEQ_CST);
}

void shim_reset(uint64_t seed) {
    arm(false);
    pthread_mutex_lock(&shim_lock);
    nrules = 0;
    memset(injected, 0, sizeof injected);
    shim_rng = seed ? seed : 1;
    on_inject = NULL;
    shim_io_before = NULL;
    shim_io_after = NULL;
    pthread_mutex_unlock(&shim_lock);
}

uint64_t hits_of(const rule *r) {
    pthread_mutex_lock(&shim_lock);
    uint64_t h = r->hits;
    pthread_mutex_unlock(&shim_lock);
    return h;
}

uint64_t injected_total(int kind) {
    uint64_t n = 0;
    pthread_mutex_lock(&shim_lock);
    for (int e = 0; e < NERR; e++)
        n += injected[kind][e];
    pthread_mutex_unlock(&shim_lock);
    return n;
}

/* The fault for this call: 0 (none), an errno, or SHORT. */
int fault_for(int kind, int fd, int op) {
    __atomic_fetch_add(&calls[kind], 1, __ATOMIC_RELAXED);
    if (!__atomic_load_n(&armed, __ATOMIC_SEQ_CST)) return 0;
    int err = 0;
    void (*tell)(int, int, int) = NULL;
    pthread_mutex_lock(&shim_lock);
    /* Every matching rule counts the call; the first that fires wins. */
    for (int i = 0; i < nrules; i++) {
        rule *r = &rules[i];
        if (r->kind != kind || (r->fd >= 0 && r->fd != fd) ||
            (r->op && r->op != op))
            continue;
        uint64_t n = ++r->seen;
        if (err || n < r->from || n - r->from >= r->count) continue;
        if (r->one_in > 1 && rng_next(&shim_rng) % r->one_in) continue;
        err = r->errs[r->nerr == 1 ? 0 : rng_next(&shim_rng) % r->nerr];
        r->hits++;
        int e = err_index(err);
        if (e >= 0) injected[kind][e]++;
        tell = on_inject;
    }
    pthread_mutex_unlock(&shim_lock);
    if (err && tell) tell(kind, fd, err);
    return err;
}

size_t shorter(size_t len) {
    pthread_mutex_lock(&shim_lock);
    size_t n = 1 + (size_t)(rng_next(&shim_rng) % (len - 1));
    pthread_mutex_unlock(&shim_lock);
    return n;
}

/* Prints what was injected, one line per kind. */
void report(const char *what) {
    pthread_mutex_lock(&shim_lock);
    printf("%s: injected", what);
    bool any = false;
    for (int k = 0; k < K_COUNT; k++) {
        bool first = true;
        for (int e = 0; e < NERR; e++) {
            if (!injected[k][e]) continue;
            if (first) printf("%s%s", any ? "; " : " ", kind_name[k]);
            printf("%s %s %" PRIu64, first ? "" : ",", err_name(err_list[e]),
                   injected[k][e]);
            first = false;
            any = true;
        }
    }
    printf("%s\n", any ? "" : " nothing");
    pthread_mutex_unlock(&shim_lock);
    fflush(stdout);
}

int (*shim_io_before)(int kind, int fd, size_t *len);
ssize_t (*shim_io_after)(int kind, int fd, ssize_t n, size_t asked);

/* The plan's answer for a call of len bytes: 0 (as asked, *cut = len), an
 * errno, or SHORT (*cut shorter). */
static int planned(int kind, int fd, size_t len, size_t *cut) {
    *cut = len;
    int (*before)(int, int, size_t *) = shim_io_before;
    if (!before) return 0;
    int err = before(kind, fd, cut);
    if (err == SHORT && (*cut == 0 || *cut >= len)) {
        *cut = len; /* nothing to cut */
        return 0;
    }
    return err;
}

/* A call on one buffer (recv, send): the plan's fault for its kind, or
 * a rule's; `call` makes the real one. */
typedef ssize_t (*one_buffer_fn)(int fd, void *buf, size_t len, int flags);

static ssize_t one_buffer(int kind, one_buffer_fn call, int fd, void *buf,
                          size_t len, int flags) {
    size_t cut;
    int err = planned(kind, fd, len, &cut);
    if (err > 0) {
        errno = err;
        return -1;
    }
    if (shim_io_before) {
        ssize_t n = call(fd, buf, cut, flags);
        if (shim_io_after) n = shim_io_after(kind, fd, n, len);
        return n;
    }
    err = fault_for(kind, fd, 0);
    if (err == SHORT && len > 1) return call(fd, buf, shorter(len), flags);
    if (err > 0) {
        errno = err;
        return -1;
    }
    return call(fd, buf, len, flags);
}

ssize_t __real_recv(int fd, void *buf, size_t len, int flags);
ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags);
ssize_t __wrap_recv(int fd, void *buf, size_t len, int flags) {
    return one_buffer(K_RECV, __real_recv, fd, buf, len, flags);
}

ssize_t __real_recvmsg(int fd, struct msghdr *msg, int flags);

/* recvmsg into the first `want` bytes of its one buffer. */
static ssize_t recvmsg_cut(int fd, struct msghdr *msg, int flags, size_t want) {
    struct iovec *iov = msg->msg_iov, cut = *iov;
    cut.iov_len = want;
    msg->msg_iov = &cut;
    ssize_t n = __real_recvmsg(fd, msg, flags);
    msg->msg_iov = iov;
    return n;
}

/* A Unix stream reads with recvmsg (it may bring fds): the same faults
 * as recv, on its one buffer. */
ssize_t __wrap_recvmsg(int fd, struct msghdr *msg, int flags);
ssize_t __wrap_recvmsg(int fd, struct msghdr *msg, int flags) {
    if (msg->msg_iovlen == 1) {
        size_t cut;
        int err = planned(K_RECV, fd, msg->msg_iov[0].iov_len, &cut);
        if (err > 0) {
            errno = err;
            return -1;
        }
        if (shim_io_before) {
            size_t asked = msg->msg_iov[0].iov_len;
            ssize_t n = err == SHORT ? recvmsg_cut(fd, msg, flags, cut)
                                     : __real_recvmsg(fd, msg, flags);
            if (shim_io_after) n = shim_io_after(K_RECV, fd, n, asked);
            return n;
        }
    }
    int err = fault_for(K_RECV, fd, 0);
    if (err == SHORT && msg->msg_iovlen == 1 && msg->msg_iov[0].iov_len > 1)
        return recvmsg_cut(fd, msg, flags, shorter(msg->msg_iov[0].iov_len));
    if (err > 0 && err != SHORT) {
        errno = err;
        return -1;
    }
    return __real_recvmsg(fd, msg, flags);
}

ssize_t __real_sendmsg(int fd, const struct msghdr *msg, int flags);

/* sendmsg of the same buffers, cut after `want` bytes. */
static ssize_t sendmsg_cut(int fd, const struct msghdr *msg, int flags,
                           size_t want) {
    static __thread struct iovec iov[1024];
    size_t n = 0;
    for (size_t i = 0; i < msg->msg_iovlen && want > 0 && n < 1024; i++) {
        iov[n] = msg->msg_iov[i];
        if (iov[n].iov_len > want) iov[n].iov_len = want;
        want -= iov[n].iov_len;
        n++;
    }
    struct msghdr m = *msg;
    m.msg_iov = iov;
    m.msg_iovlen = n;
    return __real_sendmsg(fd, &m, flags);
}

ssize_t __wrap_sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t __wrap_sendmsg(int fd, const struct msghdr *msg, int flags) {
    size_t total = 0;
    for (size_t i = 0; i < msg->msg_iovlen; i++)
        total += msg->msg_iov[i].iov_len;
    if (shim_io_before) {
        size_t cut;
        int err = planned(K_SENDMSG, fd, total, &cut);
        if (err > 0) {
            errno = err;
            return -1;
        }
        ssize_t n = err == SHORT ? sendmsg_cut(fd, msg, flags, cut)
                                 : __real_sendmsg(fd, msg, flags);
        if (shim_io_after) n = shim_io_after(K_SENDMSG, fd, n, total);
        return n;
    }
    int err = fault_for(K_SENDMSG, fd, 0);
    if (err == SHORT) {
        if (total < 2) return __real_sendmsg(fd, msg, flags);
        /* The same buffers, cut after a random byte. */
        return sendmsg_cut(fd, msg, flags, shorter(total));
    }
    if (err > 0) {
        errno = err;
        return -1;
    }
    return __real_sendmsg(fd, msg, flags);
}

/* A socket write of one buffer and no fds is a send: the faults of a
 * sendmsg (the same kind), on that buffer. */
ssize_t __real_send(int fd, const void *buf, size_t len, int flags);
static ssize_t real_send(int fd, void *buf, size_t len, int flags) {
    return __real_send(fd, buf, len, flags);
}
ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags);
ssize_t __wrap_send(int fd, const void *buf, size_t len, int flags) {
    return one_buffer(K_SENDMSG, real_send, fd, (void *)buf, len, flags);
}

int __real_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);
int __wrap_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags);
int __wrap_accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
    int err = fault_for(K_ACCEPT, fd, 0);
    if (err > 0) {
        errno = err; /* the connection stays in the backlog */
        return -1;
    }
    return __real_accept4(fd, addr, len, flags);
}

int __real_connect(int fd, const struct sockaddr *addr, socklen_t len);
int __wrap_connect(int fd, const struct sockaddr *addr, socklen_t len);
int __wrap_connect(int fd, const struct sockaddr *addr, socklen_t len) {
    int err = fault_for(K_CONNECT, fd, 0);
    if (err == EINTR) {
        /* As the kernel does: an interrupted connect goes on in the
         * background, and the socket turns writable when it is done. */
        int rc = __real_connect(fd, addr, len);
        if (rc == 0 || errno == EINPROGRESS) errno = EINTR;
        return -1;
    }
    if (err > 0) {
        errno = err;
        return -1;
    }
    return __real_connect(fd, addr, len);
}

int __real_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int __wrap_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev);
int __wrap_epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
    int err = fault_for(K_EPOLL_CTL, fd, op);
    if (err > 0) {
        errno = err;
        return -1;
    }
    return __real_epoll_ctl(epfd, op, fd, ev);
}

int __real_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms);
int __wrap_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms);
int __wrap_epoll_wait(int epfd, struct epoll_event *ev, int max, int ms) {
    int err = fault_for(K_EPOLL_WAIT, epfd, 0);
    if (err > 0) {
        errno = err;
        return -1;
    }
    return __real_epoll_wait(epfd, ev, max, ms);
}

int __real_epoll_pwait2(int epfd, struct epoll_event *ev, int max,
                        const struct timespec *ts, const sigset_t *ss);
int __wrap_epoll_pwait2(int epfd, struct epoll_event *ev, int max,
                        const struct timespec *ts, const sigset_t *ss);
int __wrap_epoll_pwait2(int epfd, struct epoll_event *ev, int max,
                        const struct timespec *ts, const sigset_t *ss) {
    int err = fault_for(K_EPOLL_PWAIT2, epfd, 0);
    if (err > 0) {
        errno = err;
        return -1;
    }
    return __real_epoll_pwait2(epfd, ev, max, ts, ss);
}

/* read and write: only the wake-up eventfd's (an 8-byte counter) count;
 * the harness's own pipes pass through. */
ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n) {
    if (n == sizeof(uint64_t)) {
        int err = fault_for(K_EVENTFD_WRITE, fd, 0);
        if (err > 0) {
            errno = err;
            return -1;
        }
    }
    return __real_write(fd, buf, n);
}

ssize_t __real_read(int fd, void *buf, size_t n);
ssize_t __wrap_read(int fd, void *buf, size_t n);
ssize_t __wrap_read(int fd, void *buf, size_t n) {
    if (n == sizeof(uint64_t)) {
        int err = fault_for(K_EVENTFD_READ, fd, 0);
        if (err > 0) {
            errno = err;
            return -1;
        }
    }
    return __real_read(fd, buf, n);
}

/* syscall: lull's only use is futex. A faulted FUTEX_WAIT returns at once,
 * as a signal or a changed word would make it. FUTEX_WAKE is not faulted:
 * the kernel fails it only for a bad address or op, which lull never
 * passes. */
long __real_syscall(long nr, ...);
long __wrap_syscall(long nr, ...);
long __wrap_syscall(long nr, ...) {
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (nr == SYS_futex &&
        (a[1] == FUTEX_WAIT_BITSET_PRIVATE || a[1] == FUTEX_WAIT_PRIVATE)) {
        /* The op tells a pool thread's wait (FUTEX_WAIT) from a loop's
         * (FUTEX_WAIT_BITSET) for rules that want one of them. */
        int err = fault_for(K_FUTEX_WAIT, -1, (int)a[1]);
        if (err > 0) {
            errno = err;
            return -1;
        }
    }
    return __real_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);

/* Malloc faults are armed only around the one lull call a case is about,
 * so the Nth allocation is lull's Nth. */
void *__wrap_malloc(size_t size) {
    if (__atomic_load_n(&armed, __ATOMIC_RELAXED) &&
        fault_for(K_MALLOC, -1, 0) > 0) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_malloc(size);
}

void *__wrap_calloc(size_t n, size_t size) {
    if (__atomic_load_n(&armed, __ATOMIC_RELAXED) &&
        fault_for(K_MALLOC, -1, 0) > 0) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_calloc(n, size);
}

void *__wrap_realloc(void *p, size_t size) {
    if (__atomic_load_n(&armed, __ATOMIC_RELAXED) &&
        fault_for(K_MALLOC, -1, 0) > 0) {
        errno = ENOMEM;
        return NULL;
    }
    return __real_realloc(p, size);
}
