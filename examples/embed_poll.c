/* embed_poll: lull inside another program's loop. The host here is a plain
 * poll() loop with a watcher of its own (a pipe it reads); lull runs a
 * repeating timer and a task posted from a worker thread. The host asks
 * lull for its fd and its timeout, waits on both with its own, and runs
 * lull without blocking when either says so (docs/API.md,
 * lull_loop_backend_fd). The same three calls fit any loop that can watch an fd
 * and sleep for a time: GLib (g_unix_fd_add and a timeout source), Qt
 * (QSocketNotifier), libuv (uv_poll_t on the fd and a uv_timer_t), a game's
 * frame loop.
 *
 * Build:
 *   cc -O2 -pthread -o embed_poll embed_poll.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <lull.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int ticks, posts;
static lull_timer tick;
static lull_task from_worker;

static void on_tick(lull_timer *t) {
    if (++ticks == 5) lull_timer_stop(t);
}

static void on_post(lull_task *t) {
    (void)t;
    posts++;
}

/* A worker thread hands lull a task while the host sleeps in poll(). */
static void *worker(void *loop) {
    nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL); /* 2 ms */
    lull_task_post_remote(loop, &from_worker);
    return NULL;
}

int main(void) {
    lull_loop *loop;
    int host_pipe[2];
    int err = lull_loop_new(&loop, NULL);
    if (err < 0) {
        fprintf(stderr, "embed_poll: %s\n", lull_strerror(err));
        return 1;
    }
    /* The fd the host waits on is made at the first call, so it can fail
     * (out of fds): a host that went on without it would sleep through a
     * post from the thread once no timer is left to wake it. */
    int lull_fd = lull_loop_backend_fd(loop);
    if (lull_fd < 0) {
        fprintf(stderr, "embed_poll: the loop's fd: %s\n",
                lull_strerror(lull_fd));
        lull_loop_free(loop);
        return 1;
    }
    lull_task_init(&from_worker, on_post); /* before the thread posts it */
    pthread_t th;
    if (pipe(host_pipe) < 0) {
        perror("embed_poll: pipe");
        lull_loop_free(loop);
        return 1;
    }
    if ((err = pthread_create(&th, NULL, worker, loop)) != 0) {
        fprintf(stderr, "embed_poll: a thread: %s\n", strerror(err));
        close(host_pipe[0]);
        close(host_pipe[1]);
        lull_loop_free(loop);
        return 1;
    }
    lull_timer_init(loop, &tick, on_tick);
    lull_timer_start(&tick, 1000000ull, 1000000ull); /* 1 ms, in ns */
    /* The host's own work: a byte in its pipe, which it reads itself (a
     * pipe's first byte fits: the write cannot block or fall short). */
    (void)!write(host_pipe[1], "h", 1);

    int host_reads = 0, turns = 0, failed = 0;
    while (!failed && (ticks < 5 || posts < 1 || host_reads < 1)) {
        int64_t ns;
        lull_loop_backend_timeout(loop, &ns); /* just before the host waits */
        /* Rounded up; past poll's int range (a timer weeks away), the
         * longest wait poll takes, after which the loop is asked again. */
        int ms = ns < 0                    ? -1
                 : ns / 1000000 >= INT_MAX ? INT_MAX
                                           : (int)((ns + 999999) / 1000000);
        struct pollfd fds[2] = {
            {.fd = lull_fd, .events = POLLIN},
            {.fd = host_pipe[0], .events = POLLIN},
        };
        if (poll(fds, 2, ms) < 0 && errno != EINTR) { /* EINTR: look again */
            perror("embed_poll: poll");
            failed = 1;
        }
        if (fds[1].revents & POLLIN) {
            char c;
            if (read(host_pipe[0], &c, 1) == 1) host_reads++;
        }
        /* what is ready, no blocking */
        if (lull_loop_run(loop, LULL_RUN_NOWAIT) < 0) failed = 1;
        turns++;
    }
    pthread_join(th, NULL);
    printf("embed_poll: %d ticks, %d post from a thread, %d host read, "
           "in %d host turns\n",
           ticks, posts, host_reads, turns);
    close(host_pipe[0]);
    close(host_pipe[1]);
    lull_timer_stop(&tick); /* still armed if the loop above failed */
    return lull_loop_free(loop) == 0 && !failed ? 0 : 1;
}
