/* Cross-thread round trips for callgrind: two loops on two threads, both
 * pinned to one CPU, post a task to each other with lull_task_post_remote
 * N times (lull-lab turns' figure (5), without its clock and samples).
 * bench/callgrind_trip.sh runs it at two lengths and divides the
 * difference, so setup and teardown cancel out.
 *
 *   remote_trip futex|epoll N
 *
 * futex: the loops watch no fd and sleep on their futex; epoll: each
 * watches an idle socket and sleeps in epoll_wait, woken by its eventfd. */
#include "args.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lull.h"

static lull_loop *loop_a, *loop_b;
static lull_task ping, pong, stop_b;
static unsigned long left;
static bool watch_fd;
static int socks[2][2];
static lull_io idle[2];
static pthread_barrier_t ready;

static void never(lull_io *io, int events) {
    (void)io;
    (void)events;
}

static void on_pong(lull_task *t) { /* on b */
    (void)t;
    lull_task_post_remote(loop_a, &ping);
}

static void on_stop_b(lull_task *t) {
    (void)t;
    if (watch_fd) lull_io_stop(&idle[1]);
    lull_loop_unref(loop_b);
}

static void on_ping(lull_task *t) { /* on a: a trip ended */
    (void)t;
    if (--left > 0) {
        lull_task_post_remote(loop_b, &pong);
        return;
    }
    lull_task_post_remote(loop_b, &stop_b);
    if (watch_fd) lull_io_stop(&idle[0]);
    lull_loop_unref(loop_a);
}

static void pin_cpu0(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void setup(lull_loop **loop, int side) {
    if (lull_loop_new(loop, NULL) != 0) exit(1);
    lull_loop_ref(*loop);
    if (!watch_fd) return;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, socks[side]) != 0) exit(1);
    lull_io_init(*loop, &idle[side], socks[side][0], never);
    lull_io_start(&idle[side], LULL_READABLE);
    lull_io_unref(&idle[side]);
}

static void *side_b(void *arg) {
    (void)arg;
    pin_cpu0();
    setup(&loop_b, 1);
    pthread_barrier_wait(&ready);
    lull_loop_run(loop_b, LULL_RUN_DEFAULT);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3 || (strcmp(argv[1], "futex") && strcmp(argv[1], "epoll"))) {
        fprintf(stderr, "usage: remote_trip futex|epoll N\n");
        return 2;
    }
    watch_fd = strcmp(argv[1], "epoll") == 0;
    unsigned long long n;
    /* 10^12: an hour and more at a few ns a hop */
    if (!bench_count(argv[2], 1, 1000000000000ull, &n)) {
        fprintf(stderr, "remote_trip: N takes 1..1000000000000, not '%s'\n",
                argv[2]);
        return 2;
    }
    left = (unsigned long)n;
    lull_task_init(&ping, on_ping);
    lull_task_init(&pong, on_pong);
    lull_task_init(&stop_b, on_stop_b);
    pthread_barrier_init(&ready, NULL, 2);
    pthread_t th;
    if (pthread_create(&th, NULL, side_b, NULL) != 0) return 1;
    pin_cpu0();
    setup(&loop_a, 0);
    pthread_barrier_wait(&ready);
    lull_task_post_remote(loop_b, &pong);
    lull_loop_run(loop_a, LULL_RUN_DEFAULT);
    pthread_join(th, NULL);
    int rc = lull_loop_free(loop_a) | lull_loop_free(loop_b);
    for (int s = 0; watch_fd && s < 2; s++) {
        close(socks[s][0]);
        close(socks[s][1]);
    }
    return rc ? 1 : 0;
}
