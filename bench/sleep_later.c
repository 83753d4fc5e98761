/* An LD_PRELOAD shim for one experiment (bench/kv_batching.sh), never part
 * of lull: it busy-waits SLEEP_LATER_NS nanoseconds before every
 * epoll_wait that may block, so that the process it is loaded into goes to
 * sleep later and takes more requests per wake-up. It shows what a closed
 * loop client on another CPU pays for each time the server sleeps: the
 * question is the client's cost, not a policy to adopt (a spin costs the
 * server CPU for nothing when no request comes). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>

typedef int (*epoll_wait_fn)(int, struct epoll_event *, int, int);

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int epoll_wait(int epfd, struct epoll_event *events, int max, int timeout) {
    static epoll_wait_fn real;
    static long long spin_ns = -1;
    if (!real) real = (epoll_wait_fn)dlsym(RTLD_NEXT, "epoll_wait");
    if (spin_ns < 0) {
        const char *s = getenv("SLEEP_LATER_NS");
        spin_ns = s ? atoll(s) : 0;
    }
    if (spin_ns > 0 && timeout != 0) {
        long long until = now_ns() + spin_ns;
        while (now_ns() < until) {
        }
    }
    return real(epfd, events, max, timeout);
}
