/* Counts the polls and sched_yield calls of every implementation in the
 * process, the same way for all of them, so the chain figures can show
 * polls per hop for every row and the round trip can show which library
 * spins in sched_yield.
 *
 * How: lull-lab defines epoll_wait, epoll_pwait, epoll_pwait2 and
 * sched_yield itself. The dynamic linker binds the peers' shared libraries
 * (libuv, libevent) to the executable's definitions, since the executable
 * comes first in the lookup order, and the code linked statically (lull,
 * libev's archive) binds to them at link time; each definition counts and
 * forwards to the C library's function, found with dlsym(RTLD_NEXT). No
 * LD_PRELOAD, nothing to set up. Polls are counted per thread (a chain runs
 * on one thread; idle windows run side by side on several), sched_yield
 * calls per process (a round trip's two threads both call it).
 *
 * A counted call costs one indirect call and an increment more than the
 * plain one (about a nanosecond, beside a system call's hundreds). */
#include "turns.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/epoll.h>
#include <time.h>

static _Thread_local uint64_t polls;
static uint64_t yields; /* atomic */

uint64_t turns_polls(void) {
    return polls;
}

uint64_t turns_yields(void) {
    return __atomic_load_n(&yields, __ATOMIC_RELAXED);
}

/* The C library's function named `name`, looked up once; NULL when the C
 * library has none (epoll_pwait2 before glibc 2.35). Any thread may race
 * to look it up first: dlsym gives each the same address. */
static void *next(void **slot, const char *name) {
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

typedef int (*wait_fn)(int, struct epoll_event *, int, int);
typedef int (*pwait_fn)(int, struct epoll_event *, int, int, const sigset_t *);
typedef int (*pwait2_fn)(int, struct epoll_event *, int,
                         const struct timespec *, const sigset_t *);
typedef int (*yield_fn)(void);

static void *wait_next, *pwait_next, *pwait2_next, *yield_next;

int epoll_wait(int epfd, struct epoll_event *events, int max, int timeout) {
    wait_fn fn = (wait_fn)next(&wait_next, "epoll_wait");
    polls++;
    return fn(epfd, events, max, timeout);
}

int epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout,
                const sigset_t *mask) {
    pwait_fn fn = (pwait_fn)next(&pwait_next, "epoll_pwait");
    polls++;
    return fn(epfd, events, max, timeout, mask);
}

int epoll_pwait2(int epfd, struct epoll_event *events, int max,
                 const struct timespec *timeout, const sigset_t *mask) {
    pwait2_fn fn = (pwait2_fn)next(&pwait2_next, "epoll_pwait2");
    if (!fn) {
        errno = ENOSYS; /* what the kernel says when it lacks the call */
        return -1;
    }
    polls++;
    return fn(epfd, events, max, timeout, mask);
}

int sched_yield(void) {
    yield_fn fn = (yield_fn)next(&yield_next, "sched_yield");
    __atomic_fetch_add(&yields, 1, __ATOMIC_RELAXED);
    return fn();
}
