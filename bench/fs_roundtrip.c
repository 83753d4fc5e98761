/* A 4 KiB pread's round trip through a pool: submitted from the loop's
 * thread, read on a pool thread, the result back on the loop, which
 * submits the next. Beside it, in the same run and under the same pinning:
 *
 *  - a bare thread pool on the same futex floor: one worker thread, one
 *    futex word each way, the pread between (no loop, no queue: the
 *    least any pool can do);
 *  - lull: lull_fs_read on a pool of one thread;
 *  - libuv: uv_fs_read with UV_THREADPOOL_SIZE=1 (when pkg-config found
 *    libuv at build time; skipped with a line otherwise).
 *
 * The file (1 MiB, in the page cache after the first round) is read at
 * offsets that walk through it, 4 KiB at a time. Rows run in turn, round
 * after round (round r starts at row r mod N), so drift on the machine
 * spreads over all of them. Each row reports the median over rounds of
 * the per-round p50 (and p99), with the min and max across rounds.
 *
 *   fs_roundtrip [--cpu N | --no-pin] [--trips N] [--rounds N]
 *
 * --cpu N (default 0) pins the process, and so every thread it starts, to
 * CPU N; --no-pin lets the threads float. libuv's pool threads keep the
 * pinning they were started with: run the program once per mode. */
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "lull.h"
#include "rounds.h"
#ifdef LAB_HAVE_UV
#include <uv.h>
#endif

enum { BLOCK = 4096, FILE_SIZE = 1 << 20 };

static int file_fd;
static char block[BLOCK];

static uint64_t offset_of(int n) {
    return (uint64_t)(n % (FILE_SIZE / BLOCK)) * BLOCK;
}

/* ------------------------------------------- bare pool on a futex */

static uint32_t to_worker, to_main; /* futex words: 1 when it is your turn */
static uint64_t bare_offset;
static ssize_t bare_result;

static void futex_wait_for(uint32_t *w) {
    while (!__atomic_load_n(w, __ATOMIC_ACQUIRE))
        syscall(SYS_futex, w, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
    __atomic_store_n(w, 0, __ATOMIC_RELAXED);
}

static void futex_pass(uint32_t *w) {
    __atomic_store_n(w, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void *bare_worker(void *arg) {
    int n = *(int *)arg;
    for (int i = 0; i < n; i++) {
        futex_wait_for(&to_worker);
        bare_result = pread(file_fd, block, BLOCK, (off_t)bare_offset);
        futex_pass(&to_main);
    }
    return NULL;
}

static int run_bare(bench_samples *s) {
    int n = bench_warmup + bench_trips;
    pthread_t t;
    to_worker = to_main = 0;
    if (pthread_create(&t, NULL, bare_worker, &n) != 0) return -EAGAIN;
    s->start = bench_now_ns();
    int rc = 0;
    while (bench_more(s)) {
        bare_offset = offset_of(s->n);
        futex_pass(&to_worker);
        futex_wait_for(&to_main);
        if (bare_result != BLOCK) rc = -EIO;
        bench_sample(s);
    }
    pthread_join(t, NULL);
    return rc;
}

/* ------------------------------------------------------ lull_fs_read */

typedef struct lulltrip {
    lull_fs req;
    lull_loop *loop;
    lull_pool *pool;
    bench_samples *s;
    int rc;
} lulltrip;

static void lull_back(lull_fs *req, int64_t result) {
    lulltrip *p = LULL_CONTAINER_OF(req, lulltrip, req);
    if (result != BLOCK) p->rc = result < 0 ? (int)result : -EIO;
    bench_sample(p->s);
    if (bench_more(p->s) && p->rc == 0)
        p->rc = lull_fs_read(p->loop, p->pool, req, file_fd, block, BLOCK,
                             offset_of(p->s->n), lull_back);
}

static int run_lull(bench_samples *s) {
    lulltrip p = {.s = s};
    int rc = lull_loop_new(&p.loop, NULL);
    if (rc < 0) return rc;
    if ((rc = lull_pool_new(&p.pool, &(lull_pool_options){.threads = 1})) < 0) {
        lull_loop_free(p.loop);
        return rc;
    }
    s->start = bench_now_ns();
    rc = lull_fs_read(p.loop, p.pool, &p.req, file_fd, block, BLOCK, 0,
                      lull_back);
    if (rc == 0) rc = lull_loop_run(p.loop, LULL_RUN_DEFAULT);
    if (rc == 0) rc = p.rc;
    lull_pool_free(p.pool);
    if (lull_loop_free(p.loop) < 0 && rc == 0) rc = -EBUSY;
    return rc;
}

/* ---------------------------------------------------------- libuv */

#ifdef LAB_HAVE_UV
typedef struct uvtrip {
    uv_fs_t req;
    uv_loop_t *loop;
    uv_buf_t buf;
    bench_samples *s;
    int rc;
} uvtrip;

static void uv_back(uv_fs_t *req) {
    uvtrip *u = LULL_CONTAINER_OF(req, uvtrip, req);
    if (req->result != BLOCK) u->rc = req->result < 0 ? (int)req->result : -EIO;
    uv_fs_req_cleanup(req);
    bench_sample(u->s);
    if (bench_more(u->s) && u->rc == 0)
        u->rc = uv_fs_read(u->loop, req, file_fd, &u->buf, 1,
                           (int64_t)offset_of(u->s->n), uv_back);
}

static int run_uv(bench_samples *s) {
    uvtrip u = {.s = s};
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) return rc;
    u.loop = &loop;
    u.buf = uv_buf_init(block, BLOCK);
    s->start = bench_now_ns();
    rc = uv_fs_read(&loop, &u.req, file_fd, &u.buf, 1, 0, uv_back);
    if (rc == 0) rc = uv_run(&loop, UV_RUN_DEFAULT) < 0 ? -EIO : 0;
    if (rc == 0) rc = u.rc;
    uv_loop_close(&loop);
    return rc;
}
#endif

/* ------------------------------------------------------------ driver */

enum { ROW_BARE, ROW_LULL, ROW_UV, ROWS };

static int run_row(int k, bench_samples *s) {
    switch (k) {
    case ROW_BARE:
        return run_bare(s);
    case ROW_LULL:
        return run_lull(s);
#ifdef LAB_HAVE_UV
    case ROW_UV:
        return run_uv(s);
#endif
    }
    return -EINVAL;
}

int main(int argc, char **argv) {
    bench b = {.prog = "fs_roundtrip"};
    int rc = bench_start(&b, argc, argv);
    if (rc != 0) return rc;
    setenv("UV_THREADPOOL_SIZE", "1", 1);
    char path[] = "/tmp/fs_roundtrip-XXXXXX";
    file_fd = mkstemp(path);
    if (file_fd < 0) {
        perror("fs_roundtrip: mkstemp");
        return 1;
    }
    unlink(path);
    static char chunk[FILE_SIZE];
    memset(chunk, 'x', sizeof chunk);
    if (write(file_fd, chunk, sizeof chunk) != (ssize_t)sizeof chunk) {
        perror("fs_roundtrip: write");
        return 1;
    }

    static bench_row rows[ROWS] = {
        [ROW_BARE] = {.name = "bare pool: futex hand-off + pread"},
        [ROW_LULL] = {.name = "lull: lull_fs_read -> cb"},
        [ROW_UV] = {.name = "libuv: uv_fs_read -> cb"},
    };
    bench_uv_row(&rows[ROW_UV], "uv_fs_read -> cb");
    if (bench_rounds(&b, rows, ROWS, run_row) < 0) return 1;
    bench_print(&b, "a 4 KiB pread through a pool and back", rows, ROWS, 36);
    double m, lo, hi;
    if (bench_ratio(&rows[ROW_LULL], &rows[ROW_BARE], &m, &lo, &hi))
        printf("\nlull / bare pool p50, per round: %.2f [%.2f - %.2f]\n", m, lo,
               hi);
    if (bench_ratio(&rows[ROW_LULL], &rows[ROW_UV], &m, &lo, &hi))
        printf("lull / libuv p50, per round: %.2f [%.2f - %.2f]\n", m, lo, hi);
    close(file_fd);
    return 0;
}
