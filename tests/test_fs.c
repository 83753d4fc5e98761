/* File helpers and name resolution on the pool: open, read at offset and
 * close; the journal's batching (appends of one turn share a sync, appends
 * made while a sync is in flight share the next), its order, its data on
 * disk (re-read and compared) and its sticky errors; getaddrinfo. Files
 * live in a fresh temporary directory per case. */
#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static char dir[64];
static char path[128];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/lull-test-fs-XXXXXX");
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/file", dir);
}

static void remove_dir(void) {
    unlink(path);
    CHECK_EQ(rmdir(dir), 0);
}

static void sem_wait_10s(sem_t *s) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    while (sem_timedwait(s, &deadline) != 0) {
        if (errno == ETIMEDOUT)
            check_fail(__FILE__, __LINE__, "not within 10 s");
    }
}

/* Holds a pool's only thread until released. */
typedef struct gate {
    lull_work work;
    sem_t started, release;
} gate;

static int gate_run(lull_work *w) {
    gate *g = LULL_CONTAINER_OF(w, gate, work);
    sem_post(&g->started);
    sem_wait_10s(&g->release);
    return 0;
}

static void gate_hold(lull_loop *loop, lull_pool *pool, gate *g) {
    sem_init(&g->started, 0, 0);
    sem_init(&g->release, 0, 0);
    lull_work_init(&g->work, gate_run, NULL);
    CHECK_EQ(lull_work_submit(loop, pool, &g->work), 0);
    sem_wait_10s(&g->started);
}

/* ---------------------------------------------- open, read, close */

static int64_t results[8];
static int nresults;

static void record(lull_fs *req, int64_t result) {
    (void)req;
    results[nresults++] = result;
}

TEST_THREADED(fs_open_read_close) {
    make_dir();
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("0123456789abcdefghij", f);
    fclose(f);

    lull_loop *loop;
    lull_pool *pool;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 2}), 0);
    lull_fs req;
    memset(&req, 0, sizeof req);
    nresults = 0;
    CHECK_EQ(lull_fs_open(loop, pool, &req, path, O_RDONLY, 0, record), 0);
    CHECK_EQ(lull_fs_open(loop, pool, &req, path, O_RDONLY, 0, record), -EBUSY);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(nresults, 1);
    int fd = (int)results[0];
    CHECK(fd >= 0);
    CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);

    char buf[32] = "";
    CHECK_EQ(lull_fs_read(loop, pool, &req, fd, buf, 10, 5, record), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(results[1], 10);
    CHECK(memcmp(buf, "56789abcde", 10) == 0);
    /* Past the end: what there is. */
    CHECK_EQ(lull_fs_read(loop, pool, &req, fd, buf, sizeof buf, 15, record),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(results[2], 5);
    CHECK(memcmp(buf, "fghij", 5) == 0);

    CHECK_EQ(lull_fs_close(loop, pool, &req, fd, record), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(results[3], 0);
    CHECK_EQ(fcntl(fd, F_GETFD), -1); /* closed */

    char missing[160];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    CHECK_EQ(lull_fs_open(loop, pool, &req, missing, O_RDONLY, 0, record), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(results[4], -ENOENT);

    CHECK_EQ(lull_fs_read(loop, pool, &req, -1, buf, 1, 0, record), -EBADF);
    CHECK_EQ(lull_fs_read(loop, pool, &req, 0, NULL, 1, 0, record), -EINVAL);
    CHECK_EQ(lull_fs_open(loop, pool, &req, NULL, O_RDONLY, 0, record),
             -EINVAL);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    remove_dir();
}

TEST_THREADED(fs_cancel_before_start) {
    make_dir();
    lull_loop *loop;
    lull_pool *pool;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    gate g;
    gate_hold(loop, pool, &g);
    lull_fs req;
    memset(&req, 0, sizeof req);
    nresults = 0;
    CHECK_EQ(
        lull_fs_open(loop, pool, &req, path, O_RDWR | O_CREAT, 0600, record),
        0);
    CHECK_EQ(lull_fs_cancel(&req), 0);
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(nresults, 1);
    CHECK_EQ(results[0], -ECANCELED);
    CHECK_EQ(access(path, F_OK), -1); /* never created */
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    sem_destroy(&g.started);
    sem_destroy(&g.release);
    CHECK_EQ(rmdir(dir), 0);
}

/* ------------------------------------------------------------ journal */

#define RECORDS 1000

typedef struct rec {
    lull_append req;
    char text[24];
    int index;
} rec;

static rec recs[RECORDS];
static int completed[RECORDS];
static int ncompleted;
static int last_status;

static void appended(lull_append *req, int status) {
    rec *r = LULL_CONTAINER_OF(req, rec, req);
    last_status = status;
    completed[ncompleted++] = r->index;
}

static void append(lull_journal *j, int i) {
    rec *r = &recs[i];
    r->index = i;
    snprintf(r->text, sizeof r->text, "record %d\n", i);
    CHECK_EQ(
        lull_journal_append(j, &r->req, r->text, strlen(r->text), appended), 0);
}

static int open_journal_file(int flags) {
    int fd = open(path, flags | O_CREAT | O_CLOEXEC, 0600);
    CHECK(fd >= 0);
    return fd;
}

/* The file holds exactly records [0, n) in order. */
static void check_file(int n) {
    static char want[RECORDS * 24], got[RECORDS * 24 + 1];
    size_t len = 0;
    for (int i = 0; i < n; i++)
        len += (size_t)sprintf(want + len, "record %d\n", i);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    ssize_t r = pread(fd, got, sizeof got, 0);
    close(fd);
    CHECK_EQ(r, (ssize_t)len);
    CHECK(memcmp(want, got, len) == 0);
}

/* Appends of one turn share a sync; appends made while that sync is in
 * flight share the next one; completions come in append order; offsets
 * follow each other. */
TEST_THREADED(journal_batches_by_turn_and_by_sync_in_flight) {
    make_dir();
    lull_loop *loop;
    lull_pool *pool;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    int fd = open_journal_file(O_WRONLY);
    lull_journal j;
    CHECK_EQ(lull_journal_init(loop, pool, &j, fd), 0);
    ncompleted = 0;

    gate g;
    gate_hold(loop, pool, &g); /* the first batch waits behind it */
    for (int i = 0; i < 3; i++)
        append(&j, i);
    CHECK(lull_journal_busy(&j));
    CHECK_EQ(lull_loop_settle(loop),
             1); /* the batch leaves: queued on the pool */
    CHECK_EQ(ncompleted, 0);
    for (int i = 3; i < 10; i++)
        append(&j, i);                   /* while it is in flight */
    CHECK_EQ(lull_loop_settle(loop), 0); /* ... they wait for it */
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK(!lull_journal_busy(&j));

    CHECK_EQ(ncompleted, 10);
    uint64_t off = 0;
    for (int i = 0; i < 10; i++) {
        CHECK_EQ(completed[i], i);
        CHECK_U64_EQ(recs[i].req.offset, off);
        off += strlen(recs[i].text);
        CHECK_U64_EQ(recs[i].req.sync, i < 3 ? 1 : 2);
    }
    CHECK_U64_EQ(j.syncs, 2);
    check_file(10);
    close(fd);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    sem_destroy(&g.started);
    sem_destroy(&g.release);
    remove_dir();
}

/* 1,000 records, appended a few per turn by a chain of tasks, land on
 * disk once each and in order; far fewer syncs than records. */
static lull_journal chain_journal;
static lull_task chain_task;
static int chain_next;

static void chain(lull_task *t) {
    for (int k = 0; k < 7 && chain_next < RECORDS; k++)
        append(&chain_journal, chain_next++);
    if (chain_next < RECORDS) lull_task_post(chain_journal.loop, t);
}

TEST_THREADED(journal_1000_records_on_disk_in_order) {
    make_dir();
    lull_loop *loop;
    lull_pool *pool;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 2}), 0);
    int fd = open_journal_file(O_WRONLY);
    CHECK_EQ(lull_journal_init(loop, pool, &chain_journal, fd), 0);
    ncompleted = 0;
    chain_next = 0;
    lull_task_init(&chain_task, chain);
    lull_task_post(loop, &chain_task);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, RECORDS);
    uint64_t prev_sync = 0;
    for (int i = 0; i < RECORDS; i++) {
        CHECK_EQ(completed[i], i);
        CHECK(recs[i].req.sync >= prev_sync && recs[i].req.sync >= 1);
        prev_sync = recs[i].req.sync;
    }
    CHECK_U64_EQ(chain_journal.syncs, prev_sync);
    CHECK(chain_journal.syncs <= RECORDS / 7 + 1); /* >= 7 per batch */
    printf("journal: %d records in %" PRIu64 " syncs\n", RECORDS,
           chain_journal.syncs);
    check_file(RECORDS);

    /* A journal opened on the same file again continues at its end. */
    lull_journal again;
    CHECK_EQ(lull_journal_init(loop, pool, &again, fd), 0);
    CHECK_U64_EQ(again.end, chain_journal.end);
    close(fd);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    remove_dir();
}

/* A failed write fails its batch, everything queued behind it and every
 * later append. */
TEST_THREADED(journal_error_is_sticky) {
    make_dir();
    lull_loop *loop;
    lull_pool *pool;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    int fd = open_journal_file(O_RDONLY); /* writes fail with EBADF */
    lull_journal j;
    CHECK_EQ(lull_journal_init(loop, pool, &j, fd), 0);
    ncompleted = 0;
    gate g;
    gate_hold(loop, pool, &g);
    append(&j, 0);
    CHECK_EQ(lull_loop_settle(loop), 1);
    append(&j, 1); /* queued behind the failing batch */
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 2);
    CHECK_EQ(last_status, -EBADF);
    CHECK_U64_EQ(recs[0].req.sync, 0);
    CHECK_EQ(lull_journal_append(&j, &recs[2].req, "x", 1, appended), -EBADF);
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK(!lull_journal_busy(&j));
    close(fd);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    sem_destroy(&g.started);
    sem_destroy(&g.release);
    remove_dir();
}

/* -------------------------------------------------------- getaddrinfo */

static int lookup_status = 1;
static int lookup_family;
static uint16_t lookup_port;

static void looked_up(lull_lookup *req, int status, struct addrinfo *res) {
    (void)req;
    lookup_status = status;
    if (res) {
        lookup_family = res->ai_family;
        lookup_port = ntohs(((struct sockaddr_in *)res->ai_addr)->sin_port);
        freeaddrinfo(res);
    }
}

TEST_THREADED(getaddrinfo_on_the_pool) {
    lull_loop *loop;
    lull_pool *pool;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    /* Numeric, so the case needs no resolver or network. */
    struct addrinfo hints = {.ai_family = AF_INET,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    lull_lookup req;
    memset(&req, 0, sizeof req);
    CHECK_EQ(lull_lookup_start(loop, pool, &req, "127.0.0.1", "8080", &hints,
                               looked_up),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lookup_status, 0);
    CHECK_EQ(lookup_family, AF_INET);
    CHECK_EQ(lookup_port, 8080);

    CHECK_EQ(lull_lookup_start(loop, pool, &req, "not an address", "1", &hints,
                               looked_up),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lookup_status, EAI_NONAME);
    CHECK_EQ(lull_lookup_start(loop, pool, &req, NULL, NULL, &hints, looked_up),
             -EINVAL);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}
