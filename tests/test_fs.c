/* File operations and name resolution on the pool: every lull_fs_* call,
 * its errno path, cancel while queued, hostile arguments, listings of
 * 100,000 entries in bounded batches; open, read at offset and
 * close; the journal's batching (appends of one turn share a sync, appends
 * made while a sync is in flight share the next), its order, its data on
 * disk (re-read and compared) and its sticky errors; getaddrinfo. Files
 * live in a fresh temporary directory per case. */
#include "check.h"
#include "stdio_gone.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <lull.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
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

/* A case's start: a new directory, a loop and a pool of `threads`. */
static void dir_loop_pool(lull_loop **loop, lull_pool **pool, int threads) {
    make_dir();
    CHECK_EQ(lull_loop_new(loop, NULL), 0);
    CHECK_EQ(lull_pool_new(pool, &(lull_pool_options){.threads = threads}), 0);
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
    lull_loop *loop;
    lull_pool *pool;
    dir_loop_pool(&loop, &pool, 1);
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

static int nfailed; /* completions with a status other than 0 */

static void appended(lull_append *req, int status) {
    rec *r = LULL_CONTAINER_OF(req, rec, req);
    last_status = status;
    nfailed += status != 0;
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

/* A journal case's start: dir_loop_pool with one thread, then journal j
 * on the journal file opened with flags; returns the file's fd. */
static int journal_case(lull_loop **loop, lull_pool **pool, lull_journal *j,
                        int flags) {
    dir_loop_pool(loop, pool, 1);
    int fd = open_journal_file(flags);
    CHECK_EQ(lull_journal_init(*loop, *pool, j, fd), 0);
    return fd;
}

/* A journal case's end: its file closed, pool and loop freed, the gate
 * (NULL: none) destroyed, the directory removed. */
static void close_journal_case(int fd, lull_loop *loop, lull_pool *pool,
                               gate *g) {
    close(fd);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    if (g) {
        sem_destroy(&g->started);
        sem_destroy(&g->release);
    }
    remove_dir();
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
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
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
    close_journal_case(fd, loop, pool, &g);
}

/* The pool's queue full (max_queued) when a batch comes back with appends
 * waiting behind it: the journal was accepted once, and its next batch
 * takes the place its last one left. Refused, those appends failed with
 * -EAGAIN though each had been accepted, only because other work filled
 * the queue for a moment (a libuv write is not failed by load). */
static int quick_run(lull_work *w) {
    (void)w;
    return 0;
}

TEST_THREADED(journal_full_queue_between_batches_writes_on) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    make_dir();
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&pool,
                           &(lull_pool_options){.threads = 1, .max_queued = 1}),
             0);
    int fd = open_journal_file(O_WRONLY);
    CHECK_EQ(lull_journal_init(loop, pool, &j, fd), 0);
    ncompleted = nfailed = 0;

    gate first, second;
    gate_hold(loop, pool, &first); /* the only thread held */
    for (int i = 0; i < 3; i++)
        append(&j, i);
    CHECK_EQ(lull_loop_settle(loop), 1); /* batch 1 queued: the queue full */
    for (int i = 3; i < 6; i++)
        append(&j, i); /* behind batch 1, in the journal */
    /* The thread takes batch 1 once the first gate opens; the second gate,
     * queued as soon as there is room, holds the thread after it, and
     * other work fills the queue again before batch 1 comes back. */
    sem_init(&second.started, 0, 0);
    sem_init(&second.release, 0, 0);
    lull_work_init(&second.work, gate_run, NULL);
    sem_post(&first.release);
    while (lull_work_submit(loop, pool, &second.work) == -EAGAIN)
        usleep(100);
    sem_wait_10s(&second.started); /* batch 1 written and synced */
    lull_work filler;
    lull_work_init(&filler, quick_run, NULL);
    CHECK_EQ(lull_work_submit(loop, pool, &filler), 0); /* the queue full */
    lull_work refused;
    lull_work_init(&refused, quick_run, NULL);
    CHECK_EQ(lull_work_submit(loop, pool, &refused), -EAGAIN);
    while (ncompleted < 3) /* batch 1 back: batch 2 goes out */
        CHECK_EQ(lull_loop_run(loop, LULL_RUN_ONCE), 0);
    sem_post(&second.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);

    CHECK_EQ(ncompleted, 6);
    CHECK_EQ(nfailed, 0);
    CHECK_U64_EQ(j.syncs, 2);
    check_file(6);
    sem_destroy(&second.started);
    sem_destroy(&second.release);
    close_journal_case(fd, loop, pool, &first);
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
    lull_loop *loop;
    lull_pool *pool;
    dir_loop_pool(&loop, &pool, 2);
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
    close_journal_case(fd, loop, pool, NULL);
}

/* A failed write fails its batch, everything queued behind it and every
 * later append. */
TEST_THREADED(journal_error_is_sticky) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    /* writes fail with EBADF */
    int fd = journal_case(&loop, &pool, &j, O_RDONLY);
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
    close_journal_case(fd, loop, pool, &g);
}

/* A journal freed in the callback of its last append, once
 * lull_journal_busy says false (the fd may be closed then, and nothing
 * else holds the journal): the owner's one free path, as a libuv user
 * frees a request in its callback. lull must not read the journal after
 * that callback, on the way back from a batch (ok) or from a failed one
 * (the sticky error). The journal lives alone in a page the callback
 * makes inaccessible: a read after the free faults in every build, not
 * only under ASan. */
static lull_journal *paged_journal;
static size_t page_size;
static int freed_calls, freed_status;

static void free_when_idle(lull_append *req, int status) {
    (void)req;
    freed_calls++;
    freed_status = status;
    CHECK(!lull_journal_busy(paged_journal));
    CHECK_EQ(mprotect(paged_journal, page_size, PROT_NONE), 0);
}

static void journal_freed_in_its_last_callback(int flags, int want) {
    lull_loop *loop;
    lull_pool *pool;
    dir_loop_pool(&loop, &pool, 1);
    int fd = open_journal_file(flags);
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    void *mem = mmap(NULL, page_size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(mem != MAP_FAILED);
    paged_journal = mem;
    CHECK_EQ(lull_journal_init(loop, pool, paged_journal, fd), 0);
    static lull_append req;
    freed_calls = 0;
    CHECK_EQ(lull_journal_append(paged_journal, &req, "x", 1, free_when_idle),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(freed_calls, 1);
    CHECK_EQ(freed_status, want);
    CHECK_EQ(munmap(mem, page_size), 0);
    close_journal_case(fd, loop, pool, NULL);
}

TEST_THREADED(journal_freed_in_its_last_callback_after_a_sync) {
    journal_freed_in_its_last_callback(O_WRONLY, 0);
}

TEST_THREADED(journal_freed_in_its_last_callback_after_an_error) {
    journal_freed_in_its_last_callback(O_RDONLY, -EBADF); /* writes fail */
}

/* Two journals on one pool, each freed in its last callback: the first's
 * callback frees it and appends to the second, whose done may come in the
 * same batch of completions; the second frees itself in the callback of
 * that append. Each journal lives alone in a page made inaccessible when
 * it is freed, so a read of either after its free faults. */
static lull_journal *two_j[2];
static lull_append two_req[3];
static int two_calls[3];

static void two_free(int i) {
    CHECK(!lull_journal_busy(two_j[i]));
    CHECK_EQ(mprotect(two_j[i], page_size, PROT_NONE), 0);
}

static void two_second_done(lull_append *req, int status) {
    CHECK_EQ(status, 0);
    two_calls[req - two_req]++;
    if (req == &two_req[2]) two_free(1);
}

static void two_first_done(lull_append *req, int status) {
    CHECK_EQ(status, 0);
    two_calls[0]++;
    (void)req;
    two_free(0);
    CHECK_EQ(
        lull_journal_append(two_j[1], &two_req[2], "z", 1, two_second_done), 0);
}

TEST_THREADED(two_journals_freed_in_their_last_callbacks) {
    lull_loop *loop;
    lull_pool *pool;
    dir_loop_pool(&loop, &pool, 1);
    int fd[2];
    fd[0] = open_journal_file(O_WRONLY);
    char other[sizeof path + 8];
    snprintf(other, sizeof other, "%s.2", path);
    fd[1] = open(other, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    CHECK(fd[1] >= 0);
    page_size = (size_t)sysconf(_SC_PAGESIZE);
    void *mem[2];
    for (int i = 0; i < 2; i++) {
        mem[i] = mmap(NULL, page_size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CHECK(mem[i] != MAP_FAILED);
        two_j[i] = mem[i];
        CHECK_EQ(lull_journal_init(loop, pool, two_j[i], fd[i]), 0);
        two_calls[i] = 0;
    }
    two_calls[2] = 0;
    CHECK_EQ(lull_journal_append(two_j[0], &two_req[0], "x", 1, two_first_done),
             0);
    CHECK_EQ(
        lull_journal_append(two_j[1], &two_req[1], "y", 1, two_second_done), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(two_calls[i], 1);
    CHECK_EQ(lseek(fd[1], 0, SEEK_END), 2); /* "y" and "z" */
    for (int i = 0; i < 2; i++)
        CHECK_EQ(munmap(mem[i], page_size), 0);
    close(fd[1]);
    remove(other);
    close_journal_case(fd[0], loop, pool, NULL);
}

/* fdatasync, wrapped (tests/CMakeLists.txt): fails with EIO while
 * fail_syncs is set, as a disk that lost the written pages reports it. */
int __real_fdatasync(int fd);
int __wrap_fdatasync(int fd);
static int fail_syncs; /* atomic: set by the case, read on a pool thread */

int __wrap_fdatasync(int fd) {
    if (__atomic_load_n(&fail_syncs, __ATOMIC_ACQUIRE)) {
        errno = EIO;
        return -1;
    }
    return __real_fdatasync(fd);
}

/* pwritev, wrapped (tests/CMakeLists.txt): while short_writes is set,
 * every other call fails with EINTR (a signal) and the others write at
 * most 7 bytes, across iovecs (a disk nearly full, a signal mid-write),
 * so that a caller must go on from inside a record or an iovec. */
ssize_t __real_pwritev(int fd, const struct iovec *iov, int n, off_t off);
ssize_t __wrap_pwritev(int fd, const struct iovec *iov, int n, off_t off);
static int short_writes;          /* atomic: set by the case */
static unsigned short_write_call; /* the thread making the calls only */

ssize_t __wrap_pwritev(int fd, const struct iovec *iov, int n, off_t off) {
    if (!__atomic_load_n(&short_writes, __ATOMIC_ACQUIRE))
        return __real_pwritev(fd, iov, n, off);
    if (short_write_call++ % 2 == 0) {
        errno = EINTR;
        return -1;
    }
    struct iovec cut[8];
    int k = 0;
    size_t budget = 7;
    for (int i = 0; i < n && k < 8 && budget > 0; i++) {
        size_t l = iov[i].iov_len < budget ? iov[i].iov_len : budget;
        cut[k++] = (struct iovec){iov[i].iov_base, l};
        budget -= l;
    }
    return __real_pwritev(fd, cut, k, off);
}

/* A journal's batch written a few bytes at a time, with interrupted calls
 * between: every record lands whole, in order, and completes with 0 (an
 * EINTR is no error of the file's, so it must not become the journal's
 * sticky one). */
TEST_THREADED(journal_short_and_interrupted_writes_resume_inside_records) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    ncompleted = 0;
    nfailed = 0;
    short_write_call = 0;
    __atomic_store_n(&short_writes, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 20; i++)
        append(&j, i);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    __atomic_store_n(&short_writes, 0, __ATOMIC_RELEASE);
    CHECK(short_write_call > 20); /* the wrapper did cut the batch */
    CHECK_EQ(ncompleted, 20);
    CHECK_EQ(nfailed, 0);
    CHECK_EQ(j.error, 0);
    check_file(20);
    close_journal_case(fd, loop, pool, NULL);
}

/* Each record's completions, and what an append made inside one says. */
static int sync_fail_calls[8], sync_fail_statuses[8], append_in_cb_rc;
static lull_journal *sync_fail_journal;

static void sync_failed(lull_append *req, int status) {
    rec *r = LULL_CONTAINER_OF(req, rec, req);
    sync_fail_calls[r->index]++;
    sync_fail_statuses[r->index] = status;
    CHECK_U64_EQ(req->sync, 0);
    if (r->index == 0) /* refused at once: cb never runs for it */
        append_in_cb_rc = lull_journal_append(sync_fail_journal, &recs[6].req,
                                              "x", 1, sync_failed);
}

/* A failed fdatasync (EIO) fails every append of its batch and every
 * append queued behind it, once each and with that error, and every
 * later append at once (the sticky rule): the kernel may have dropped
 * the pages, so a later sync's success would prove nothing. */
TEST_THREADED(journal_sync_eio_fails_the_batch_and_what_is_queued_behind) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    sync_fail_journal = &j;
    append_in_cb_rc = 0;
    gate g;
    gate_hold(loop, pool, &g); /* the first batch waits behind it */
    for (int i = 0; i < 5; i++) {
        recs[i].index = i;
        CHECK_EQ(lull_journal_append(&j, &recs[i].req, "abc", 3, sync_failed),
                 0);
        if (i == 2) /* 0-2 leave as the batch; 3-4 queue behind it */
            CHECK_EQ(lull_loop_settle(loop), 1);
    }
    __atomic_store_n(&fail_syncs, 1, __ATOMIC_RELEASE);
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    __atomic_store_n(&fail_syncs, 0, __ATOMIC_RELEASE);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(sync_fail_calls[i], 1);
        CHECK_EQ(sync_fail_statuses[i], -EIO);
    }
    CHECK_EQ(append_in_cb_rc, -EIO);
    CHECK_EQ(sync_fail_calls[6], 0);
    CHECK_EQ(j.error, -EIO);
    CHECK_U64_EQ(j.syncs, 0);
    /* Later appends fail at once, with syncs working again. */
    CHECK_EQ(lull_journal_append(&j, &recs[7].req, "x", 1, sync_failed), -EIO);
    CHECK(!lull_journal_busy(&j));
    CHECK_EQ(lull_loop_settle(loop), 0);
    CHECK_EQ(sync_fail_calls[7], 0);
    close_journal_case(fd, loop, pool, &g);
}

/* An append longer than one write can be (past SSIZE_MAX) is refused at
 * the call, and the journal goes on: queued, its batch's pwritev failed
 * with EINVAL, and that failure, sticky, refused every later append. */
TEST_THREADED(journal_append_past_ssize_max_is_refused) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    ncompleted = 0;
    CHECK_EQ(lull_journal_append(&j, &recs[5].req, "x", SIZE_MAX, appended),
             -EINVAL);
    CHECK_EQ(lull_journal_append(&j, &recs[5].req, "x", (size_t)SSIZE_MAX + 1,
                                 appended),
             -EINVAL);
    CHECK(!lull_journal_busy(&j));
    append(&j, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 1);
    CHECK_EQ(last_status, 0);
    append(&j, 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 2);
    check_file(2);
    close_journal_case(fd, loop, pool, NULL);
}

/* A journal never set up (zeroed: no loop, no pool) is refused, as a NULL
 * one is. It crashed a debug build (the owner check read the NULL loop)
 * and a release build returned 0 for an append no batch would ever take:
 * its callback never ran. */
TEST(journal_append_to_a_journal_never_set_up_is_refused) {
    lull_loop *loop = NULL;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    lull_journal j;
    memset(&j, 0, sizeof j);
    ncompleted = 0;
    CHECK_EQ(lull_journal_append(&j, &recs[0].req, "x", 1, appended), -EINVAL);
    CHECK(!lull_journal_busy(&j));
    CHECK(j.head == NULL);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* NULL arguments: init and append refuse (-EINVAL), busy answers false,
 * and a real journal passed next to a NULL is left as it was. */
TEST(journal_null_arguments_are_refused) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    CHECK_EQ(lull_journal_init(NULL, pool, &j, fd), -EINVAL);
    CHECK_EQ(lull_journal_init(loop, NULL, &j, fd), -EINVAL);
    CHECK_EQ(lull_journal_init(loop, pool, NULL, fd), -EINVAL);
    CHECK_EQ(lull_journal_init(loop, pool, &j, -1), -EINVAL);
    CHECK_EQ(lull_journal_append(NULL, &recs[0].req, "x", 1, appended),
             -EINVAL);
    CHECK_EQ(lull_journal_append(&j, NULL, "x", 1, appended), -EINVAL);
    CHECK_EQ(lull_journal_append(&j, &recs[0].req, NULL, 1, appended), -EINVAL);
    CHECK_EQ(lull_journal_append(&j, &recs[0].req, "x", 1, NULL), -EINVAL);
    CHECK(!lull_journal_busy(NULL));
    CHECK(!lull_journal_busy(&j));
    CHECK(j.loop == loop && j.pool == pool && j.fd == fd);
    CHECK(!lull_loop_alive(loop));
    close_journal_case(fd, loop, pool, NULL);
}

/* lull_pool_free with a batch waiting: the batch's callbacks get
 * -ECANCELED and may append again, as a done may resubmit after
 * lull_pool_free (-ESHUTDOWN): that append fails with -ESHUTDOWN. The journal
 * started that append's batch in a later task, which submitted to the pool
 * after its memory was freed. */
static lull_journal *again_journal;

static void append_again(lull_append *req, int status) {
    appended(req, status);
    rec *r = LULL_CONTAINER_OF(req, rec, req);
    if (r->index < 2) { /* and the refused append's callback again */
        rec *next = &recs[r->index + 1];
        next->index = r->index + 1;
        CHECK_EQ(lull_journal_append(again_journal, &next->req, "y", 1,
                                     append_again),
                 0);
    }
}

TEST_THREADED(journal_append_in_a_callback_after_the_pool_is_freed) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    again_journal = &j;
    ncompleted = 0;
    recs[0].index = 0;
    gate g;
    gate_hold(loop, pool, &g); /* the batch waits behind it */
    CHECK_EQ(lull_journal_append(&j, &recs[0].req, "x", 1, append_again), 0);
    CHECK_EQ(lull_loop_settle(loop), 1); /* the batch leaves */
    lull_pool_close(pool);               /* cancels the waiting batch */
    sem_post(&g.release);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 3);
    for (int i = 0; i < 3; i++)
        CHECK_EQ(completed[i], i);
    CHECK_EQ(last_status, -ESHUTDOWN);
    CHECK(!lull_journal_busy(&j));
    close(fd);
    CHECK_EQ(lull_loop_free(loop), 0);
    sem_destroy(&g.started);
    sem_destroy(&g.release);
    remove_dir();
}

/* A batch the pool cancels (closed while the batch waits in its queue):
 * nothing of it was written, so its appends carry no sync (0, not the
 * count of the batch made durable before it) and the journal's end goes
 * back to where that batch would have started. */
TEST_THREADED(journal_batch_cancelled_by_the_pool_has_no_sync_or_end) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    ncompleted = nfailed = 0;
    append(&j, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 1);
    CHECK_EQ(nfailed, 0);
    CHECK_U64_EQ(recs[0].req.sync, 1);
    uint64_t end = j.end;
    CHECK_U64_EQ(end, strlen(recs[0].text));
    gate g;
    gate_hold(loop, pool, &g); /* the next batch waits behind it */
    append(&j, 1);
    CHECK_EQ(lull_loop_settle(loop), 1); /* the batch leaves */
    CHECK_U64_EQ(j.end, end + strlen(recs[1].text));
    lull_pool_close(pool); /* cancels the waiting batch */
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 2);
    CHECK_EQ(last_status, -ECANCELED);
    CHECK_U64_EQ(recs[1].req.sync, 0);
    CHECK_U64_EQ(j.end, end);
    CHECK_U64_EQ(j.syncs, 1);
    close_journal_case(fd, loop, pool, &g);
}

/* The same request appended twice while queued: the second is refused
 * (-EBUSY) and the record is written and completed once. It linked the
 * record to itself, and the batch's write loop went round it forever,
 * writing the record again and again. */
TEST_THREADED(journal_append_of_a_queued_request_is_refused) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    ncompleted = 0;
    gate g;
    gate_hold(loop, pool, &g); /* the batch waits behind it */
    append(&j, 0);
    CHECK_EQ(lull_journal_append(&j, &recs[0].req, recs[0].text,
                                 strlen(recs[0].text), appended),
             -EBUSY); /* the last queued */
    append(&j, 1);
    CHECK_EQ(lull_journal_append(&j, &recs[0].req, recs[0].text,
                                 strlen(recs[0].text), appended),
             -EBUSY); /* the first queued */
    CHECK_EQ(lull_journal_append(&j, &recs[1].req, recs[1].text,
                                 strlen(recs[1].text), appended),
             -EBUSY);                    /* the last queued, not the first */
    CHECK_EQ(lull_loop_settle(loop), 1); /* the batch leaves */
    CHECK_EQ(lull_journal_append(&j, &recs[0].req, recs[0].text,
                                 strlen(recs[0].text), appended),
             -EBUSY); /* the first of the batch in flight */
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 2);
    check_file(2);
    close_journal_case(fd, loop, pool, &g);
}

/* An append of no bytes (a NULL buffer is allowed then) alone in its
 * batch: nothing to write, so the batch is its sync alone, and it
 * completes with 0 at the end of the file, not with a write of nothing
 * taken for a failed one (-EIO, sticky). */
TEST_THREADED(journal_append_of_no_bytes_alone_completes) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    ncompleted = 0;
    nfailed = 0;
    append(&j, 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    recs[1].index = 1;
    CHECK_EQ(lull_journal_append(&j, &recs[1].req, NULL, 0, appended), 0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 2);
    CHECK_EQ(nfailed, 0);
    CHECK_U64_EQ(recs[1].req.offset, strlen(recs[0].text));
    CHECK_U64_EQ(recs[1].req.sync, 2);
    append(&j, 1); /* the journal goes on */
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(nfailed, 0);
    check_file(2);
    close_journal_case(fd, loop, pool, NULL);
}

/* The same request appended again from the middle of the queue (arg 0)
 * or of the batch in flight (arg 1), neither first nor last: a debug
 * build stops with a message. It cut the list after it (its next set to
 * NULL) and queued it again: the records behind it never completed, it
 * was written and completed twice, and a batch in flight was cut under
 * the pool thread that was writing it. */
static void journal_append_from_the_middle(void *arg) {
    lull_loop *loop;
    lull_pool *pool;
    static lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    static gate g;
    gate_hold(loop, pool, &g);
    for (int i = 0; i < 3; i++)
        append(&j, i);
    if (arg) CHECK_EQ(lull_loop_settle(loop), 1); /* the batch leaves */
    (void)lull_journal_append(&j, &recs[1].req, recs[1].text,
                              strlen(recs[1].text), appended);
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    close_journal_case(fd, loop, pool, &g);
}

TEST_THREADED(journal_append_of_a_request_in_the_middle_stops_a_debug_build) {
    if (!check_debug_build()) {
        printf("skipped: asserts are compiled out of this build\n");
        return;
    }
    const char *msg = "lull: lull_journal_append of a request already queued";
    CHECK(check_dies(journal_append_from_the_middle, (void *)0, msg));
    CHECK(check_dies(journal_append_from_the_middle, (void *)1, msg));
}

/* lull_journal_append from a thread that does not own the journal's loop
 * stops a debug build with a message: it links the request into the
 * journal's queue, the loop thread's state, with no lock. With a batch in
 * flight (no start task to post, whose own check would have caught it) it
 * went ahead, racing the loop's appends and the batch's completion. */
static void *append_from_elsewhere(void *arg) {
    lull_journal *j = arg;
    (void)lull_journal_append(j, &recs[1].req, "x", 1, appended);
    return NULL;
}

static void journal_append_on_another_thread(void *arg) {
    (void)arg;
    lull_loop *loop;
    lull_pool *pool;
    static lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    static gate g;
    gate_hold(loop, pool, &g);
    append(&j, 0);
    CHECK_EQ(lull_loop_settle(loop), 1); /* the batch is in flight */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, append_from_elsewhere, &j), 0);
    pthread_join(th, NULL);
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    close_journal_case(fd, loop, pool, &g);
}

TEST_THREADED(journal_append_from_another_thread_stops_a_debug_build) {
    if (!check_debug_build()) {
        printf("skipped: asserts are compiled out of this build\n");
        return;
    }
    CHECK(check_dies(journal_append_on_another_thread, NULL,
                     "lull: called from a thread that does not own the loop"));
}

/* lull_journal_init on a journal whose appends are in flight: refused
 * (-EBUSY) while its start task is queued on the loop and while its batch
 * waits on the pool; every record is written and completed once. Inside
 * the last completion, and once the journal is quiet, init is free again.
 * A clearing init unlinked the queued start task and the pool's item from
 * under the loop and the pool. */
static lull_journal *reinit_journal;
static lull_pool *reinit_pool;
static int reinit_rc;

static void reinit_in_completion(lull_append *req, int status) {
    appended(req, status);
    reinit_rc = lull_journal_init(reinit_journal->loop, reinit_pool,
                                  reinit_journal, reinit_journal->fd);
}

TEST_THREADED(journal_init_while_appends_are_in_flight_is_refused) {
    lull_loop *loop;
    lull_pool *pool;
    lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    ncompleted = 0;
    reinit_journal = &j;
    reinit_pool = pool;
    reinit_rc = 1;
    gate g;
    gate_hold(loop, pool, &g); /* the batch waits behind it */
    append(&j, 0);             /* its start task is queued */
    CHECK_EQ(lull_journal_init(loop, pool, &j, fd), -EBUSY);
    CHECK_EQ(lull_loop_settle(loop), 1); /* the batch leaves */
    CHECK_EQ(lull_journal_init(loop, pool, &j, fd), -EBUSY); /* on the pool */
    sem_post(&g.release);
    recs[1].index = 1;
    snprintf(recs[1].text, sizeof recs[1].text, "record %d\n", 1);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 1);
    CHECK_EQ(lull_journal_append(&j, &recs[1].req, recs[1].text,
                                 strlen(recs[1].text), reinit_in_completion),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncompleted, 2);
    CHECK_EQ(reinit_rc, 0); /* its batch is done: free */
    CHECK_EQ(completed[0], 0);
    CHECK_EQ(completed[1], 1);
    check_file(2);
    CHECK(!lull_journal_busy(&j));
    CHECK_EQ(lull_journal_init(loop, pool, &j, fd), 0);
    close_journal_case(fd, loop, pool, &g);
}

/* lull_journal_init's -EBUSY asks the loop and pool it is given (j is
 * garbage before its first init, so its own fields cannot say which are
 * its): a journal busy on another loop or pool is not seen, and clearing
 * it cuts that loop's queue or that pool's. A programming error that debug
 * builds stop at when the loop or pool reaches the cleared journal, as
 * docs/API.md says; the child's alarm turns a hang into a death without
 * the message. */
static void journal_init_busy_elsewhere(void *arg) {
    bool other_pool = arg != NULL;
    alarm(10);
    lull_loop *loop, *other_loop;
    lull_pool *pool, *other;
    static lull_journal j;
    int fd = journal_case(&loop, &pool, &j, O_WRONLY);
    CHECK_EQ(lull_loop_new(&other_loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&other, NULL), 0);
    static gate g;
    gate_hold(loop, pool, &g);
    append(&j, 0); /* its start task is queued on loop */
    if (other_pool) {
        CHECK_EQ(lull_loop_settle(loop), 1); /* the batch waits on pool */
        (void)lull_journal_init(loop, other, &j, fd);
    } else {
        (void)lull_journal_init(other_loop, pool, &j, fd);
    }
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lull_pool_free(other), 0);
    CHECK_EQ(lull_loop_free(other_loop), 0);
    close_journal_case(fd, loop, pool, &g);
}

TEST_THREADED(journal_init_busy_on_another_loop_or_pool_stops_a_debug_build) {
    if (!check_debug_build()) {
        printf("skipped: asserts are compiled out of this build\n");
        return;
    }
    CHECK(check_dies(journal_init_busy_elsewhere, NULL,
                     "lull: ready queue corrupted"));
    CHECK(check_dies(journal_init_busy_elsewhere, (void *)1,
                     "lull: lull_work_init on an item still submitted"));
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

/* getaddrinfo takes a node alone or a service alone (only both NULL is
 * refused): a name without a port, a port on the loopback address. */
TEST_THREADED(getaddrinfo_with_a_node_alone_or_a_service_alone) {
    lull_loop *loop;
    lull_pool *pool;
    CHECK_EQ(lull_loop_new(&loop, NULL), 0);
    CHECK_EQ(lull_pool_new(&pool, &(lull_pool_options){.threads = 1}), 0);
    struct addrinfo hints = {.ai_family = AF_INET,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    lull_lookup req;
    memset(&req, 0, sizeof req);
    lookup_status = 1;
    CHECK_EQ(lull_lookup_start(loop, pool, &req, "127.0.0.1", NULL, &hints,
                               looked_up),
             0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lookup_status, 0);
    CHECK_EQ(lookup_family, AF_INET);
    CHECK_EQ(lookup_port, 0);
    lookup_status = 1;
    CHECK_EQ(
        lull_lookup_start(loop, pool, &req, NULL, "8080", &hints, looked_up),
        0);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lookup_status, 0);
    CHECK_EQ(lookup_family, AF_INET);
    CHECK_EQ(lookup_port, 8080);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
}

/* A lookup cancelled before a pool thread took it: its callback runs once,
 * with -ECANCELED and no list; cancelling again, or a NULL, is refused. */
TEST_THREADED(getaddrinfo_cancel_before_start) {
    lull_loop *loop;
    lull_pool *pool;
    dir_loop_pool(&loop, &pool, 1);
    gate g;
    gate_hold(loop, pool, &g); /* the one pool thread is busy */
    struct addrinfo hints = {.ai_family = AF_INET,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    lull_lookup req;
    memset(&req, 0, sizeof req);
    lookup_status = 1;
    CHECK_EQ(lull_lookup_start(loop, pool, &req, "127.0.0.1", "80", &hints,
                               looked_up),
             0);
    CHECK_EQ(lull_lookup_cancel(&req), 0);
    CHECK_EQ(lull_lookup_cancel(&req), -EBUSY); /* cancelled, done owed */
    CHECK_EQ(lookup_status, 1);                 /* never inside the call */
    sem_post(&g.release);
    CHECK_EQ(lull_loop_run(loop, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lookup_status, -ECANCELED);
    CHECK(req.res == NULL);
    CHECK_EQ(lull_lookup_cancel(&req), -EINVAL); /* not started */
    CHECK_EQ(lull_lookup_cancel(NULL), -EINVAL);
    CHECK_EQ(lull_pool_free(pool), 0);
    CHECK_EQ(lull_loop_free(loop), 0);
    sem_destroy(&g.started);
    sem_destroy(&g.release);
    CHECK_EQ(rmdir(dir), 0);
}

/* ------------------------------------------------- the uv_fs_* set */

#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>

static lull_loop *L;
static lull_pool *P;
static lull_fs R;
static int64_t last;
static int ncalls;

static void on_fs(lull_fs *req, int64_t result) {
    CHECK_EQ(req->result, result);
    last = result;
    ncalls++;
}

static void fs_setup_in(const char *base) {
    snprintf(dir, sizeof dir, "%s/lull-test-fs-XXXXXX", base);
    CHECK(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/file", dir);
    CHECK_EQ(lull_loop_new(&L, NULL), 0);
    CHECK_EQ(lull_pool_new(&P, &(lull_pool_options){.threads = 2}), 0);
    memset(&R, 0, sizeof R);
}

static void fs_setup(void) {
    fs_setup_in("/tmp");
}

static int rm_one(const char *p, const struct stat *st, int flag,
                  struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(p);
}

static void fs_teardown(void) {
    CHECK_EQ(lull_pool_free(P), 0);
    CHECK_EQ(lull_loop_free(L), 0);
    CHECK_EQ(nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* Runs the loop after a submit that must be accepted: cb ran exactly once;
 * its result. */
static int64_t run(int rc) {
    CHECK_EQ(rc, 0);
    ncalls = 0;
    CHECK_EQ(lull_loop_run(L, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncalls, 1);
    return last;
}

static const char *in_dir(const char *name) {
    static char bufs[4][192];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

static int open_rw(const char *p) {
    return (int)run(
        lull_fs_open(L, P, &R, p, O_RDWR | O_CREAT | O_TRUNC, 0600, on_fs));
}

TEST_THREADED(fs_write_read_at_offset) {
    fs_setup();
    int fd = open_rw(path);
    CHECK(fd >= 0);
    CHECK_EQ(run(lull_fs_write(L, P, &R, fd, "hello", 5, 10, on_fs)), 5);
    char buf[32];
    CHECK_EQ(run(lull_fs_read(L, P, &R, fd, buf, sizeof buf, 0, on_fs)), 15);
    CHECK(memcmp(buf + 10, "hello", 5) == 0);
    CHECK_EQ(buf[0], 0); /* the hole */
    /* Errno paths: the kernel's. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    CHECK_EQ(run(lull_fs_read(L, P, &R, dfd, buf, 4, 0, on_fs)), -EISDIR);
    int ro = open(path, O_RDONLY);
    CHECK_EQ(run(lull_fs_write(L, P, &R, ro, "x", 1, 0, on_fs)), -EBADF);
    close(ro);
    close(dfd);
    CHECK_EQ(run(lull_fs_close(L, P, &R, fd, on_fs)), 0);
    fs_teardown();
}

static off_t position(int fd) {
    return lseek(fd, 0, SEEK_CUR);
}

/* LULL_FS_CURRENT, libuv's -1: read(2) and write(2) at the fd's own
 * position, which they move; a read is one call, so a pipe gives what it
 * has rather than waiting for len bytes. Any other offset past INT64_MAX
 * is refused at the call, nothing moved. */
TEST_THREADED(fs_offset_current_and_a_pipe) {
    fs_setup();
    int fd = open_rw(path);
    uint64_t cur = LULL_FS_CURRENT;
    CHECK_EQ(cur, (uint64_t)-1);
    CHECK_EQ(run(lull_fs_write(L, P, &R, fd, "hello", 5, cur, on_fs)), 5);
    CHECK_EQ(position(fd), 5);
    struct iovec w[2] = {{" wor", 4}, {"ld", 2}};
    CHECK_EQ(run(lull_fs_writev(L, P, &R, fd, w, 2, cur, on_fs)), 6);
    CHECK_EQ(position(fd), 11);
    /* pwrite leaves the position where it was. */
    CHECK_EQ(run(lull_fs_write(L, P, &R, fd, "H", 1, 0, on_fs)), 1);
    CHECK_EQ(position(fd), 11);
    CHECK_EQ(lseek(fd, 0, SEEK_SET), 0);
    char buf[16] = {0};
    CHECK_EQ(run(lull_fs_read(L, P, &R, fd, buf, 4, cur, on_fs)), 4);
    CHECK(memcmp(buf, "Hell", 4) == 0);
    CHECK_EQ(position(fd), 4);
    char a[3], b[8];
    struct iovec r[2] = {{a, 3}, {b, 8}};
    CHECK_EQ(run(lull_fs_readv(L, P, &R, fd, r, 2, cur, on_fs)), 7);
    CHECK(memcmp(a, "o w", 3) == 0 && memcmp(b, "orld", 4) == 0);
    CHECK_EQ(run(lull_fs_read(L, P, &R, fd, buf, 4, cur, on_fs)), 0);
    /* Past INT64_MAX and not the current position: refused. */
    uint64_t bad[] = {(uint64_t)INT64_MAX + 1, UINT64_MAX - 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK_EQ(lull_fs_read(L, P, &R, fd, buf, 4, bad[i], on_fs), -EINVAL);
        CHECK_EQ(lull_fs_write(L, P, &R, fd, "x", 1, bad[i], on_fs), -EINVAL);
        CHECK_EQ(lull_fs_readv(L, P, &R, fd, r, 2, bad[i], on_fs), -EINVAL);
        CHECK_EQ(lull_fs_writev(L, P, &R, fd, w, 2, bad[i], on_fs), -EINVAL);
    }
    CHECK_EQ(position(fd), 11);
    /* A pipe: at an offset -ESPIPE, its bytes left; at its position the
     * 3 bytes it holds, where 16 were asked. */
    int pfd[2];
    CHECK_EQ(pipe(pfd), 0);
    CHECK_EQ(write(pfd[1], "abc", 3), 3);
    CHECK_EQ(run(lull_fs_read(L, P, &R, pfd[0], buf, 3, 0, on_fs)), -ESPIPE);
    CHECK_EQ(run(lull_fs_write(L, P, &R, pfd[1], "d", 1, 0, on_fs)), -ESPIPE);
    CHECK_EQ(run(lull_fs_read(L, P, &R, pfd[0], buf, sizeof buf, cur, on_fs)),
             3);
    CHECK(memcmp(buf, "abc", 3) == 0);
    CHECK_EQ(run(lull_fs_write(L, P, &R, pfd[1], "de", 2, cur, on_fs)), 2);
    CHECK_EQ(read(pfd[0], buf, sizeof buf), 2);
    CHECK(memcmp(buf, "de", 2) == 0);
    /* The write end closed: end of file, 0. */
    close(pfd[1]);
    CHECK_EQ(run(lull_fs_read(L, P, &R, pfd[0], buf, sizeof buf, cur, on_fs)),
             0);
    close(pfd[0]);
    CHECK_EQ(run(lull_fs_close(L, P, &R, fd, on_fs)), 0);
    fs_teardown();
}

/* A write cut short by an error after some of its bytes went (here
 * RLIMIT_FSIZE: the kernel writes up to the limit, then says EFBIG): the
 * result is the count written, as write(2)'s, not the error, which would
 * tell the caller the file did not grow. A write that takes nothing is
 * the error. */
TEST_THREADED(fs_write_cut_short_by_an_error_counts_what_went) {
    fs_setup();
    int fd = open_rw(path);
    CHECK(fd >= 0);
    CHECK(signal(SIGXFSZ, SIG_IGN) != SIG_ERR);
    struct rlimit old, low;
    CHECK_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
    low = old;
    low.rlim_cur = 100;
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &low), 0);
    char buf[300];
    memset(buf, 'x', sizeof buf);
    CHECK_EQ(run(lull_fs_write(L, P, &R, fd, buf, sizeof buf, 0, on_fs)), 100);
    struct iovec v[2] = {{buf, 50}, {buf, 100}};
    CHECK_EQ(run(lull_fs_writev(L, P, &R, fd, v, 2, 60, on_fs)), 40);
    CHECK_EQ(run(lull_fs_write(L, P, &R, fd, buf, 10, 100, on_fs)), -EFBIG);
    CHECK_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
    CHECK_EQ(run(lull_fs_close(L, P, &R, fd, on_fs)), 0);
    fs_teardown();
}

/* lull_fs_writev at an offset, written a few bytes at a time with
 * interrupted calls between: the whole count, every byte in place. */
TEST_THREADED(fs_writev_goes_on_after_short_and_interrupted_writes) {
    fs_setup();
    int fd = open_rw(path);
    char a[5] = "abcde", b[12] = "fghijklmnopq", c[3] = "rst";
    struct iovec w[3] = {{a, 5}, {b, 12}, {c, 3}};
    short_write_call = 0;
    __atomic_store_n(&short_writes, 1, __ATOMIC_RELEASE);
    int64_t r = run(lull_fs_writev(L, P, &R, fd, w, 3, 4, on_fs));
    __atomic_store_n(&short_writes, 0, __ATOMIC_RELEASE);
    CHECK_EQ(r, 20);
    CHECK(short_write_call >= 6); /* three cut writes, three EINTRs */
    char back[24];
    CHECK_EQ(pread(fd, back, sizeof back, 0), 24);
    CHECK(memcmp(back, "\0\0\0\0abcdefghijklmnopqrst", 24) == 0);
    close(fd);
    fs_teardown();
}

TEST_THREADED(fs_readv_writev) {
    fs_setup();
    int fd = open_rw(path);
    struct iovec w[2] = {{"abc", 3}, {"defgh", 5}};
    CHECK_EQ(run(lull_fs_writev(L, P, &R, fd, w, 2, 1, on_fs)), 8);
    char a[2], b[4], c[8];
    struct iovec r[3] = {{a, 2}, {b, 4}, {c, 8}};
    CHECK_EQ(run(lull_fs_readv(L, P, &R, fd, r, 3, 0, on_fs)), 9);
    CHECK(memcmp(a, "\0a", 2) == 0);
    CHECK(memcmp(b, "bcde", 4) == 0);
    CHECK(memcmp(c, "fgh", 3) == 0);
    /* Refused before any thread: counts and sizes. */
    CHECK_EQ(lull_fs_readv(L, P, &R, fd, r, 0, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_readv(L, P, &R, fd, r, IOV_MAX + 1, 0, on_fs), -EINVAL);
    /* IOV_MAX itself is what the kernel takes: accepted, every byte moved. */
    static struct iovec most[IOV_MAX];
    static char bytes[IOV_MAX];
    for (int i = 0; i < IOV_MAX; i++) {
        bytes[i] = (char)('a' + i % 26);
        most[i] = (struct iovec){&bytes[i], 1};
    }
    CHECK_EQ(run(lull_fs_writev(L, P, &R, fd, most, IOV_MAX, 16, on_fs)),
             IOV_MAX);
    char back[IOV_MAX];
    CHECK_EQ(pread(fd, back, sizeof back, 16), IOV_MAX);
    CHECK(memcmp(back, bytes, IOV_MAX) == 0);
    CHECK_EQ(lull_fs_readv(L, P, &R, fd, NULL, 1, 0, on_fs), -EINVAL);
    struct iovec huge[2] = {{a, SSIZE_MAX}, {b, 2}};
    CHECK_EQ(lull_fs_writev(L, P, &R, fd, huge, 2, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_readv(L, P, &R, -1, r, 3, 0, on_fs), -EBADF);
    close(fd);
    CHECK_EQ(run(lull_fs_readv(L, P, &R, fd, r, 3, 0, on_fs)), -EBADF);
    fs_teardown();
}

TEST_THREADED(fs_stat_fstat_lstat) {
    fs_setup();
    int fd = open_rw(path);
    CHECK_EQ(write(fd, "0123456789", 10), 10);
    CHECK_EQ(symlink(path, in_dir("link")), 0);
    lull_stat st;
    CHECK_EQ(run(lull_fs_stat(L, P, &R, in_dir("link"), &st, on_fs)), 0);
    CHECK(S_ISREG(st.mode));
    CHECK_EQ(st.size, 10);
    CHECK_EQ(st.uid, getuid());
    CHECK(st.mtime_ns > 0);
    struct stat ref;
    CHECK_EQ(stat(path, &ref), 0);
    CHECK_EQ(st.ino, ref.st_ino);
    CHECK_EQ(st.dev, ref.st_dev);
    CHECK_EQ(st.mtime_ns,
             (int64_t)ref.st_mtim.tv_sec * 1000000000 + ref.st_mtim.tv_nsec);
    CHECK_EQ(run(lull_fs_lstat(L, P, &R, in_dir("link"), &st, on_fs)), 0);
    CHECK(S_ISLNK(st.mode));
    CHECK_EQ(run(lull_fs_fstat(L, P, &R, fd, &st, on_fs)), 0);
    CHECK_EQ(st.ino, ref.st_ino);
    CHECK_EQ(run(lull_fs_stat(L, P, &R, in_dir("none"), &st, on_fs)), -ENOENT);
    CHECK_EQ(run(lull_fs_stat(L, P, &R, in_dir("file/x"), &st, on_fs)),
             -ENOTDIR);
    CHECK_EQ(lull_fs_stat(L, P, &R, path, NULL, on_fs), -EINVAL);
    close(fd);
    CHECK_EQ(run(lull_fs_fstat(L, P, &R, fd, &st, on_fs)), -EBADF);
    fs_teardown();
}

TEST_THREADED(fs_rename_unlink) {
    fs_setup();
    close(open_rw(path));
    CHECK_EQ(run(lull_fs_rename(L, P, &R, path, in_dir("moved"), on_fs)), 0);
    CHECK_EQ(access(path, F_OK), -1);
    CHECK_EQ(access(in_dir("moved"), F_OK), 0);
    CHECK_EQ(run(lull_fs_rename(L, P, &R, path, in_dir("x"), on_fs)), -ENOENT);
    CHECK_EQ(run(lull_fs_unlink(L, P, &R, in_dir("moved"), on_fs)), 0);
    CHECK_EQ(run(lull_fs_unlink(L, P, &R, in_dir("moved"), on_fs)), -ENOENT);
    CHECK_EQ(run(lull_fs_unlink(L, P, &R, dir, on_fs)), -EISDIR);
    fs_teardown();
}

TEST_THREADED(fs_mkdir_rmdir_mkdtemp) {
    fs_setup();
    const char *d = in_dir("sub");
    CHECK_EQ(run(lull_fs_mkdir(L, P, &R, d, 0700, on_fs)), 0);
    CHECK_EQ(run(lull_fs_mkdir(L, P, &R, d, 0700, on_fs)), -EEXIST);
    close(open(in_dir("sub/f"), O_CREAT | O_WRONLY, 0600));
    CHECK_EQ(run(lull_fs_rmdir(L, P, &R, d, on_fs)), -ENOTEMPTY);
    unlink(in_dir("sub/f"));
    CHECK_EQ(run(lull_fs_rmdir(L, P, &R, d, on_fs)), 0);
    CHECK_EQ(run(lull_fs_rmdir(L, P, &R, d, on_fs)), -ENOENT);
    char tmpl[192];
    snprintf(tmpl, sizeof tmpl, "%s/tmp-XXXXXX", dir);
    CHECK_EQ(run(lull_fs_mkdtemp(L, P, &R, tmpl, on_fs)), 0);
    CHECK(strstr(tmpl, "XXXXXX") == NULL);
    struct stat st;
    CHECK_EQ(stat(tmpl, &st), 0);
    CHECK(S_ISDIR(st.st_mode));
    char bad[192];
    snprintf(bad, sizeof bad, "%s/no-template", dir);
    CHECK_EQ(run(lull_fs_mkdtemp(L, P, &R, bad, on_fs)), -EINVAL);
    fs_teardown();
}

TEST_THREADED(fs_links_readlink_realpath) {
    fs_setup();
    close(open_rw(path));
    CHECK_EQ(run(lull_fs_link(L, P, &R, path, in_dir("hard"), on_fs)), 0);
    CHECK_EQ(run(lull_fs_link(L, P, &R, path, in_dir("hard"), on_fs)), -EEXIST);
    CHECK_EQ(run(lull_fs_symlink(L, P, &R, "file", in_dir("soft"), on_fs)), 0);
    char buf[PATH_MAX];
    CHECK_EQ(
        run(lull_fs_readlink(L, P, &R, in_dir("soft"), buf, sizeof buf, on_fs)),
        4);
    CHECK(strcmp(buf, "file") == 0);
    /* Room for the bytes but not the NUL: refused, not truncated. */
    CHECK_EQ(run(lull_fs_readlink(L, P, &R, in_dir("soft"), buf, 4, on_fs)),
             -ENAMETOOLONG);
    CHECK_EQ(run(lull_fs_readlink(L, P, &R, path, buf, sizeof buf, on_fs)),
             -EINVAL);
    CHECK_EQ(run(lull_fs_realpath(L, P, &R, in_dir("./soft"), buf, sizeof buf,
                                  on_fs)),
             (int64_t)strlen(path));
    char want[PATH_MAX];
    CHECK(realpath(path, want) != NULL);
    CHECK(strcmp(buf, want) == 0);
    CHECK_EQ(
        run(lull_fs_realpath(L, P, &R, in_dir("none"), buf, sizeof buf, on_fs)),
        -ENOENT);
    CHECK_EQ(run(lull_fs_realpath(L, P, &R, path, buf, 3, on_fs)),
             -ENAMETOOLONG);
    /* Room for the bytes but not the NUL, as for readlink; one more fits. */
    size_t n = strlen(want);
    CHECK_EQ(run(lull_fs_realpath(L, P, &R, path, buf, n, on_fs)),
             -ENAMETOOLONG);
    CHECK_EQ(run(lull_fs_realpath(L, P, &R, path, buf, n + 1, on_fs)),
             (int64_t)n);
    CHECK(strcmp(buf, want) == 0);
    CHECK_EQ(lull_fs_readlink(L, P, &R, path, buf, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_symlink(L, P, &R, "file", NULL, on_fs), -EINVAL);
    fs_teardown();
}

TEST_THREADED(fs_fsync_fdatasync_ftruncate) {
    fs_setup();
    int fd = open_rw(path);
    CHECK_EQ(run(lull_fs_ftruncate(L, P, &R, fd, 100, on_fs)), 0);
    struct stat st;
    CHECK_EQ(fstat(fd, &st), 0);
    CHECK_EQ(st.st_size, 100);
    CHECK_EQ(run(lull_fs_fsync(L, P, &R, fd, on_fs)), 0);
    CHECK_EQ(run(lull_fs_fdatasync(L, P, &R, fd, on_fs)), 0);
    CHECK_EQ(lull_fs_ftruncate(L, P, &R, fd, (uint64_t)INT64_MAX + 1, on_fs),
             -EINVAL);
    int ro = open(path, O_RDONLY);
    CHECK_EQ(run(lull_fs_ftruncate(L, P, &R, ro, 0, on_fs)), -EINVAL);
    close(ro);
    close(fd);
    CHECK_EQ(run(lull_fs_fsync(L, P, &R, fd, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_fdatasync(L, P, &R, fd, on_fs)), -EBADF);
    fs_teardown();
}

static void fill(int fd, size_t n) {
    char b[4096];
    for (size_t i = 0; i < n; i += sizeof b) {
        for (size_t k = 0; k < sizeof b; k++)
            b[k] = (char)((i + k) * 7 + (i + k) / 4096);
        CHECK_EQ(write(fd, b, n - i < sizeof b ? n - i : sizeof b),
                 (ssize_t)(n - i < sizeof b ? n - i : sizeof b));
    }
}

static void same_bytes(int a, off_t oa, int b, off_t ob, size_t n) {
    char *x = malloc(n), *y = malloc(n);
    CHECK_EQ(pread(a, x, n, oa), (ssize_t)n);
    CHECK_EQ(pread(b, y, n, ob), (ssize_t)n);
    CHECK(memcmp(x, y, n) == 0);
    free(x);
    free(y);
}

TEST_THREADED(fs_copy_range_and_its_fallback) {
    fs_setup();
    int in = open_rw(path);
    fill(in, 300000);
    int out = open_rw(in_dir("copy"));
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, out, 5, in, 1000, 400000, on_fs)),
             299000); /* fewer at the source's end */
    same_bytes(in, 1000, out, 5, 299000);
    /* Overlapping ranges of one file: the kernel says EINVAL, the
     * fallback copies. */
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, in, 10, in, 0, 20, on_fs)), 20);
    char b[30];
    CHECK_EQ(pread(in, b, 30, 0), 30);
    CHECK(memcmp(b, b + 10, 10) == 0);
    /* procfs reports size 0, copy_file_range copies nothing: the fallback
     * reads it. */
    int proc = open("/proc/self/status", O_RDONLY);
    int64_t n =
        run(lull_fs_copy_range(L, P, &R, out, 0, proc, 0, 1 << 16, on_fs));
    CHECK(n > 0);
    CHECK_EQ(pread(out, b, 5, 0), 5);
    CHECK(memcmp(b, "Name:", 5) == 0);
    close(proc);
    CHECK_EQ(lull_fs_copy_range(L, P, &R, out, 0, -1, 0, 1, on_fs), -EBADF);
    CHECK_EQ(lull_fs_copy_range(L, P, &R, out, 0, in, 0, (size_t)SSIZE_MAX + 1,
                                on_fs),
             -EINVAL);
    /* Across filesystems (tmpfs to /tmp where both exist): the kernel
     * copies or says EXDEV, and either way the bytes arrive. */
    char shm[] = "/dev/shm/lull-test-fs-XXXXXX";
    int other = access("/dev/shm", W_OK) == 0 ? mkstemp(shm) : -1;
    if (other >= 0) {
        unlink(shm);
        CHECK_EQ(
            run(lull_fs_copy_range(L, P, &R, other, 0, in, 0, 100000, on_fs)),
            100000);
        same_bytes(in, 0, other, 0, 100000);
        CHECK_EQ(
            run(lull_fs_copy_range(L, P, &R, out, 0, other, 0, 100000, on_fs)),
            100000);
        same_bytes(in, 0, out, 0, 100000);
        close(other);
    }
    int ro = open(path, O_RDONLY);
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, ro, 0, in, 0, 10, on_fs)),
             -EBADF);
    close(ro);
    close(in);
    close(out);
    fs_teardown();
}

/* Overlapping ranges of one file longer than the fallback's chunk: the
 * bytes arrive as they were before the copy (as memmove moves them), in
 * both directions, also when the range runs past the file's end. */
TEST_THREADED(fs_copy_range_overlapping_past_one_chunk) {
    fs_setup();
    int fd = open_rw(path);
    fill(fd, 300000);
    char *before = malloc(300000), *after = malloc(400000);
    CHECK_EQ(pread(fd, before, 300000, 0), 300000);
    /* Forward: the destination starts inside the source. */
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, fd, 1000, fd, 0, 200000, on_fs)),
             200000);
    CHECK_EQ(pread(fd, after, 300000, 0), 300000);
    CHECK(memcmp(after, before, 1000) == 0);
    CHECK(memcmp(after + 1000, before, 200000) == 0);
    CHECK(memcmp(after + 201000, before + 201000, 99000) == 0);
    /* Forward past the end: fewer, as the source held before the copy. */
    CHECK_EQ(pwrite(fd, before, 300000, 0), 300000);
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, fd, 150000, fd, 100000, 500000,
                                    on_fs)),
             200000);
    CHECK_EQ(pread(fd, after, 400000, 0), 350000);
    CHECK(memcmp(after, before, 150000) == 0);
    CHECK(memcmp(after + 150000, before + 100000, 200000) == 0);
    /* Backward: the destination starts before the source. */
    CHECK_EQ(ftruncate(fd, 0), 0);
    CHECK_EQ(pwrite(fd, before, 300000, 0), 300000);
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, fd, 0, fd, 1000, 200000, on_fs)),
             200000);
    CHECK_EQ(pread(fd, after, 300000, 0), 300000);
    CHECK(memcmp(after, before + 1000, 200000) == 0);
    CHECK(memcmp(after + 200000, before + 200000, 100000) == 0);
    free(before);
    free(after);
    close(fd);
    fs_teardown();
}

/* In a child: new threads' stacks made small by default before the pool
 * is made, as `ulimit -s 128` makes them (glibc sizes a thread's default
 * stack by RLIMIT_STACK) or a program that runs many threads of its own
 * with pthread_setattr_default_np. An overlapping copy takes the fallback,
 * whose bounce buffers are on the pool thread's stack: it ran off the
 * stack and the process died. */
static void copy_with_small_default_stacks(void *arg) {
    (void)arg;
    pthread_attr_t small;
    CHECK_EQ(pthread_attr_init(&small), 0);
    CHECK_EQ(pthread_attr_setstacksize(&small, (size_t)128 << 10), 0);
    CHECK_EQ(pthread_setattr_default_np(&small), 0);
    fs_setup();
    int fd = open_rw(path);
    fill(fd, 300000);
    char *before = malloc(200000), *after = malloc(200000);
    CHECK_EQ(pread(fd, before, 200000, 0), 200000);
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, fd, 1000, fd, 0, 200000, on_fs)),
             200000);
    CHECK_EQ(pread(fd, after, 200000, 1000), 200000);
    CHECK(memcmp(after, before, 200000) == 0);
    free(before);
    free(after);
    close(fd);
    fs_teardown();
    pthread_attr_destroy(&small);
}

TEST_THREADED(fs_copy_on_a_pool_made_with_small_default_stacks) {
    CHECK(check_exits_cleanly(copy_with_small_default_stacks, NULL));
}

#ifdef CHECK_SANDBOX_ARCH
/* In a child: statx, copy_file_range and sendfile refused with EPERM, as
 * older seccomp profiles refuse what they do not know (statx famously):
 * stat falls back to fstatat, the copies to read and write. */
static void fs_without_newer_calls(void *arg) {
    (void)arg;
    /* Before the pool's threads start: they inherit the filter. */
    check_deny_syscalls(
        (const int[]){SYS_statx, SYS_copy_file_range, SYS_sendfile}, 3, EPERM);
    fs_setup();
    int in = open_rw(path);
    fill(in, 10000);
    lull_stat st;
    CHECK_EQ(run(lull_fs_stat(L, P, &R, path, &st, on_fs)), 0);
    CHECK_EQ(st.size, 10000);
    CHECK(S_ISREG(st.mode));
    int out = open_rw(in_dir("copy"));
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, out, 0, in, 0, 10000, on_fs)),
             10000);
    same_bytes(in, 0, out, 0, 10000);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(run(lull_fs_sendfile(L, P, &R, p[1], in, 0, 1000, on_fs)), 1000);
    char got[1000];
    CHECK_EQ(read(p[0], got, sizeof got), 1000);
    close(p[0]);
    close(p[1]);
    close(in);
    close(out);
    fs_teardown();
}

TEST_THREADED(fs_calls_a_sandbox_refuses_fall_back) {
    CHECK(check_exits_cleanly(fs_without_newer_calls, NULL));
}

/* The read-and-write fallback into a full non-blocking pipe: the write of
 * a 64 KiB chunk takes what fits, then EAGAIN. The result counts what the
 * pipe took (a caller that resends from there duplicates nothing); the
 * fallback reported EAGAIN, as if nothing was sent. */
static void fs_fallback_short_write(void *arg) {
    (void)arg;
    check_deny_syscalls((const int[]){SYS_sendfile}, 1, ENOSYS);
    fs_setup();
    int in = open_rw(path);
    fill(in, 100000);
    int p[2];
    CHECK_EQ(pipe2(p, O_NONBLOCK), 0);
    int cap = fcntl(p[1], F_SETPIPE_SZ, 4096);
    CHECK(cap > 0);
    int64_t sent = run(lull_fs_sendfile(L, P, &R, p[1], in, 0, 100000, on_fs));
    char got[65536];
    ssize_t have = read(p[0], got, sizeof got);
    CHECK_EQ(have, cap);
    CHECK_EQ(sent, have);
    char want[65536];
    CHECK_EQ(pread(in, want, (size_t)have, 0), have);
    CHECK(memcmp(got, want, (size_t)have) == 0);
    close(p[0]);
    close(p[1]);
    close(in);
    fs_teardown();
}

TEST_THREADED(fs_sendfile_fallback_counts_a_short_write) {
    CHECK(check_exits_cleanly(fs_fallback_short_write, NULL));
}
#endif

TEST_THREADED(fs_sendfile_to_a_pipe) {
    fs_setup();
    int in = open_rw(path);
    fill(in, 10000);
    int p[2];
    CHECK_EQ(pipe(p), 0);
    CHECK_EQ(run(lull_fs_sendfile(L, P, &R, p[1], in, 100, 5000, on_fs)), 5000);
    char got[5000], want[5000];
    size_t have = 0;
    while (have < sizeof got) {
        ssize_t k = read(p[0], got + have, sizeof got - have);
        CHECK(k > 0);
        have += (size_t)k;
    }
    CHECK_EQ(pread(in, want, sizeof want, 100), 5000);
    CHECK(memcmp(got, want, sizeof got) == 0);
    close(p[0]); /* no reader: the kernel's EPIPE (SIGPIPE is blocked on
                    pool threads) */
    CHECK_EQ(run(lull_fs_sendfile(L, P, &R, p[1], in, 0, 100, on_fs)), -EPIPE);
    close(p[1]);
    close(in);
    CHECK_EQ(run(lull_fs_sendfile(L, P, &R, 1, in, 0, 100, on_fs)), -EBADF);
    fs_teardown();
}

TEST_THREADED(fs_chmod_chown_utime) {
    fs_setup();
    int fd = open_rw(path);
    struct stat st;
    CHECK_EQ(run(lull_fs_chmod(L, P, &R, path, 0640, on_fs)), 0);
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0640);
    CHECK_EQ(run(lull_fs_fchmod(L, P, &R, fd, 0604, on_fs)), 0);
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_mode & 0777, 0604);
    CHECK_EQ(run(lull_fs_chmod(L, P, &R, in_dir("none"), 0600, on_fs)),
             -ENOENT);
    /* To the owner it has: allowed to anyone; -1 leaves it alone. */
    CHECK_EQ(run(lull_fs_chown(L, P, &R, path, getuid(), (uint32_t)-1, on_fs)),
             0);
    CHECK_EQ(run(lull_fs_fchown(L, P, &R, fd, (uint32_t)-1, getgid(), on_fs)),
             0);
    CHECK_EQ(
        run(lull_fs_chown(L, P, &R, in_dir("none"), getuid(), getgid(), on_fs)),
        -ENOENT);
    struct timespec ts[2] = {{1000000000, 5}, {1200000000, 7}};
    CHECK_EQ(run(lull_fs_utime(L, P, &R, path, ts, on_fs)), 0);
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_atim.tv_sec, 1000000000);
    CHECK_EQ(st.st_mtim.tv_sec, 1200000000);
    CHECK_EQ(st.st_mtim.tv_nsec, 7);
    ts[0].tv_nsec = UTIME_OMIT;
    ts[1].tv_sec = 1300000000;
    CHECK_EQ(run(lull_fs_futime(L, P, &R, fd, ts, on_fs)), 0);
    CHECK_EQ(stat(path, &st), 0);
    CHECK_EQ(st.st_atim.tv_sec, 1000000000);
    CHECK_EQ(st.st_mtim.tv_sec, 1300000000);
    CHECK_EQ(run(lull_fs_futime(L, P, &R, fd, NULL, on_fs)), 0); /* now */
    CHECK_EQ(stat(path, &st), 0);
    CHECK(st.st_mtim.tv_sec > 1300000000);
    CHECK_EQ(run(lull_fs_utime(L, P, &R, in_dir("none"), NULL, on_fs)),
             -ENOENT);
    close(fd);
    CHECK_EQ(run(lull_fs_fchmod(L, P, &R, fd, 0600, on_fs)), -EBADF);
    fs_teardown();
}

/* ------------------------------------------------------------ scandir */

static size_t batches, entries, max_batch, bad_batches;
static uint64_t ticks, ticks_at_batch;
static bool listing;
static lull_task tick;
static char seen_mark[100001];
static bool (*on_batch_hook)(lull_fs *req);

/* A task that keeps posting itself while a listing runs: the loop's other
 * work, which must get turns between batches. */
static void tick_fn(lull_task *t) {
    ticks++;
    if (listing) lull_task_post(L, t);
}

static bool on_batch(lull_fs *req, const lull_dirent *e, size_t n) {
    if (batches && ticks == ticks_at_batch) bad_batches++;
    ticks_at_batch = ticks;
    batches++;
    entries += n;
    if (n > max_batch) max_batch = n;
    for (size_t i = 0; i < n; i++) {
        int k = atoi(e[i].name + 1);
        CHECK(e[i].name[0] == 'f' && k >= 0 && k <= 100000);
        CHECK(!seen_mark[k]);
        seen_mark[k] = 1;
        CHECK(e[i].type == DT_REG || e[i].type == DT_UNKNOWN);
    }
    return on_batch_hook ? on_batch_hook(req) : true;
}

static void on_listed(lull_fs *req, int64_t result) {
    listing = false;
    on_fs(req, result);
}

static void make_entries(const char *d, int n) {
    char p[256];
    for (int i = 0; i < n; i++) {
        snprintf(p, sizeof p, "%s/f%d", d, i);
        int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        CHECK(fd >= 0);
        close(fd);
    }
}

static int64_t list(const char *d) {
    batches = entries = max_batch = bad_batches = 0;
    ticks = ticks_at_batch = 0;
    memset(seen_mark, 0, sizeof seen_mark);
    listing = true;
    lull_task_init(&tick, tick_fn);
    lull_task_post(L, &tick);
    return run(lull_fs_scandir(L, P, &R, d, on_batch, on_listed));
}

TEST_THREADED(fs_scandir_lists_in_batches) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 600);
    CHECK_EQ(list(in_dir("d")), 600);
    CHECK_EQ(entries, 600);
    CHECK(batches >= (600 + LULL_FS_DIR_BATCH - 1) / LULL_FS_DIR_BATCH);
    CHECK(max_batch <= LULL_FS_DIR_BATCH);
    /* An empty directory: no batch, a count of 0. */
    CHECK_EQ(mkdir(in_dir("e"), 0700), 0);
    CHECK_EQ(list(in_dir("e")), 0);
    CHECK_EQ(batches, 0);
    CHECK_EQ(list(in_dir("none")), -ENOENT);
    close(open_rw(path));
    CHECK_EQ(list(path), -ENOTDIR);
    fs_teardown();
}

/* "." and ".." are left out of a listing, and only they: names that
 * merely start with dots (".hidden", "..x", "...") are listed as any
 * other. */
static int dot_seen;

static bool on_dot_batch(lull_fs *req, const lull_dirent *e, size_t n) {
    (void)req;
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(e[i].name, ".hidden"))
            dot_seen |= 1;
        else if (!strcmp(e[i].name, "..x"))
            dot_seen |= 2;
        else if (!strcmp(e[i].name, "..."))
            dot_seen |= 4;
        else
            CHECK(!"a name never made");
    }
    return true;
}

TEST_THREADED(fs_scandir_lists_names_that_start_with_dots) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    const char *names[] = {"d/.hidden", "d/..x", "d/..."};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        close(open_rw(in_dir(names[i])));
    dot_seen = 0;
    CHECK_EQ(run(lull_fs_scandir(L, P, &R, in_dir("d"), on_dot_batch, on_fs)),
             3);
    CHECK_EQ(dot_seen, 7);
    fs_teardown();
}

/* 100,000 entries: every batch bounded, every one seen once, and the loop
 * ran its other task between each two batches. */
TEST_THREADED(fs_scandir_100000_entries) {
    /* In memory where there is a tmpfs: 100,000 creates and unlinks on a
     * journaled disk take seconds of the case's timeout. */
    fs_setup_in(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    CHECK_EQ(mkdir(in_dir("big"), 0700), 0);
    make_entries(in_dir("big"), 100000);
    CHECK_EQ(list(in_dir("big")), 100000);
    CHECK_EQ(entries, 100000);
    CHECK(max_batch <= LULL_FS_DIR_BATCH);
    CHECK(batches >= 100000 / LULL_FS_DIR_BATCH);
    CHECK_EQ(bad_batches, 0);
    for (int i = 0; i < 100000; i++)
        CHECK(seen_mark[i]);
    fs_teardown();
}

static const char *renamed_to;

static bool rename_once(lull_fs *req) {
    (void)req;
    if (batches == 1) CHECK_EQ(rename(in_dir("d"), renamed_to), 0);
    return true;
}

TEST_THREADED(fs_scandir_directory_renamed_while_listed) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    char to[192];
    snprintf(to, sizeof to, "%s/renamed", dir);
    renamed_to = to;
    on_batch_hook = rename_once;
    /* The listing holds the directory open: the rest comes from it. */
    CHECK_EQ(list(in_dir("d")), 1000);
    on_batch_hook = NULL;
    CHECK_EQ(entries, 1000);
    CHECK(batches > 1);
    fs_teardown();
}

static bool stop_now(lull_fs *req) {
    (void)req;
    return false;
}

static bool cancel_now(lull_fs *req) {
    CHECK_EQ(lull_fs_cancel(req), 0);
    return true;
}

TEST_THREADED(fs_scandir_stopped_or_cancelled_in_a_batch) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    on_batch_hook = stop_now;
    CHECK_EQ(list(in_dir("d")), LULL_FS_DIR_BATCH);
    CHECK_EQ(batches, 1);
    on_batch_hook = cancel_now;
    CHECK_EQ(list(in_dir("d")), -ECANCELED);
    CHECK_EQ(batches, 1);
    on_batch_hook = NULL;
    /* The request is free again at once. */
    CHECK_EQ(list(in_dir("d")), 1000);
    fs_teardown();
}

/* A second cancel inside the same dir_cb: the end is on its way, as after
 * a cancel while a trip is off the loop, so -EBUSY (it said 0, as if this
 * cancel were the one that took). */
static bool cancel_twice(lull_fs *req) {
    CHECK_EQ(lull_fs_cancel(req), 0);
    CHECK_EQ(lull_fs_cancel(req), -EBUSY);
    return true;
}

TEST_THREADED(fs_scandir_cancelled_twice_in_a_batch) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    on_batch_hook = cancel_twice;
    CHECK_EQ(list(in_dir("d")), -ECANCELED);
    CHECK_EQ(batches, 1);
    on_batch_hook = NULL;
    fs_teardown();
}

/* Every kind of request cancelled while it waits behind a held thread:
 * its cb gets -ECANCELED once and nothing happened on disk. */
static int cancelled_calls;

static void on_cancelled(lull_fs *req, int64_t result) {
    CHECK_EQ(result, -ECANCELED);
    CHECK_EQ(req->result, -ECANCELED);
    cancelled_calls++;
}

static bool never_batch(lull_fs *req, const lull_dirent *e, size_t n) {
    (void)req, (void)e, (void)n;
    CHECK(!"a cancelled listing reached its batch");
    return false;
}

TEST_THREADED(fs_cancel_while_queued) {
    make_dir();
    CHECK_EQ(lull_loop_new(&L, NULL), 0);
    CHECK_EQ(lull_pool_new(&P, &(lull_pool_options){.threads = 1}), 0);
    gate g;
    gate_hold(L, P, &g);
    static lull_fs reqs[6];
    memset(reqs, 0, sizeof reqs);
    lull_stat st;
    char buf[16];
    CHECK_EQ(lull_fs_mkdir(L, P, &reqs[0], in_dir("m"), 0700, on_cancelled), 0);
    CHECK_EQ(lull_fs_stat(L, P, &reqs[1], dir, &st, on_cancelled), 0);
    CHECK_EQ(lull_fs_write(L, P, &reqs[2], 1, "x", 1, 0, on_cancelled), 0);
    CHECK_EQ(lull_fs_scandir(L, P, &reqs[3], dir, never_batch, on_cancelled),
             0);
    CHECK_EQ(
        lull_fs_readlink(L, P, &reqs[4], dir, buf, sizeof buf, on_cancelled),
        0);
    CHECK_EQ(lull_fs_symlink(L, P, &reqs[5], "x", in_dir("s"), on_cancelled),
             0);
    for (int i = 0; i < 6; i++)
        CHECK_EQ(lull_fs_cancel(&reqs[i]), 0);
    CHECK_EQ(lull_fs_cancel(&reqs[0]), -EBUSY); /* its cb is on its way */
    sem_post(&g.release);
    cancelled_calls = 0;
    CHECK_EQ(lull_loop_run(L, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(cancelled_calls, 6);
    CHECK_EQ(access(in_dir("m"), F_OK), -1);
    CHECK_EQ(access(in_dir("s"), F_OK), -1);
    CHECK_EQ(lull_fs_cancel(&reqs[0]), -EINVAL); /* not in flight */
    CHECK_EQ(lull_pool_free(P), 0);
    CHECK_EQ(lull_loop_free(L), 0);
    CHECK_EQ(rmdir(dir), 0);
}

/* Hostile arguments: refused at once with -EINVAL (or -EBADF for a
 * negative fd), never a crash; an empty path is the kernel's -ENOENT. */
TEST_THREADED(fs_hostile_arguments) {
    fs_setup();
    char *long_path = malloc(PATH_MAX + 1);
    memset(long_path, 'a', PATH_MAX);
    long_path[PATH_MAX] = '\0';
    lull_stat st;
    char buf[8];
    CHECK_EQ(lull_fs_open(L, P, &R, NULL, O_RDONLY, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_open(L, P, &R, long_path, O_RDONLY, 0, on_fs), -EINVAL);
    long_path[PATH_MAX - 1] = '\0'; /* PATH_MAX bytes with its NUL: fine */
    CHECK_EQ(run(lull_fs_stat(L, P, &R, long_path, &st, on_fs)), -ENAMETOOLONG);
    long_path[PATH_MAX - 1] = 'a';
    CHECK_EQ(lull_fs_rename(L, P, &R, path, long_path, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_rename(L, P, &R, path, NULL, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_link(L, P, &R, NULL, path, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_scandir(L, P, &R, NULL, on_batch, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_scandir(L, P, &R, dir, NULL, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_unlink(L, P, &R, long_path, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_mkdtemp(L, P, &R, NULL, on_fs), -EINVAL);
    free(long_path);
    CHECK_EQ(run(lull_fs_stat(L, P, &R, "", &st, on_fs)), -ENOENT);
    CHECK_EQ(run(lull_fs_unlink(L, P, &R, "", on_fs)), -ENOENT);
    CHECK_EQ(run(lull_fs_scandir(L, P, &R, "", on_batch, on_fs)), -ENOENT);
    CHECK_EQ(lull_fs_read(L, P, &R, 0, buf, (size_t)SSIZE_MAX + 1, 0, on_fs),
             -EINVAL);
    CHECK_EQ(lull_fs_write(L, P, &R, 0, buf, SIZE_MAX, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_read(L, P, &R, 0, buf, 1, (uint64_t)INT64_MAX + 1, on_fs),
             -EINVAL);
    CHECK_EQ(lull_fs_write(L, P, &R, 0, NULL, 1, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_fsync(L, P, &R, -1, on_fs), -EBADF);
    CHECK_EQ(lull_fs_fstat(L, P, &R, 0, NULL, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_realpath(L, P, &R, dir, NULL, 8, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_unlink(NULL, P, &R, path, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_unlink(L, NULL, &R, path, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_unlink(L, P, NULL, path, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_unlink(L, P, &R, path, NULL), -EINVAL);
    CHECK_EQ(lull_fs_cancel(NULL), -EINVAL);
    /* In flight: every submit says -EBUSY and leaves it alone. */
    CHECK_EQ(lull_fs_stat(L, P, &R, dir, &st, on_fs), 0);
    CHECK_EQ(lull_fs_unlink(L, P, &R, path, on_fs), -EBUSY);
    CHECK_EQ(lull_fs_scandir(L, P, &R, dir, on_batch, on_fs), -EBUSY);
    CHECK_EQ(run(0), 0);
    CHECK(S_ISDIR(st.mode));
    fs_teardown();
}

/* The refusals fs_hostile_arguments does not reach, for every helper in
 * turn: its pointer arguments NULL, a negative fd (-EBADF), buffer counts
 * and sizes out of range, offsets and lengths past INT64_MAX. Each is
 * refused at once: no callback, the request free for the next call. A
 * time with nanoseconds out of range is the kernel's to refuse. */
TEST_THREADED(fs_every_helper_refuses_bad_arguments) {
    fs_setup();
    int fd = open_rw(path);
    char buf[8];
    struct iovec iov = {buf, sizeof buf};
    lull_stat st;
    ncalls = 0;
    CHECK_EQ(lull_fs_close(L, P, &R, -1, on_fs), -EBADF);
    CHECK_EQ(lull_fs_read(L, P, &R, -1, buf, 1, 0, on_fs), -EBADF);
    CHECK_EQ(lull_fs_read(L, P, &R, fd, NULL, 1, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_write(L, P, &R, -1, buf, 1, 0, on_fs), -EBADF);
    CHECK_EQ(lull_fs_write(L, P, &R, fd, buf, 1, UINT64_MAX - 1, on_fs),
             -EINVAL);
    CHECK_EQ(lull_fs_readv(L, P, &R, fd, NULL, 1, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_readv(L, P, &R, fd, &iov, -1, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_readv(L, P, &R, fd, &iov, INT_MAX, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_writev(L, P, &R, -1, &iov, 1, 0, on_fs), -EBADF);
    CHECK_EQ(lull_fs_writev(L, P, &R, fd, &iov, -1, 0, on_fs), -EINVAL);
    CHECK_EQ(
        lull_fs_writev(L, P, &R, fd, &iov, 1, (uint64_t)INT64_MAX + 1, on_fs),
        -EINVAL);
    CHECK_EQ(lull_fs_stat(L, P, &R, path, NULL, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_lstat(L, P, &R, NULL, &st, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_fstat(L, P, &R, -1, &st, on_fs), -EBADF);
    CHECK_EQ(lull_fs_rename(L, P, &R, NULL, path, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_mkdir(L, P, &R, NULL, 0700, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_rmdir(L, P, &R, NULL, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_link(L, P, &R, path, NULL, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_symlink(L, P, &R, NULL, path, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_symlink(L, P, &R, path, NULL, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_readlink(L, P, &R, NULL, buf, sizeof buf, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_readlink(L, P, &R, path, NULL, sizeof buf, on_fs),
             -EINVAL);
    CHECK_EQ(lull_fs_readlink(L, P, &R, path, buf, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_realpath(L, P, &R, NULL, buf, sizeof buf, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_realpath(L, P, &R, path, buf, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_fsync(L, P, &R, fd, NULL), -EINVAL);
    CHECK_EQ(lull_fs_fdatasync(L, P, &R, -1, on_fs), -EBADF);
    CHECK_EQ(lull_fs_ftruncate(L, P, &R, -1, 0, on_fs), -EBADF);
    CHECK_EQ(lull_fs_ftruncate(L, P, &R, fd, UINT64_MAX, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_copy_range(L, P, &R, -1, 0, fd, 0, 1, on_fs), -EBADF);
    CHECK_EQ(lull_fs_copy_range(L, P, &R, fd, 0, -1, 0, 1, on_fs), -EBADF);
    CHECK_EQ(lull_fs_copy_range(L, P, &R, fd, UINT64_MAX, fd, 0, 1, on_fs),
             -EINVAL);
    CHECK_EQ(lull_fs_copy_range(L, P, &R, fd, 0, fd, UINT64_MAX, 1, on_fs),
             -EINVAL);
    CHECK_EQ(lull_fs_copy_range(L, P, &R, fd, 0, fd, 0, SIZE_MAX, on_fs),
             -EINVAL);
    CHECK_EQ(lull_fs_sendfile(L, P, &R, -1, fd, 0, 1, on_fs), -EBADF);
    CHECK_EQ(lull_fs_sendfile(L, P, &R, fd, fd, UINT64_MAX, 1, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_chmod(L, P, &R, NULL, 0600, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_fchmod(L, P, &R, -1, 0600, on_fs), -EBADF);
    CHECK_EQ(lull_fs_chown(L, P, &R, NULL, 0, 0, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_fchown(L, P, &R, -1, 0, 0, on_fs), -EBADF);
    CHECK_EQ(lull_fs_utime(L, P, &R, NULL, NULL, on_fs), -EINVAL);
    CHECK_EQ(lull_fs_futime(L, P, &R, -1, NULL, on_fs), -EBADF);
    CHECK_EQ(lull_fs_cancel(&R), -EINVAL); /* nothing in flight */
    CHECK_EQ(ncalls, 0);
    CHECK(!lull_loop_alive(L));
    struct timespec bad[2] = {{0, -1}, {0, 1000000000}};
    CHECK_EQ(run(lull_fs_futime(L, P, &R, fd, bad, on_fs)), -EINVAL);
    CHECK_EQ(run(lull_fs_close(L, P, &R, fd, on_fs)), 0);
    fs_teardown();
}

TEST_THREADED(fs_file_removed_between_open_and_read) {
    fs_setup();
    int fd = open_rw(path);
    CHECK_EQ(write(fd, "still here", 10), 10);
    CHECK_EQ(run(lull_fs_unlink(L, P, &R, path, on_fs)), 0);
    char buf[16];
    CHECK_EQ(run(lull_fs_read(L, P, &R, fd, buf, sizeof buf, 0, on_fs)), 10);
    CHECK(memcmp(buf, "still here", 10) == 0);
    lull_stat st;
    CHECK_EQ(run(lull_fs_fstat(L, P, &R, fd, &st, on_fs)), 0);
    CHECK_EQ(st.nlink, 0);
    CHECK_EQ(run(lull_fs_close(L, P, &R, fd, on_fs)), 0);
    fs_teardown();
}

TEST_THREADED(fs_closed_fd) {
    fs_setup();
    int fd = open_rw(path);
    CHECK_EQ(close(fd), 0);
    char buf[4];
    lull_stat st;
    CHECK_EQ(run(lull_fs_read(L, P, &R, fd, buf, 4, 0, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_write(L, P, &R, fd, "x", 1, 0, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_fstat(L, P, &R, fd, &st, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_ftruncate(L, P, &R, fd, 0, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_futime(L, P, &R, fd, NULL, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_close(L, P, &R, fd, on_fs)), -EBADF);
    fs_teardown();
}

/* A read or write of nothing still asks the kernel, as read(2), write(2)
 * and libuv's uv_fs_read do: a closed fd, or a write to a read-only one,
 * is -EBADF. It was 0 without a system call, so a request whose fd had
 * been closed under it reported success. */
TEST_THREADED(fs_zero_length_read_or_write_checks_the_fd) {
    fs_setup();
    int fd = open_rw(path);
    char buf[1];
    struct iovec none = {buf, 0};
    CHECK_EQ(run(lull_fs_read(L, P, &R, fd, buf, 0, 0, on_fs)), 0);
    CHECK_EQ(run(lull_fs_write(L, P, &R, fd, NULL, 0, LULL_FS_CURRENT, on_fs)),
             0);
    CHECK_EQ(run(lull_fs_close(L, P, &R, fd, on_fs)), 0);
    CHECK_EQ(run(lull_fs_read(L, P, &R, fd, buf, 0, 0, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_read(L, P, &R, fd, buf, 0, LULL_FS_CURRENT, on_fs)),
             -EBADF);
    CHECK_EQ(run(lull_fs_write(L, P, &R, fd, buf, 0, 0, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_readv(L, P, &R, fd, &none, 1, 0, on_fs)), -EBADF);
    CHECK_EQ(
        run(lull_fs_writev(L, P, &R, fd, &none, 1, LULL_FS_CURRENT, on_fs)),
        -EBADF);
    int ro = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(ro >= 0);
    CHECK_EQ(run(lull_fs_write(L, P, &R, ro, buf, 0, 0, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_read(L, P, &R, ro, buf, 0, 0, on_fs)), 0);
    close(ro);
    fs_teardown();
}

/* A copy or sendfile of nothing still asks the kernel about both fds, as
 * copy_file_range(2) and sendfile(2) (libuv's uv_fs_sendfile) do: a
 * closed one, or a destination opened read-only, is -EBADF. It was 0
 * without a system call. */
TEST_THREADED(fs_zero_length_copy_or_sendfile_checks_the_fds) {
    fs_setup();
    int in = open_rw(path);
    int out = open_rw(in_dir("copy"));
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, out, 0, in, 0, 0, on_fs)), 0);
    CHECK_EQ(run(lull_fs_sendfile(L, P, &R, out, in, 0, 0, on_fs)), 0);
    int ro = open(path, O_RDONLY | O_CLOEXEC);
    CHECK(ro >= 0);
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, ro, 0, in, 0, 0, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_sendfile(L, P, &R, ro, in, 0, 0, on_fs)), -EBADF);
    close(ro);
    CHECK_EQ(run(lull_fs_close(L, P, &R, out, on_fs)), 0);
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, out, 0, in, 0, 0, on_fs)),
             -EBADF);
    CHECK_EQ(run(lull_fs_sendfile(L, P, &R, out, in, 0, 0, on_fs)), -EBADF);
    CHECK_EQ(run(lull_fs_copy_range(L, P, &R, in, 0, out, 0, 0, on_fs)),
             -EBADF);
    CHECK_EQ(run(lull_fs_sendfile(L, P, &R, in, out, 0, 0, on_fs)), -EBADF);
    close(in);
    fs_teardown();
}

/* Two requests done on the pool, their callbacks not yet run (both on
 * the loop's way): the loop cannot be freed, and the first callback can
 * neither cancel nor reuse the second (-EBUSY: its callback is on its
 * way), which then runs once with its own result, as libuv's uv_cancel
 * of a request past its work says. */
static lull_fs second;
static lull_stat second_st;
static int first_calls, second_calls;
static int64_t second_result;

static void second_done(lull_fs *req, int64_t result) {
    CHECK_EQ(req, &second);
    second_calls++;
    second_result = result;
}

static void first_done(lull_fs *req, int64_t result) {
    (void)req;
    CHECK_EQ(result, 0);
    first_calls++;
    CHECK_EQ(lull_fs_cancel(&second), -EBUSY);
    CHECK_EQ(lull_fs_unlink(L, P, &second, path, second_done), -EBUSY);
    CHECK_EQ(second_calls, 0);
}

TEST_THREADED(fs_request_done_but_not_delivered_is_past_cancel_and_reuse) {
    fs_setup();
    /* One thread: the two come back, and are delivered, in order. */
    CHECK_EQ(lull_pool_free(P), 0);
    CHECK_EQ(lull_pool_new(&P, &(lull_pool_options){.threads = 1}), 0);
    memset(&second, 0, sizeof second);
    first_calls = second_calls = 0;
    lull_stat st;
    CHECK_EQ(lull_fs_stat(L, P, &R, dir, &st, first_done), 0);
    CHECK_EQ(lull_fs_stat(L, P, &second, dir, &second_st, second_done), 0);
    uint64_t deadline = check_clock_ns() + 10000000000u;
    lull_pool_stats ps;
    for (;;) { /* both run and handed back, neither delivered */
        lull_pool_get_stats(P, &ps);
        if (ps.completed >= 2) break;
        CHECK(check_clock_ns() < deadline);
        sched_yield();
    }
    CHECK_EQ(lull_loop_free(L), -EBUSY);
    CHECK_EQ(lull_fs_cancel(&R), -EBUSY);
    CHECK_EQ(lull_fs_cancel(&second), -EBUSY);
    CHECK_EQ(lull_loop_run(L, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(first_calls, 1);
    CHECK_EQ(second_calls, 1);
    CHECK_EQ(second_result, 0);
    CHECK(S_ISDIR(second_st.mode));
    fs_teardown();
}

/* A request has no init of its own (libuv's uv_fs_t neither): one on the
 * stack, never used, holds whatever was there. Its garbage read as in
 * flight, and every call on it said -EBUSY for ever; a cancel of it
 * followed its garbage listing state (a crash), where one never submitted
 * is -EINVAL. The same for a lookup. */
static void on_lookup_of_garbage(lull_lookup *req, int status,
                                 struct addrinfo *res) {
    (void)req;
    lookup_status = status;
    if (res) freeaddrinfo(res);
}

TEST_THREADED(fs_request_never_zeroed_is_free) {
    fs_setup();
    lull_fs req;
    memset(&req, 0xa5, sizeof req);
    CHECK_EQ(lull_fs_cancel(&req), -EINVAL);
    lull_stat st;
    CHECK_EQ(run(lull_fs_stat(L, P, &req, dir, &st, on_fs)), 0);
    CHECK(S_ISDIR(st.mode));
    make_entries(dir, 3);
    memset(&req, 0xa5, sizeof req);
    CHECK_EQ(run(lull_fs_scandir(L, P, &req, dir, on_batch, on_fs)), 3);
    lull_lookup lk;
    memset(&lk, 0xa5, sizeof lk);
    CHECK_EQ(lull_lookup_cancel(&lk), -EINVAL);
    struct addrinfo hints = {.ai_family = AF_INET,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    lookup_status = 1;
    CHECK_EQ(lull_lookup_start(L, P, &lk, "127.0.0.1", "80", &hints,
                               on_lookup_of_garbage),
             0);
    CHECK_EQ(lull_loop_run(L, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(lookup_status, 0);
    fs_teardown();
}

/* RLIMIT_NOFILE lowered to the fds already open: the kernel's -EMFILE
 * comes back through cb, for an open and for a listing's open. */
TEST_THREADED(fs_emfile_reported) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    struct rlimit old;
    check_fds_exhaust(&old);
    int64_t r1 =
        run(lull_fs_open(L, P, &R, path, O_RDWR | O_CREAT, 0600, on_fs));
    int64_t r2 = run(lull_fs_scandir(L, P, &R, in_dir("d"), on_batch, on_fs));
    check_fds_restore(&old);
    CHECK_EQ(r1, -EMFILE);
    CHECK_EQ(r2, -EMFILE);
    fs_teardown();
}

/* Cancelled while its next trip waits in the queue (behind a gate that
 * holds the pool's only thread): cb gets -ECANCELED once, after one batch,
 * and the listing's state is freed (ASan). */
static gate between;
static lull_task cancel_task;

static void cancel_queued(lull_task *t) {
    (void)t;
    CHECK_EQ(lull_fs_cancel(&R), 0);
    CHECK_EQ(lull_fs_cancel(&R), -EBUSY); /* its cb is on its way */
    sem_post(&between.release);
}

static bool gate_then_cancel(lull_fs *req) {
    (void)req;
    if (batches != 1) return true;
    sem_init(&between.started, 0, 0);
    sem_init(&between.release, 0, 0);
    lull_work_init(&between.work, gate_run, NULL);
    CHECK_EQ(lull_work_submit(L, P, &between.work), 0);
    lull_task_init(&cancel_task, cancel_queued);
    lull_task_post(L, &cancel_task); /* after this batch's trip is queued */
    return true;
}

TEST_THREADED(fs_scandir_cancelled_between_batches) {
    make_dir();
    CHECK_EQ(lull_loop_new(&L, NULL), 0);
    CHECK_EQ(lull_pool_new(&P, &(lull_pool_options){.threads = 1}), 0);
    memset(&R, 0, sizeof R);
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    on_batch_hook = gate_then_cancel;
    CHECK_EQ(list(in_dir("d")), -ECANCELED);
    on_batch_hook = NULL;
    CHECK_EQ(batches, 1);
    fs_teardown();
}

/* A listing cancelled while its next trip is off the loop: taken by a
 * thread, or back from it with its batch not yet handed over. A one-shot
 * request a thread took is past cancelling (-EBUSY: its cb comes soon with
 * the call's result), but a listing has hundreds of trips to go: -EBUSY
 * there left it running to its end, with nothing the caller could do but
 * guess when to try again (whether a trip is off the loop cannot be seen
 * from it). The cancel ends it when that trip comes back: cb gets
 * -ECANCELED once, and no dir_cb runs after the cancel. */
static uint64_t completed_at_batch;
static int trip_cancel_rc;

static void cancel_trip_off_the_loop(lull_task *t) {
    (void)t;
    /* The trip dir_cb's return submitted is back from the thread: its
     * completion waits on the loop's remote stack, past withdrawing. */
    lull_pool_stats st;
    do {
        sched_yield();
        lull_pool_get_stats(P, &st);
    } while (st.completed < completed_at_batch + 1);
    trip_cancel_rc = lull_fs_cancel(&R);
}

static bool cancel_after_this_batch(lull_fs *req) {
    (void)req;
    if (batches != 1) return true;
    lull_pool_stats st;
    lull_pool_get_stats(P, &st);
    completed_at_batch = st.completed;
    lull_task_init(&cancel_task, cancel_trip_off_the_loop);
    lull_task_post(L, &cancel_task); /* runs once the next trip is queued */
    return true;
}

TEST_THREADED(fs_scandir_cancelled_while_a_trip_is_off_the_loop) {
    make_dir();
    CHECK_EQ(lull_loop_new(&L, NULL), 0);
    CHECK_EQ(lull_pool_new(&P, &(lull_pool_options){.threads = 1}), 0);
    memset(&R, 0, sizeof R);
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    on_batch_hook = cancel_after_this_batch;
    trip_cancel_rc = 1;
    CHECK_EQ(list(in_dir("d")), -ECANCELED);
    on_batch_hook = NULL;
    CHECK_EQ(trip_cancel_rc, 0);
    CHECK_EQ(batches, 1); /* the trip's batch was not handed over */
    CHECK_EQ(lull_fs_cancel(&R), -EINVAL); /* ended: nothing to cancel */
    /* The request is free again at once. */
    CHECK_EQ(list(in_dir("d")), 1000);
    fs_teardown();
}

/* The same cancel from outside any turn, the trip back and its
 * completion not yet taken by the loop: the first cancel takes (0), a
 * second says the end is on its way (-EBUSY), the loop will not be freed
 * under the listing (-EBUSY, unchanged), and the run that follows ends it
 * with -ECANCELED, no batch handed over. */
TEST_THREADED(fs_scandir_cancelled_twice_off_the_loop_then_the_loop_freed) {
    make_dir();
    CHECK_EQ(lull_loop_new(&L, NULL), 0);
    CHECK_EQ(lull_pool_new(&P, &(lull_pool_options){.threads = 1}), 0);
    memset(&R, 0, sizeof R);
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    batches = 0;
    listing = false;
    lull_pool_stats st;
    lull_pool_get_stats(P, &st);
    uint64_t before = st.completed;
    CHECK_EQ(lull_fs_scandir(L, P, &R, in_dir("d"), on_batch, on_listed), 0);
    do {
        sched_yield();
        lull_pool_get_stats(P, &st);
    } while (st.completed < before + 1); /* the first trip is back */
    CHECK_EQ(lull_fs_cancel(&R), 0);
    CHECK_EQ(lull_fs_cancel(&R), -EBUSY);
    CHECK_EQ(lull_loop_free(L), -EBUSY);
    ncalls = 0;
    CHECK_EQ(lull_loop_run(L, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(ncalls, 1);
    CHECK_EQ(last, -ECANCELED);
    CHECK_EQ(batches, 0);
    CHECK_EQ(lull_fs_cancel(&R), -EINVAL); /* ended */
    fs_teardown();
}

/* The queue full (max_queued) when a listing comes back between batches:
 * the listing was accepted once, and its next trip takes the place its
 * last one left. Refused, the listing ended halfway with -EAGAIN, the
 * entries past its first batch never listed and no way to go on from
 * there (a libuv or Tokio listing is not cut short by load). */
static gate full_gate;
static lull_work full_waiter;
static lull_task release_task;

static int full_run(lull_work *w) {
    (void)w;
    return 0;
}

static void release_gate(lull_task *t) {
    (void)t;
    sem_post(&full_gate.release);
}

static bool fill_the_queue(lull_fs *req) {
    (void)req;
    if (batches != 1) return true;
    gate_hold(L, P, &full_gate); /* the only thread held */
    lull_work_init(&full_waiter, full_run, NULL);
    CHECK_EQ(lull_work_submit(L, P, &full_waiter), 0); /* the queue full */
    lull_work w;
    lull_work_init(&w, full_run, NULL);
    CHECK_EQ(lull_work_submit(L, P, &w), -EAGAIN); /* new work: refused */
    lull_task_init(&release_task, release_gate);
    lull_task_post(L, &release_task); /* after the next trip is queued */
    return true;
}

TEST_THREADED(fs_scandir_full_queue_between_batches_lists_on) {
    make_dir();
    CHECK_EQ(lull_loop_new(&L, NULL), 0);
    CHECK_EQ(
        lull_pool_new(&P, &(lull_pool_options){.threads = 1, .max_queued = 1}),
        0);
    memset(&R, 0, sizeof R);
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    on_batch_hook = fill_the_queue;
    CHECK_EQ(list(in_dir("d")), 1000);
    on_batch_hook = NULL;
    CHECK_EQ(entries, 1000);
    fs_teardown();
}

/* The pool closed while a listing is between batches: its next trip is
 * refused, and cb gets that error once. */
static bool close_pool(lull_fs *req) {
    (void)req;
    lull_pool_close(P);
    return true;
}

TEST_THREADED(fs_scandir_pool_closed_mid_listing) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    on_batch_hook = close_pool;
    CHECK_EQ(list(in_dir("d")), -ESHUTDOWN);
    on_batch_hook = NULL;
    CHECK_EQ(batches, 1);
    CHECK_EQ(lull_fs_unlink(L, P, &R, path, on_fs), -ESHUTDOWN);
    fs_teardown();
}

/* The pool freed while a listing's batch is back from it, its done still
 * to run (lull_pool_free returns before the last done functions run):
 * the listing's next trip is refused (-ESHUTDOWN, cb once), not
 * submitted to the freed pool. */
TEST_THREADED(fs_scandir_pool_freed_with_a_batch_on_its_way) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 1000);
    batches = entries = max_batch = bad_batches = 0;
    memset(seen_mark, 0, sizeof seen_mark);
    ncalls = 0;
    CHECK_EQ(lull_fs_scandir(L, P, &R, in_dir("d"), on_batch, on_listed), 0);
    uint64_t deadline = check_clock_ns() + 10000000000u;
    lull_pool_stats st;
    for (;;) { /* the first batch read and handed back */
        lull_pool_get_stats(P, &st);
        if (st.completed >= 1) break;
        CHECK(check_clock_ns() < deadline);
        sched_yield();
    }
    CHECK_EQ(lull_pool_free(P), 0);
    P = NULL;
    while (ncalls == 0)
        CHECK_EQ(lull_loop_run(L, LULL_RUN_ONCE), 0);
    CHECK_EQ(ncalls, 1);
    CHECK_EQ(last, -ESHUTDOWN);
    CHECK_EQ(batches, 1);
    CHECK_EQ(lull_loop_free(L), 0);
    CHECK_EQ(nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* The file lane: a file operation stuck on its pool (a slow disk, played by
 * a gate) holds neither the loop nor work on another pool. */
static int cpu_done;

static int cpu_run(lull_work *w) {
    (void)w;
    return 7;
}

static void cpu_back(lull_work *w, int status) {
    (void)w;
    CHECK_EQ(status, 7);
    CHECK_EQ(ncalls, 0); /* the file operation is still held */
    cpu_done++;
    sem_post(&between.release);
}

TEST_THREADED(fs_file_lane_leaves_other_pools_alone) {
    make_dir();
    CHECK_EQ(lull_loop_new(&L, NULL), 0);
    lull_pool *cpu;
    CHECK_EQ(lull_pool_new(&P, &(lull_pool_options){.threads = 1}), 0);
    CHECK_EQ(lull_pool_new(&cpu, &(lull_pool_options){.threads = 1}), 0);
    memset(&R, 0, sizeof R);
    gate_hold(L, P, &between);
    lull_stat st;
    CHECK_EQ(lull_fs_stat(L, P, &R, dir, &st, on_fs), 0);
    lull_work w;
    lull_work_init(&w, cpu_run, cpu_back);
    CHECK_EQ(lull_work_submit(L, cpu, &w), 0);
    ncalls = 0;
    cpu_done = 0;
    CHECK_EQ(lull_loop_run(L, LULL_RUN_DEFAULT), 0);
    CHECK_EQ(cpu_done, 1);
    CHECK_EQ(ncalls, 1);
    CHECK_EQ(last, 0);
    CHECK_EQ(lull_pool_free(cpu), 0);
    fs_teardown();
}

/* A program that closed its stdin, stdout and stderr, then listed a
 * directory: the directory's fd, which lull holds from the first batch to
 * the last, took 0, so the program's reads of stdin read it and a child
 * spawned meanwhile with its stdio inherited got it. It stays above 2, as
 * lull's other fds do (test_stream, sockets_never_take_closed_stdio). */
static bool stdio_open_at_batch;

static bool note_stdio(lull_fs *req) {
    (void)req;
    for (int i = 0; i < 3; i++)
        if (fcntl(i, F_GETFD) >= 0) stdio_open_at_batch = true;
    return true;
}

TEST_THREADED(fs_scandir_never_takes_closed_stdio) {
    fs_setup();
    CHECK_EQ(mkdir(in_dir("d"), 0700), 0);
    make_entries(in_dir("d"), 2 * LULL_FS_DIR_BATCH + 1);
    stdio_gone gone;
    stdio_close(&gone);
    stdio_open_at_batch = false;
    on_batch_hook = note_stdio;
    batches = entries = max_batch = bad_batches = 0;
    memset(seen_mark, 0, sizeof seen_mark);
    ncalls = 0;
    int rc = lull_fs_scandir(L, P, &R, in_dir("d"), on_batch, on_fs);
    int ran = rc == 0 ? lull_loop_run(L, LULL_RUN_DEFAULT) : rc;
    on_batch_hook = NULL;
    stdio_back(&gone);
    CHECK_EQ(rc, 0);
    CHECK_EQ(ran, 0);
    CHECK_EQ(ncalls, 1);
    CHECK_EQ(last, 2 * LULL_FS_DIR_BATCH + 1);
    CHECK(batches >= 3);
    CHECK(!stdio_open_at_batch);
    fs_teardown();
}
