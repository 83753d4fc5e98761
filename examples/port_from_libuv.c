/* port_from_libuv: the second libuv program of docs/MIGRATING.md, ported.
 *
 * A helper thread works out a seed and hands it to the loop; the loop then
 * checksums RECORDS records in chunks while a 20 ms timer reports progress;
 * when the job is done nothing is left and the run ends. In libuv this is
 * a uv_async_t (the hand-over), a uv_idle_t (a chunk per iteration) and a
 * uv_timer_t, each finding the job through handle->data. Here:
 *
 *   uv_async_t + uv_async_send   ->  a lull_task posted with
 *       lull_task_post_remote, and lull_loop_ref while it is expected
 *       (an active uv_async_t keeps uv_run going; a task not yet posted
 *       does not)
 *   uv_close(async)              ->  lull_loop_unref: a task needs no
 *       closing
 *   uv_idle_t                    ->  a task that runs until
 *       lull_loop_should_yield and posts itself again
 *   uv_timer_start(t, cb, 20, 20) -> lull_timer_start(t, 20 ms, 20 ms), in ns
 *   handle->data                 ->  LULL_CONTAINER_OF
 *
 * Prints progress lines and a summary; exits 0 when the job completed.
 *
 * Build:
 *   cc -O2 -pthread -o port_from_libuv port_from_libuv.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#define _POSIX_C_SOURCE 200809L
#include <lull.h>
#include <pthread.h>
#include <stdio.h>

#define MS      1000000ull
#define RECORDS 4000000ull

typedef struct job {
    lull_loop *loop;
    lull_task seeded;    /* posted by the helper thread (was uv_async_t) */
    lull_task work;      /* one slice of the job (was uv_idle_t) */
    lull_timer progress; /* every 20 ms while the job runs (was uv_timer_t) */
    uint64_t seed;       /* written by the helper before it posts */
    uint64_t next, sum;
} job;

static uint64_t mix(uint64_t h, uint64_t x) {
    for (int i = 0; i < 4; i++) {
        h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        x = x * 0xff51afd7ed558ccdull;
    }
    return h;
}

static void on_work(lull_task *t) {
    job *j = LULL_CONTAINER_OF(t, job, work);
    while (j->next < RECORDS) {
        j->sum = mix(j->sum, j->next++);
        if (lull_loop_should_yield(j->loop)) break;
    }
    if (j->next < RECORDS)
        lull_task_post(j->loop, t);
    else
        lull_timer_stop(&j->progress);
}

static void on_progress(lull_timer *t) {
    job *j = LULL_CONTAINER_OF(t, job, progress);
    printf("progress: %.0f%%\n", 100.0 * (double)j->next / (double)RECORDS);
}

/* Runs on the loop thread; the seed written before the post is visible. */
static void on_seeded(lull_task *t) {
    job *j = LULL_CONTAINER_OF(t, job, seeded);
    lull_loop_unref(j->loop); /* nothing more to expect from the helper */
    j->sum = j->seed;
    lull_task_post(j->loop, &j->work);
    lull_timer_start(&j->progress, 20 * MS, 20 * MS);
}

static void *helper(void *arg) {
    job *j = arg;
    j->seed = mix(0, 42);
    lull_task_post_remote(j->loop, &j->seeded); /* was uv_async_send */
    return NULL;
}

int main(void) {
    job j = {.next = 0};
    int err = lull_loop_new(&j.loop, NULL);
    if (err < 0) {
        fprintf(stderr, "port_from_libuv: %s\n", lull_strerror(err));
        return 1;
    }
    lull_task_init(&j.seeded, on_seeded);
    lull_task_init(&j.work, on_work);
    lull_timer_init(j.loop, &j.progress, on_progress);
    lull_loop_ref(j.loop); /* the helper's post is expected */

    pthread_t th;
    if (pthread_create(&th, NULL, helper, &j) != 0) {
        lull_loop_unref(j.loop); /* no post is coming */
        lull_loop_free(j.loop);
        return 1;
    }
    int rc = lull_loop_run(j.loop, LULL_RUN_DEFAULT);
    pthread_join(th, NULL); /* the helper may still be inside its post */

    printf("done: %llu records, checksum %016llx\n", (unsigned long long)j.next,
           (unsigned long long)j.sum);
    if (lull_loop_free(j.loop) != 0 || rc != 0) return 1;
    return j.next == RECORDS ? 0 : 1;
}
