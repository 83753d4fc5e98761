/* producer_stream: a producer writing records to a socket stream on the
 * loop's shared quantum (docs/STREAMS.md, "How to write a producer").
 *
 * The pattern is produce() and on_drain(): send while the stream is
 * writable, yield when the quantum is spent (post the continuation and
 * return), and when the stream is full, return without posting: the drain
 * callback posts it again. The writes of one slice leave in one writev.
 * The other end of a socketpair counts what arrives.
 *
 * Build:
 *   cc -O2 -o producer_stream producer_stream.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#include <errno.h>
#include <lull.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#define RECORDS 100000

typedef struct producer {
    lull_stream out;
    lull_task task;
    char record[500];
    int next;
} producer;

static void produce(lull_task *t) {
    producer *p = LULL_CONTAINER_OF(t, producer, task);
    while (p->next < RECORDS) {
        if (!lull_endpoint_writable(&p->out.ep))
            return; /* on_drain resumes us */
        if (lull_endpoint_send_copy(&p->out.ep, p->record, 500) < 0) return;
        p->next++;
        if (lull_loop_should_yield(p->out.loop)) { /* the shared quantum */
            lull_task_post(p->out.loop, t);        /* continue behind others */
            return;
        }
    }
    lull_stream_shutdown(&p->out); /* all sent: the reader gets EOF */
}

static void on_drain(lull_endpoint *ep) {
    producer *p = LULL_CONTAINER_OF(ep, producer, out.ep);
    lull_task_post(p->out.loop, &p->task);
}

/* ------------------------------------------------------ the other end */

static int received;
static void on_record(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    (void)bytes;
    if (len == 500) received++;
}
static void on_close(lull_endpoint *ep, int reason) {
    (void)ep;
    printf("reader: %d records, then close (%d)\n", received, reason);
}

int main(void) {
    lull_loop *loop;
    static producer p;
    lull_stream in;
    int sv[2];
    int err = lull_loop_new(&loop, NULL);
    if (err < 0) {
        fprintf(stderr, "producer_stream: %s\n", lull_strerror(err));
        return 1;
    }
    /* lull_stream_open owns its fd from the call on, also on failure. */
    int rc = socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0 ? -errno : 0;
    if (rc == 0 && (rc = lull_stream_open(loop, &p.out, sv[0], NULL)) < 0)
        close(sv[1]);
    if (rc == 0 && (rc = lull_stream_open(loop, &in, sv[1], NULL)) < 0) {
        lull_endpoint_close(&p.out.ep, 0);
        lull_loop_run(loop, LULL_RUN_DEFAULT); /* its close callback */
    }
    if (rc < 0) {
        fprintf(stderr, "producer_stream: a socket pair: %s\n",
                lull_strerror(rc));
        lull_loop_free(loop);
        return 1;
    }
    lull_endpoint_set_callbacks(&p.out.ep, NULL, on_drain, NULL);
    lull_endpoint_set_callbacks(&in.ep, on_record, NULL, on_close);
    lull_task_init(&p.task, produce);
    lull_task_post(loop, &p.task);
    rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    printf("producer: %d records in %llu writev calls\n", p.next,
           (unsigned long long)p.out.writes);
    return lull_loop_free(loop) == 0 && rc == 0 && received == RECORDS ? 0 : 1;
}
