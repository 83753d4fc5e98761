/* Counts the datagram system calls, and the others a datagram path might
 * make (epoll_ctl, getsockname, getpeername), of every
 * implementation in the process the same way for all of them, for the
 * `udp` scenario's calls per datagram (polls: lab/turns_count.c).
 *
 * How: as lab/turns_count.c does for epoll_wait, lull-lab defines sendto,
 * sendmsg, sendmmsg, recvfrom, recvmsg, recvmmsg, epoll_ctl, getsockname
 * and getpeername itself; the
 * peers' shared libraries bind to these definitions (the executable comes
 * first in the lookup order) and lull, linked statically, binds to them at
 * link time. Each counts and forwards to the C library's function, found
 * with dlsym(RTLD_NEXT). libuv 1.44 makes its sendmmsg and recvmmsg
 * through syscall(), so syscall is counted too, by number, and forwarded
 * with its six argument words (what the C library's own syscall reads).
 * Counts are per thread: each side of a run is one thread.
 *
 * A counted call costs an indirect call and an increment more than the
 * plain one (about a nanosecond, beside a system call's hundreds). */
#include "turns.h"
#include "udp.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Thread_local udp_calls counts;

void udp_calls_now(udp_calls *out) {
    *out = counts;
    out->polls = turns_polls();
}

/* The C library's function named `name`, looked up once (any thread may
 * race to look it up first: dlsym gives each the same address). */
static void *next(void **slot, const char *name) {
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

static void *sendto_next, *sendmsg_next, *sendmmsg_next, *recvfrom_next,
    *recvmsg_next, *recvmmsg_next, *ctl_next, *syscall_next;

ssize_t sendto(int fd, const void *buf, size_t len, int flags,
               const struct sockaddr *to, socklen_t tolen) {
    ssize_t (*fn)(int, const void *, size_t, int, const struct sockaddr *,
                  socklen_t) = next(&sendto_next, "sendto");
    counts.sends++;
    return fn(fd, buf, len, flags, to, tolen);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags) {
    ssize_t (*fn)(int, const struct msghdr *, int) =
        next(&sendmsg_next, "sendmsg");
    counts.sends++;
    return fn(fd, msg, flags);
}

int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags) {
    int (*fn)(int, struct mmsghdr *, unsigned int, int) =
        next(&sendmmsg_next, "sendmmsg");
    counts.sends++;
    return fn(fd, v, n, flags);
}

ssize_t recvfrom(int fd, void *restrict buf, size_t len, int flags,
                 struct sockaddr *restrict from, socklen_t *restrict fromlen) {
    ssize_t (*fn)(int, void *, size_t, int, struct sockaddr *, socklen_t *) =
        next(&recvfrom_next, "recvfrom");
    counts.recvs++;
    return fn(fd, buf, len, flags, from, fromlen);
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
    ssize_t (*fn)(int, struct msghdr *, int) = next(&recvmsg_next, "recvmsg");
    counts.recvs++;
    return fn(fd, msg, flags);
}

int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags,
             struct timespec *timeout) {
    int (*fn)(int, struct mmsghdr *, unsigned int, int, struct timespec *) =
        next(&recvmmsg_next, "recvmmsg");
    counts.recvs++;
    return fn(fd, v, n, flags, timeout);
}

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
    int (*fn)(int, int, int, struct epoll_event *) =
        next(&ctl_next, "epoll_ctl");
    counts.other++;
    return fn(epfd, op, fd, ev);
}

static void *getsockname_next, *getpeername_next;

int getsockname(int fd, struct sockaddr *restrict addr,
                socklen_t *restrict len) {
    int (*fn)(int, struct sockaddr *, socklen_t *) =
        next(&getsockname_next, "getsockname");
    counts.other++;
    return fn(fd, addr, len);
}

int getpeername(int fd, struct sockaddr *restrict addr,
                socklen_t *restrict len) {
    int (*fn)(int, struct sockaddr *, socklen_t *) =
        next(&getpeername_next, "getpeername");
    counts.other++;
    return fn(fd, addr, len);
}

long syscall(long number, ...) {
    long (*fn)(long, ...) = next(&syscall_next, "syscall");
    va_list ap;
    va_start(ap, number);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (number == SYS_sendmmsg || number == SYS_sendmsg || number == SYS_sendto)
        counts.sends++;
    else if (number == SYS_recvmmsg || number == SYS_recvmsg ||
             number == SYS_recvfrom)
        counts.recvs++;
    else if (number == SYS_epoll_ctl || number == SYS_getsockname ||
             number == SYS_getpeername)
        counts.other++;
    return fn(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
