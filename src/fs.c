/* Name resolution and the journal on the worker pool (the one-shot file
 * operations are src/fsops.c).
 *
 * Owns: getaddrinfo requests, a caller-owned struct around a lull_work,
 * and the journal: appends to one file made durable with fdatasync,
 * batched. Everything here is built on lull_work_submit; the pool threads run
 * only the *_run functions, which touch nothing but their own request (and, for
 * the journal, the batch it was handed). Everything else runs on the loop
 * thread.
 *
 * The journal keeps at most one batch in flight, so batches are written and
 * synced in order and a completed sync covers every byte before it:
 *   append     queues the request; with no batch in flight, posts `start`
 *              (a later task, so the appends of one turn share a batch)
 *   start      hands everything queued to the pool as one batch: offsets
 *              are assigned, then one pwritev run and one fdatasync
 *   done       starts the next batch (what queued meanwhile) before
 *              running the finished one's callbacks, so the disk is busy
 *              while they run
 * The five rows (README, "The contracts"): trigger: an append, or its batch's
 * completion; source of truth: the queue and the batch; pending predicate:
 * something queued with no batch in flight; next deadline: none; quiet
 * condition: nothing queued and no batch in flight (no task, no timer, no
 * work). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"
#include "lull.h"
#include "own_name.h"
#include "pool.h"

/* ------------------------------------------------------- getaddrinfo */

static int lookup_run(lull_work *work) {
    lull_lookup *req = LULL_CONTAINER_OF(work, lull_lookup, work);
    req->res = NULL;
    int rc = getaddrinfo(req->node, req->service, req->hints, &req->res);
    req->sys_errno = rc == EAI_SYSTEM ? errno : 0;
    return rc;
}

static void lookup_done(lull_work *work, int status) {
    lull_lookup *req = LULL_CONTAINER_OF(work, lull_lookup, work);
    struct addrinfo *res = status == 0 ? req->res : NULL;
    /* An answer the callback is not given: a fork()ed child's copy of a
     * lookup whose getaddrinfo had returned in the parent (its thread
     * not yet back under the pool's lock, which the fork held) comes back
     * cancelled, with the answer in the child's copy of the request. */
    if (!res && req->res) {
        freeaddrinfo(req->res);
        req->res = NULL;
    }
    req->cb(req, status, res);
}

int lull_lookup_start(lull_loop *loop, lull_pool *pool, lull_lookup *req,
                      const char *node, const char *service,
                      const struct addrinfo *hints, lull_lookup_fn cb) {
    if (!loop || !pool || !req || !cb || (!node && !service)) return -EINVAL;
    /* As a file request's (src/fsops.c, fs_in_flight): one never used
     * holds garbage, which only a submit here leaves lookup_run in. */
    if (req->work.fn == lookup_run && lull_work_busy(&req->work)) return -EBUSY;
    lull_work_init(&req->work, lookup_run, lookup_done);
    req->cb = cb;
    req->node = node;
    req->service = service;
    req->hints = hints;
    req->res = NULL;
    req->sys_errno = 0;
    return lull_work_submit(loop, pool, &req->work);
}

int lull_lookup_cancel(lull_lookup *req) {
    /* Never started: its garbage is not to be followed. */
    if (!req || req->work.fn != lookup_run) return -EINVAL;
    return lull_work_cancel(&req->work);
}

/* ------------------------------------------------------------ journal */

/* iovecs per pwritev call: 64 KiB of stack would buy little over 4 KiB,
 * since a batch that long is already one syscall per 256 records. */
#define JOURNAL_IOV 256

/* On a pool thread: writes the batch at its offsets, then one fdatasync. */
static int journal_run(lull_work *work) {
    lull_journal *j = LULL_CONTAINER_OF(work, lull_journal, work);
    struct iovec iov[JOURNAL_IOV];
    uint64_t off = j->batch_start;
    lull_append *a = j->batch;
    size_t skip = 0; /* bytes of `a` already written */
    while (a) {
        int n = 0;
        for (lull_append *b = a; b && n < JOURNAL_IOV; b = b->next) {
            size_t from = b == a ? skip : 0;
            if (b->len == from) continue;
            iov[n].iov_base = (char *)b->buf + from;
            iov[n].iov_len = b->len - from;
            n++;
        }
        if (n == 0) break;
        ssize_t w = pwritev(j->fd, iov, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        if (w == 0) return -EIO; /* cannot happen for a regular file */
        off += (uint64_t)w;
        /* Step past what was written, possibly ending inside a record. */
        size_t left = (size_t)w;
        while (a && left >= a->len - skip) {
            left -= a->len - skip;
            skip = 0;
            a = a->next;
        }
        skip += left;
    }
    while (fdatasync(j->fd) < 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

/* Runs the callbacks of a detached list, oldest first. */
static void complete(lull_append *list, int status, uint64_t sync) {
    while (list) {
        lull_append *next = list->next; /* cb may append it again */
        list->next = NULL;
        list->sync = status == 0 ? sync : 0;
        list->cb(list, status);
        list = next;
    }
}

/* The journal whose completions its loop is running (journal_done), and
 * whether one of them appended to it: the journal is touched after its
 * callbacks only if so. A callback that finds it idle (lull_journal_busy
 * false) may free it, which an append makes busy again. Kept by the loop
 * (loop->journal_turn), not in the journal: a freed journal cannot say it
 * was freed, and lull_journal's layout is ABI. */
typedef struct lull__journal_turn {
    const lull_journal *j;
    bool appended;
    struct lull__journal_turn *outer; /* another journal's, if any */
} journal_turn;

/* complete(), then whether j is still to be read: true when a callback
 * appended to it; false when it may have been freed (never read again). */
static bool complete_watched(lull_journal *j, lull_append *list, int status,
                             uint64_t sync) {
    lull_loop *loop = j->loop; /* outlives the callbacks; j may not */
    journal_turn t = {.j = j, .outer = loop->journal_turn};
    loop->journal_turn = &t;
    complete(list, status, sync);
    loop->journal_turn = t.outer;
    return t.appended;
}

static lull_append *take_queue(lull_journal *j) {
    lull_append *list = j->head;
    j->head = j->tail = NULL;
    return list;
}

/* Hands what is queued to the pool as one batch; 0, or the submit's error
 * with the batch taken back (its requests not yet completed). `again`: the
 * batch follows one that just came back, and takes the place in the pool's
 * queue that one left (lull__work_submit_again): appends once accepted are
 * not failed because other work filled the queue meanwhile. */
static int start_batch(lull_journal *j, bool again) {
    lull_append *list = take_queue(j);
    uint64_t off = j->end;
    for (lull_append *a = list; a; a = a->next) {
        a->offset = off;
        off += a->len;
    }
    j->batch = list;
    j->batch_start = j->end;
    j->batch_bytes = off - j->end;
    int rc = again ? lull__work_submit_again(j->loop, j->pool, &j->work)
                   : lull_work_submit(j->loop, j->pool, &j->work);
    if (rc < 0) {
        j->batch = NULL;
        return rc;
    }
    j->end = off;
    return 0;
}

/* Starts the queued appends as a batch, or refuses them all with the
 * pool's answer: 0 or that errno. */
static int start_or_refuse(lull_journal *j) {
    lull_append *list = j->head;
    int rc = start_batch(j, false);
    /* Not sticky: nothing was written (a full or closed pool). */
    if (rc < 0) complete(list, rc, 0);
    return rc;
}

static void journal_start(lull_task *task) {
    lull_journal *j = LULL_CONTAINER_OF(task, lull_journal, start);
    if (j->batch || !j->head) return;
    (void)start_or_refuse(j);
}
LULL__OWN_NAME(journal_start, "lull_journal batch start", lull_journal, start);

static void journal_done(lull_work *work, int status) {
    lull_journal *j = LULL_CONTAINER_OF(work, lull_journal, work);
    lull_append *finished = j->batch;
    j->batch = NULL;
    if (status < 0 && status != -ECANCELED) {
        /* The file's state is unknown past the last good sync: refuse
         * everything from here on (a retried fsync may report success for
         * data the kernel already dropped). */
        j->error = status;
        lull_task_cancel(&j->start);
        /* Taken before any callback runs: the first may free j (idle once
         * its queue is taken, appends refused by the sticky error). */
        lull_append *queued = take_queue(j);
        complete(finished, status, 0);
        complete(queued, status, 0);
        return;
    }
    if (status == -ECANCELED) /* the pool closed: nothing was written */
        j->end = j->batch_start;
    else
        j->syncs++;
    uint64_t sync = j->syncs;
    lull_append *failed = NULL;
    int rc = 0;
    if (j->head) {
        failed = j->head;
        rc = start_batch(j, true);
        if (rc == 0) failed = NULL;
        lull_task_cancel(&j->start);
    }
    /* j is read after the callbacks only if one appended to it: the last
     * may have freed it (complete_watched). */
    bool live = complete_watched(j, finished, status, sync);
    if (failed) live |= complete_watched(j, failed, rc, 0);
    /* Appends the callbacks made leave from here, not from the start
     * task: inside done the pool is still there after lull_pool_free (a
     * done may submit, and hears -ESHUTDOWN), while a later task may find
     * it freed. Appends a refused batch's callbacks make go round again
     * while the pool is closed; after -EAGAIN, the start task takes them
     * (a retry here would spin until a pool thread frees a place). */
    while (live && j->head && !j->batch) {
        lull_task_cancel(&j->start);
        lull_append *list = j->head;
        rc = start_batch(j, false);
        if (rc == 0) break;
        /* Not sticky: nothing was written (a full or closed pool). */
        live = complete_watched(j, list, rc, 0);
        if (rc != -ESHUTDOWN) break;
    }
}

static void find_task(lull_task *t, void *arg) {
    lull_task **want = arg;
    if (t == *want) *want = NULL;
}

/* Whether j's appends are in flight: its start task queued, or its batch
 * on the pool (waiting or running) or on its way back. A clearing init
 * would unlink them from under the loop and the pool. Asked by address of
 * the loop and the pool given (j is garbage before its first init), the
 * pool first: an item leaves it only once its completion is posted. */
static bool journal_live(lull_loop *loop, lull_pool *pool, lull_journal *j) {
    if (lull__pool_holds(pool, &j->work)) return true;
    lull_task *posted = &j->work.task;
    lull__remote_each(loop, find_task, &posted);
    const lull__node *nodes[] = {&j->start.node, &j->work.task.node};
    return !posted || lull__live_on(loop, NULL, nodes, 2);
}

int lull_journal_init(lull_loop *loop, lull_pool *pool, lull_journal *j,
                      int fd) {
    if (!loop || !pool || !j || fd < 0) return -EINVAL;
    /* On the loop's thread only, which alone may read its queues (init is
     * for any thread: a journal set up elsewhere has nothing queued). */
    if (lull__on_loop_thread(loop) && journal_live(loop, pool, j))
        return -EBUSY;
    off_t end = lseek(fd, 0, SEEK_END);
    if (end < 0) return -errno;
    memset(j, 0, sizeof *j);
    lull_work_init(&j->work, journal_run, journal_done);
    lull_task_init(&j->start, journal_start);
    j->loop = loop;
    j->pool = pool;
    j->fd = fd;
    j->end = (uint64_t)end;
    return 0;
}

int lull_journal_append(lull_journal *j, lull_append *req, const void *buf,
                        size_t len, lull_append_fn cb) {
    /* A journal never set up (zeroed) has no loop to check the owner of. */
    if (!j || !j->loop || !req || !cb || (!buf && len)) return -EINVAL;
    /* The queue is the loop thread's, unlocked; the start task's post
     * would catch another thread, but only with no batch in flight. */
    LULL_ASSERT_LOOP_THREAD(j->loop);
    /* Longer than one write can be: queued, its batch's pwritev would fail
     * with EINVAL and make that error the journal's, sticky. */
    if (len > SSIZE_MAX) return -EINVAL;
    if (j->error) return j->error;
    /* Queued already, where that is seen at once (last or first queued,
     * first of the batch in flight): queued again, it was linked into a
     * cycle (last: to itself), whose batch wrote it again forever. */
    if (req == j->tail || req == j->head || req == j->batch) return -EBUSY;
#ifndef NDEBUG
    /* Anywhere else in either list it cut the list after it and was queued
     * again: the records behind it never completed. Finding it is a walk,
     * for debug builds only (the pool thread only reads the batch's
     * links, so this read races nothing). */
    for (const lull_append *a = j->head; a; a = a->next)
        LULL_ASSERT(a != req, "lull: lull_journal_append of a request already "
                              "queued or in flight");
    for (const lull_append *a = j->batch; a; a = a->next)
        LULL_ASSERT(a != req, "lull: lull_journal_append of a request already "
                              "queued or in flight");
#endif
    journal_turn *turn = j->loop->journal_turn;
    if (turn && turn->j == j) turn->appended = true; /* j stays in use */
    req->next = NULL;
    req->cb = cb;
    req->buf = buf;
    req->len = len;
    req->offset = 0;
    req->sync = 0;
    if (j->tail)
        j->tail->next = req;
    else
        j->head = req;
    j->tail = req;
    if (!j->batch) lull_task_post(j->loop, &j->start);
    return 0;
}

bool lull_journal_busy(const lull_journal *j) {
    return j && (j->head || j->batch || lull_task_pending(&j->start));
}
