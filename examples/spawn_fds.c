/* spawn_fds: a child given fds beyond stdin, stdout and stderr. Fd 3 is a
 * pipe the parent writes and the child reads, fd 4 a pipe back; the child
 * (a shell) upper-cases what comes on 3 and answers on 4, with a resource
 * limit of its own (at most 64 open fds), while its stdout stays the
 * terminal's.
 *
 * Build:
 *   cc -O2 -o spawn_fds spawn_fds.c $(pkg-config --cflags --libs lull)
 */
#include <lull.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

typedef struct app {
    lull_process child;
    lull_stream to_child;   /* the parent's end of the child's fd 3 */
    lull_stream from_child; /* the parent's end of the child's fd 4 */
    char answer[128];
    size_t len;
    int status;
} app;

static void on_answer(lull_endpoint *ep, const void *bytes, size_t len) {
    app *a = LULL_CONTAINER_OF(ep, app, from_child.ep);
    if (a->len + len >= sizeof a->answer) len = sizeof a->answer - 1 - a->len;
    memcpy(a->answer + a->len, bytes, len);
    a->len += len;
}

static void on_exit_cb(lull_process *p, int exit_status, int term_signal) {
    app *a = LULL_CONTAINER_OF(p, app, child);
    a->status = term_signal ? 128 + term_signal : exit_status;
}

int main(void) {
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) < 0) return 1;
    app a = {0};
    lull_stdio more[2] = {
        /* fd 3: the child reads, the parent's stream writes. */
        {.kind = LULL_STDIO_PIPE,
         .stream = &a.to_child,
         .flags = LULL_STDIO_CHILD_READS},
        /* fd 4: the child writes, the parent's stream reads. */
        {.kind = LULL_STDIO_PIPE, .stream = &a.from_child}};
    lull_rlimit limit = {.resource = RLIMIT_NOFILE, .cur = 64, .max = 64};
    char *argv[] = {"/bin/sh", "-c",
                    "echo \"child: ulimit -n is $(ulimit -n)\";"
                    " tr a-z A-Z <&3 >&4",
                    NULL};
    lull_process_options o = {.argv = argv,
                              .more_stdio = more,
                              .more_stdio_count = 2,
                              .rlimits = &limit,
                              .rlimit_count = 1};
    int rc = lull_process_spawn(loop, &a.child, &o, on_exit_cb);
    if (rc < 0) { /* nothing started: the loop is empty */
        fprintf(stderr, "spawn_fds: spawn: %s\n", lull_strerror(rc));
        lull_loop_free(loop);
        return 1;
    }
    fflush(stdout); /* the child writes to the same stdout */
    lull_endpoint_set_callbacks(&a.from_child.ep, on_answer, NULL, NULL);
    /* Whatever happens, fd 3 then ends: the child reads EOF and exits. */
    rc = lull_endpoint_send_copy(&a.to_child.ep, "hello from fd 3", 15);
    if (rc < 0) fprintf(stderr, "spawn_fds: send: %s\n", lull_strerror(rc));
    lull_stream_shutdown(&a.to_child); /* EOF on the child's fd 3 */
    int run = lull_loop_run(loop, LULL_RUN_DEFAULT);
    /* The child exited and fd 4 reached EOF (its stream closed itself);
     * fd 3's stream is still open for reading nothing: close it. */
    lull_endpoint_close(&a.to_child.ep, 0);
    printf("spawn_fds: child answered on fd 4: %.*s, exit %d\n", (int)a.len,
           a.answer, a.status);
    return lull_loop_free(loop) == 0 && rc == 0 && run == 0 ? 0 : 1;
}
