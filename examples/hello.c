/* hello: a task, a timer and an fd watcher; lull_loop_run returns when idle.
 *
 * Build:
 *   cc -O2 -o hello hello.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#define _POSIX_C_SOURCE 200809L
#include <lull.h>
#include <stdio.h>
#include <unistd.h>

static void on_task(lull_task *t) {
    (void)t;
    puts("task: in a later turn");
}
static void on_timer(lull_timer *t) {
    (void)t;
    puts("timer: 10 ms later");
}
static void on_fd(lull_io *io, int events) {
    char c;
    (void)events;
    if (read(io->fd, &c, 1) == 1) printf("fd: read '%c'\n", c);
    lull_io_stop(io); /* nothing left: lull_loop_run returns */
}

int main(void) {
    lull_loop *loop;
    lull_task task;
    lull_timer timer;
    lull_io io;
    int fds[2];
    int err = lull_loop_new(&loop, NULL);
    if (err < 0) {
        fprintf(stderr, "hello: %s\n", lull_strerror(err));
        return 1;
    }
    if (pipe(fds) < 0) {
        perror("hello: pipe");
        lull_loop_free(loop);
        return 1;
    }
    lull_task_init(&task, on_task);
    lull_task_post(loop, &task);
    lull_timer_init(loop, &timer, on_timer);
    lull_timer_start(&timer, 10 * 1000000ull, 0); /* ns */
    lull_io_init(loop, &io, fds[0], on_fd);
    lull_io_start(&io, LULL_READABLE);
    /* A pipe's first byte fits: this write cannot block or fall short. */
    (void)!write(fds[1], "!", 1);
    int rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    close(fds[0]);
    close(fds[1]);
    int freed = lull_loop_free(loop); /* 0: every handle is done */
    return rc == 0 && freed == 0 ? 0 : 1;
}
