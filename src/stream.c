/* Streams (C6): the frame interface over a connected socket, a pipe (or a
 * pair of pipes, one each way) or another byte-stream fd, and the listening
 * side. Address parsing lives in src/tcp.c and src/unix.c.
 *
 * Owns: a stream's write queue (the caller's lull_frame structs, linked
 * through frame->next: no allocation per write), its read buffer and frame
 * parser, its close, a server's accept loop, and the descriptors a Unix
 * stream passes with its frames ("passing fds" below). One thread: the
 * loop's.
 *
 * When writes leave. A send appends to the queue and queues the stream's
 * flush task at the loop's next flush point (lull__at_flush: after the fd
 * callbacks of an iteration, or at the end of its slice), so everything
 * written in between leaves in one system call (a sendmsg of up to IOV_MAX
 * buffers; a send when there is one). A send
 * that takes the queue to high_water writes at once instead, so a producer
 * never buffers much more than high_water. A short write means the socket
 * is full: the stream waits for writability (BLOCKED) and sends only queue
 * until then. A socket write carries MSG_NOSIGNAL: no SIGPIPE, ever.
 *
 * Other fds (lull_stream_open on a pipe, FIFO or character device;
 * lull_stream_open_pair). The same queue, flush points, bound and drain;
 * only the calls at the bottom differ (in_read, out_write): read and writev
 * where the fd is not a socket. An fd from elsewhere shares its open file
 * description (a dup, a child's stdout, a shell's terminal), and with it
 * O_NONBLOCK: a socket is never switched (MSG_DONTWAIT per call), nor is a
 * pipe where the kernel honours RWF_NOWAIT (preadv2, pwritev2); anything
 * else gets O_NONBLOCK, and lull clears it when the last of its streams on
 * that description closes its fd (NB bits, nb_take, nb_give). A pipe has no
 * MSG_NOSIGNAL, so a pipe write runs with SIGPIPE blocked in the loop's thread
 * and takes back the SIGPIPE it raised (pipe_writev): a gone reader is -EPIPE,
 * a close reason, whatever the process's disposition of SIGPIPE, which lull
 * never changes. An fd opened for reading only refuses sends (as after
 * lull_stream_shutdown) and closes at EOF; one opened for writing only never
 * reads, and, when it is a pipe, watches for its reader's close while nothing
 * is queued (the kernel reports EPOLLERR on the write end: WATCH_HUP), so a
 * stream to a child that died closes with -EPIPE without waiting for the next
 * send. A pair reads one fd (io) and writes the other (wio);
 * lull_stream_shutdown closes the write fd, which is how a pipe's reader learns
 * of the end.
 *
 * A failed write ends the write side only (write_failed): a peer that
 * stopped reading may still be writing (a child that closed its stdin and
 * then writes its output). The queue is released, the write side shut,
 * and reading goes on to the peer's EOF; the write's error is the close
 * reason then (S_WFAIL: the first failure wins).
 *
 * Whose code runs where. Nothing of the user's runs inside lull_endpoint_send:
 * frames written there wait on the done list for the next flush point to be
 * released, and a failure found there is delivered by the event task. At a
 * flush point, in the fd callback and in the event task, user code (frame,
 * drain, close and release callbacks) runs only once the stream's state is
 * consistent, inside a guard: a guard is a stack record that a close marks,
 * so that after the callback the stream is not touched again if it was
 * closed (and perhaps freed or reused). A close inside a frame callback
 * hands the read buffer to the outermost guard, which frees it once the
 * frame's bytes are out of use.
 *
 * Invariants: a frame is on exactly one of queue and done list from the send
 * that accepted it to its release; ep.queued is the bytes on the
 * queue (written frames are off it); BLOCKED implies writable interest;
 * a closed stream holds no fd, no frame, no buffer, no armed timer, and no
 * queued task but the one that runs its close callback (S_CLOSE_CB).
 *
 * One free path: the close callback runs exactly once per stream that was
 * set up, whoever closed it, as its last callback and after every frame
 * the stream held was released (so the owner may free them with it): at
 * once for a failure, the peer's EOF or a failed connect (a callback
 * context, close_now), in a later turn for lull_endpoint_close (S_CLOSE_CB).
 * A stream without one is not touched after its close. A detach
 * (lull_stream_detach) is the one end without a close callback: the fd
 * leaves open, the caller's, and nothing of the stream stays in the loop.
 *
 * The five rows (README, "The contracts"), for a stream:
 *   Trigger                 a send (flush point), socket readiness, a
 *                           resume with buffered frames, a timeout, a
 *                           close by lull_endpoint_close (its callback)
 *   Source of truth         the write queue; the socket; the state bits
 *   Pending-work predicate  queue non-empty, or frames buffered and reading,
 *                           or a close callback owed
 *   Next deadline or retry  none, but the configured connect/idle timeout
 *                           (one timer; the idle one is re-armed lazily, at
 *                           most once per timeout, not per read; stopped
 *                           while reading is paused with nothing queued)
 *   Quiet condition         queue empty: no task queued, no writable
 *                           interest; an idle stream only waits in epoll
 * and for a server: trigger a waiting connection; pending-work predicate
 * out of fds or kernel memory, or another accept error (EPERM) met fewer
 * than ACCEPT_GIVE_UP retries in a row; next retry 100 ms later, only
 * then (never after accept failed for good, which the owner hears once:
 * the socket shut or gone, ENOSYS, or that error at the last retry); quiet
 * otherwise (only the listening socket in epoll, or nothing once failed). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/kcmp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "frame.h"
#include "internal.h"
#include "stream.h"

#ifndef SCM_PIDFD
#define SCM_PIDFD 0x04 /* linux/socket.h, 6.5: a pidfd of the sender */
#endif

/* A stream's own read buffer unless read_size says otherwise: one recv
 * takes what a socket's default receive buffer holds in one go. */
#define READ_SIZE_DEFAULT ((size_t)64 << 10)
/* A framed stream's own read buffer, grown for a frame, shrinks back to its
 * set-up size once it empties if it grew past this many times that: frames
 * up to 16 x read_size (1 MiB by default) keep their room, so a peer that
 * sends them in a row costs no realloc per frame, while a buffer one big
 * frame grew (64 MiB, say) is not held for the life of an idle connection.
 * Bigger frames in a row (S_BIG_RUN) keep theirs from the second on, until
 * a smaller one empties the buffer (emptied_grown). */
#define READ_SHRINK_RATIO 16
/* iovecs per sendmsg: the kernel's limit (IOV_MAX is 1024 on Linux). With
 * a length and a payload buffer per frame that is 512 frames per call. */
#define IOV_CAP 1024
/* Framed streams: a 4-byte big-endian length before each frame. */
#define HDR       LULL__FRAME_HDR
#define FRAME_MAX LULL__FRAME_MAX
/* Connections taken per readable callback: enough to empty a burst, few
 * enough that one busy listener does not hold the slice; the rest are
 * still readable next iteration (level-triggered). */
#define ACCEPT_BATCH 64
/* Retries in a row that any other accept error (EPERM: a seccomp filter
 * refusing every accept4, or a policy refusing one connection; EACCES from
 * a security module; an errno lull does not know) may take before it is
 * taken for good: a passing refusal is over by the next retry, and a
 * filter is not, so ten (a second at retry_ns) tell them apart without
 * polling for ever. */
#define ACCEPT_GIVE_UP 10
/* Pause after EMFILE / ENFILE: fds come back as connections close, on
 * network timescales; 100 ms bounds the added accept delay at 10 retries a
 * second, paid only while the process is out of fds. The connections wait
 * in the kernel's backlog meanwhile (none is dropped, unlike the
 * reserve-fd trick, which accepts and closes them). */
#define ACCEPT_RETRY_NS 100000000u

/* lull_stream.state */
#define S_CONNECTING 0x001u /* connect in progress: writable interest */
#define S_CONNECTED  0x002u /* open: reads and writes allowed */
#define S_READING                                                              \
    0x004u                  /* not paused by lull_stream_read_stop (set        \
                                 from the start, connecting included) */
#define S_BLOCKED    0x008u /* the socket was full: wait for writability */
#define S_FULL       0x010u /* the user saw queued >= high_water: drain owed */
#define S_SHUT_WANT  0x020u /* lull_stream_shutdown: after the queue drains */
#define S_SHUT_DONE  0x040u /* the write side is shut */
#define S_EOF        0x080u /* the peer's EOF was read (on_end set) */
#define S_TCP        0x100u
#define S_OWN_BUF    0x200u  /* rbuf is ours to free */
#define S_DELIVER    0x400u  /* event task: deliver buffered frames */
#define S_CONNECT_CB 0x800u  /* event task: the connect result in `error` */
#define S_FAIL       0x1000u /* event task: close with reason `error` */
#define S_CLOSE_CB   0x2000u /* closed; event task: on_close(`error`) */
/* The read buffer last emptied after a big frame (emptied_grown). */
#define S_BIG_RUN 0x4000u
/* What the fds are (lull_stream_open, lull_stream_open_pair). A socket from
 * connect or accept has S_SOCK | S_OUT_SOCK. */
#define S_SOCK      0x10000u  /* the read fd is a socket: recv */
#define S_OUT_SOCK  0x20000u  /* the write fd is a socket: send(msg) */
#define S_OUT_FIFO  0x40000u  /* the write fd is a pipe: pipe_writev */
#define S_PAIR      0x80000u  /* writes go to wio, a second fd */
#define S_WATCH_HUP 0x100000u /* write-only pipe: watch for EPOLLERR */
/* A write failed (EPIPE, ECONNRESET ...): the write side is done (with
 * S_SHUT_DONE) and `error` holds the failure, the close reason whatever
 * ends the read side later (the first failure wins). */
#define S_WFAIL 0x200000u
/* How the fds are kept from blocking without changing what others share.
 * A socket: MSG_DONTWAIT on every call (no bit). A pipe: RWF_NOWAIT on
 * every call (NOWAIT). Anything else: O_NONBLOCK on the open file
 * description, an entry in the process's list of such fds (NB: nb_take),
 * which clears the flag when the last stream on it lets go (nb_give). IO
 * is the read fd, and the write fd but for a pair; WIO a pair's write fd. */
#define S_IO_NOWAIT  0x400000u
#define S_WIO_NOWAIT 0x800000u
#define S_IO_NB      0x1000000u
#define S_WIO_NB     0x2000000u
/* A single Unix stream socket: descriptors may pass with frames
 * (SCM_RIGHTS). Its reads use recvmsg to take them when it was opened with
 * LULL_STREAM_FDS (which only a Unix socket accepts), else recv. */
#define S_UNIX 0x4000000u
/* Set up and not yet torn down: counted in loop->handles, which keeps
 * lull_loop_free at -EBUSY while the stream holds an fd, watched or not
 * (paused, or kept open after the peer's EOF). */
#define S_COUNTED 0x8000000u
/* Part of another handle (a lull_tls's socket: lull__stream_own), which
 * alone ends it: lull_stream_detach refuses it. */
#define S_OWNED 0x10000000u

/* Sends are refused (frame.c answers -EPIPE, lull_endpoint_writable is false)
 * once the write side is shut or failed: the bit frame.c uses for a gone peer.
 */
#define EP_NO_SEND LULL__EP_PEER_GONE

struct lull__stream_guard {
    lull__stream_guard *outer; /* the guard of the callback around this */
    void *buf;                 /* the read buffer, to free on leaving */
    bool closed;               /* the stream (or server) closed meanwhile */
};

static void guard_enter(lull__stream_guard **top, lull__stream_guard *g) {
    g->outer = *top;
    g->buf = NULL;
    g->closed = false;
    *top = g;
}

/* True when the owner is still open and may be touched. */
static bool guard_leave(lull__stream_guard **top, lull__stream_guard *g) {
    if (g->closed) {
        free(g->buf);
        return false;
    }
    *top = g->outer;
    return true;
}

/* Marks every guard of a closing owner; the outermost gets the buffer. */
static void guards_close(lull__stream_guard **top, void *buf) {
    lull__stream_guard *g = *top, *last = NULL;
    for (; g; g = g->outer) {
        g->closed = true;
        last = g;
    }
    if (last) {
        last->buf = buf;
    } else {
        free(buf);
    }
    *top = NULL;
}

static inline lull_stream *stream_of(lull_endpoint *ep) {
    return LULL_CONTAINER_OF(ep, lull_stream, ep);
}

static bool framed(const lull_stream *s) {
    return !(s->flags & LULL_STREAM_RAW);
}

/* Releases a detached list of frames: touches only the frames. */
static void release_list(lull_frame *f) {
    while (f) {
        lull_frame *next = f->next;
        lull__frame_release(f);
        f = next;
    }
}

static void append(lull_frame **head, lull_frame **tail, lull_frame *f) {
    f->next = NULL;
    if (*tail) {
        (*tail)->next = f;
    } else {
        *head = f;
    }
    *tail = f;
}

/* ---------------------------------------------------- passing fds */

/* Descriptors passed with frames over a Unix socket (SCM_RIGHTS).
 *
 * Sending: lull_stream_send_fds dups the caller's fds into a batch that
 * names its frame; write_out sends that frame alone, from its first byte,
 * in one sendmsg with the batch as SCM_RIGHTS, so the kernel attaches the
 * fds to a socket buffer holding only that frame's bytes, its header
 * first. Once sendmsg took a byte the kernel holds its own references and
 * the copies are closed.
 *
 * Receiving: a Unix stream's recvmsg stops after the buffer that carried
 * fds, so the read that brings them ends inside the frame they were sent
 * with. A batch records the read buffer offset of that read's last byte
 * (`at`); the frame that holds it owns the batch. deliver_frames opens the
 * batches of the frame it hands over (lull_stream_take_fds) and closes
 * what was not taken when on_frame returns. A raw stream's batch goes with
 * the read itself. Every received fd is handed over or closed: by that
 * drop, or by teardown for frames never delivered.
 *
 * Only a stream opened with LULL_STREAM_FDS reads with recvmsg: recv
 * costs ~250 ns less a call (no msghdr to copy in and out), and on a
 * stream that reads with it the kernel closes any fd that arrives.
 *
 * One allocation per batch, either way: passing fds is rare next to the
 * frames a stream carries, and a stream that never passes one pays a
 * NULL pointer (s->fds). */
typedef struct fd_batch {
    struct fd_batch *next;
    lull_frame *frame; /* sending: the frame the fds go with */
    size_t at;         /* receiving: see above; compaction moves it */
    int n;             /* fds in fd[] */
    int taken;         /* receiving: fd[0..taken) were handed over */
    int fd[];
} fd_batch;

struct lull__stream_fds {
    fd_batch *out, *out_tail; /* copies waiting to be sent, in send order */
    fd_batch *in, *in_tail;   /* received, not yet handed over, in order */
    size_t limit;             /* inside on_frame: batches with at < limit
                                 are the frame's */
    bool delivering;          /* on_frame is running: take_fds may take */
    int lost;                 /* receiving: a framed read's fds were dropped
                                 (EMFILE ...): the close reason, or 0 */
    size_t lost_at;           /* ... that read's last byte (the frame that
                                 holds it fails; compaction moves it) */
};

/* SCM_MAX_FD: the most fds the kernel passes in one message. */
#define FDS_MAX 253

static void batch_free(fd_batch *b) {
    for (int i = b->taken; i < b->n; i++)
        close(b->fd[i]);
    free(b);
}

static struct lull__stream_fds *fds_get(lull_stream *s) {
    if (!s->fds) s->fds = calloc(1, sizeof *s->fds);
    return s->fds;
}

static void batch_push(fd_batch **head, fd_batch **tail, fd_batch *b) {
    b->next = NULL;
    if (*tail) {
        (*tail)->next = b;
    } else {
        *head = b;
    }
    *tail = b;
}

/* Closes the received fds of the frame (or raw read) that ends before
 * buffer offset limit: not taken inside on_frame, or never delivered. */
static void fds_drop_in(lull_stream *s, size_t limit) {
    struct lull__stream_fds *f = s->fds;
    if (!f) return;
    while (f->in && f->in->at < limit) {
        fd_batch *b = f->in;
        f->in = b->next;
        if (!f->in) f->in_tail = NULL;
        batch_free(b);
    }
}

/* Queued frames were discarded (a failed write, a close): their copies go. */
static void fds_drop_out(lull_stream *s) {
    struct lull__stream_fds *f = s->fds;
    if (!f) return;
    while (f->out) {
        fd_batch *b = f->out;
        f->out = b->next;
        batch_free(b);
    }
    f->out_tail = NULL;
}

/* Teardown: every fd held either way is closed. */
static void fds_free(lull_stream *s) {
    if (!s->fds) return;
    fds_drop_out(s);
    fds_drop_in(s, SIZE_MAX);
    free(s->fds);
    s->fds = NULL;
}

/* ------------------------------------------------------------ teardown */

/* The descriptions lull keeps non-blocking for its streams: one entry per
 * stream fd that relies on O_NONBLOCK (a tty, a FIFO, an older kernel's
 * pipe), under one lock, since streams on several loops may share a
 * description (stdin and stdout of one terminal are one description). The
 * flag is cleared when the last of the process's streams on a description
 * lets go of it, and only if lull set it: another stream of lull's may
 * still need it, and the flag is the owner's if it was there first. An
 * entry is made at set-up and dropped at teardown (never on a hot path);
 * after fork() the child's copies of the parent's entries never clear
 * anything (the parent's streams still use the description). */
typedef struct nb_entry {
    const lull_io *key; /* &s->io or &s->wio of the stream */
    int fd;
    dev_t dev; /* the file (a description's, not its identity) */
    ino_t ino;
    pid_t pid; /* the process that made the entry */
    bool set;  /* lull set the flag: the last entry on it clears it */
} nb_entry;

static pthread_mutex_t nb_lock = PTHREAD_MUTEX_INITIALIZER;
static nb_entry *nb_list; /* under nb_lock */
static size_t nb_len, nb_cap;
static pthread_once_t nb_once = PTHREAD_ONCE_INIT;

/* A fork() while another thread holds nb_lock would leave the child's copy
 * locked for ever: the fork waits for the lock (held only for a few system
 * calls at a stream's set-up or teardown) and both sides release it. */
static void nb_prepare(void) {
    pthread_mutex_lock(&nb_lock);
}

static void nb_after(void) {
    pthread_mutex_unlock(&nb_lock);
}

static void nb_init(void) {
    pthread_atfork(nb_prepare, nb_after, nb_after);
}

/* Whether fd and e's fd are one open file description: kcmp says so
 * exactly; where it is missing (a kernel without CONFIG_KCMP), the same
 * file is taken for the same description, which can only keep a flag set
 * longer, never clear one another stream needs. */
static bool nb_shared(const nb_entry *e, int fd, const struct stat *st) {
    if (e->dev != st->st_dev || e->ino != st->st_ino) return false;
    long r = syscall(SYS_kcmp, (pid_t)getpid(), (pid_t)getpid(), KCMP_FILE,
                     e->fd, fd);
    return r <= 0; /* 0: the same; an error: assume so */
}

/* The stream's fd (key) needs O_NONBLOCK: sets it unless it is set, and
 * records whether lull did. 0 or a negative errno. */
static int nb_take(const lull_io *key, int fd) {
    struct stat st;
    if (fstat(fd, &st) < 0) return -errno;
    pthread_once(&nb_once, nb_init);
    int rc = 0;
    pthread_mutex_lock(&nb_lock);
    if (nb_len == nb_cap) {
        size_t cap = nb_cap ? nb_cap * 2 : 8;
        nb_entry *l = realloc(nb_list, cap * sizeof *l);
        if (!l) {
            rc = -ENOMEM;
            goto out;
        }
        nb_list = l;
        nb_cap = cap;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 ||
        (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)) {
        rc = -errno;
        goto out;
    }
    nb_list[nb_len++] =
        (nb_entry){key, fd, st.st_dev, st.st_ino, getpid(), !(fl & O_NONBLOCK)};
out:
    pthread_mutex_unlock(&nb_lock);
    return rc;
}

/* The stream lets go of its fd (key), which is still open: the flag is
 * cleared if lull set it and no other stream of this process is on the
 * description; otherwise the duty passes to one that is. */
static void nb_give(const lull_io *key) {
    pid_t me = getpid();
    pthread_mutex_lock(&nb_lock);
    size_t i = 0;
    while (i < nb_len && nb_list[i].key != key)
        i++;
    if (i < nb_len) {
        nb_entry e = nb_list[i];
        nb_list[i] = nb_list[--nb_len];
        struct stat st;
        /* A file other than the one recorded: the fd was closed under the
         * stream and its number reused; that description is not ours. */
        if (e.set && e.pid == me && fstat(e.fd, &st) == 0 &&
            st.st_dev == e.dev && st.st_ino == e.ino) {
            size_t j = 0;
            while (j < nb_len &&
                   (nb_list[j].pid != me || !nb_shared(&nb_list[j], e.fd, &st)))
                j++;
            if (j < nb_len) {
                nb_list[j].set = true;
            } else {
                int fl = fcntl(e.fd, F_GETFL);
                if (fl >= 0 && (fl & O_NONBLOCK))
                    fcntl(e.fd, F_SETFL, fl & ~O_NONBLOCK);
            }
        }
        if (nb_len == 0) {
            free(nb_list);
            nb_list = NULL;
            nb_cap = 0;
        }
    }
    pthread_mutex_unlock(&nb_lock);
}

/* A pair's write fd: stopped and closed (its reader sees EOF). */
static void close_wio(lull_stream *s) {
    lull_io_stop(&s->wio);
    if (s->state & S_WIO_NB) nb_give(&s->wio);
    s->state &= ~S_WIO_NB;
    if (s->wio.fd >= 0) close(s->wio.fd);
    s->wio.fd = -1;
}

/* The struct is the owner's again: out of the process's set of handles
 * in use, where it stayed from its set-up through its teardown to here,
 * right before its close callback (or at its teardown when none is owed),
 * so that a set-up on any loop asks the set alone whether a loop still
 * holds it (lull__stream_live). */
static void release_struct(lull_stream *s) {
    lull__inuse_remove(s);
}

/* Closes the stream's kernel side and detaches everything it holds;
 * returns its frames (written ones first), for the caller to release once
 * it is done with the stream. Safe from any state. */
static lull_frame *teardown(lull_stream *s) {
    lull_io_stop(&s->io);
    if (s->state & S_IO_NB) nb_give(&s->io);
    if (s->io.fd >= 0) close(s->io.fd);
    s->io.fd = -1;
    if (s->state & S_PAIR) close_wio(s);
    lull_task_cancel(&s->flush);
    lull_task_cancel(&s->event);
    lull_timer_stop(&s->timer);
    lull_frame *list = s->done;
    if (s->done_tail) {
        s->done_tail->next = s->head;
    } else {
        list = s->head;
    }
    s->head = s->tail = s->done = s->done_tail = NULL;
    s->head_done = 0;
    fds_free(s);
    guards_close(&s->guard, (s->state & S_OWN_BUF) ? s->rbuf : NULL);
    s->rbuf = NULL;
    s->rcap = s->rstart = s->rend = 0;
    /* Still in the set of handles in use: see release_struct. */
    if (s->state & S_COUNTED) s->loop->handles--;
    s->state = 0;
    s->ep.flags |= LULL__EP_CLOSED;
    s->ep.queued = 0;
    return list;
}

/* A teardown no close callback follows (a failed open, a detach). */
static lull_frame *teardown_untold(lull_stream *s) {
    lull_frame *list = teardown(s);
    release_struct(s);
    return list;
}

/* GCC 12's -Wdangling-pointer (an error here: -Werror) takes the guard,
 * a local whose address stays in s->guard for the callbacks, as left
 * behind on the path where a callback set the stream up again: there
 * s->guard is no longer &g, which the warning cannot see. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdangling-pointer"
#endif

/* A close the transport made (a failure, the peer's EOF, a failed
 * connect), in a callback context: teardown, then `told` (the connect
 * callback of a failed connect), then every frame back to its owner (the
 * extra list `written` first: frames a flush took off the queue), then the
 * close callback, the last. So an owner may free in its close callback
 * whatever it embedded, frames included. Until then the struct is the
 * library's: a guard tells whether a callback before it set the stream up
 * again all the same (then it is another stream, whose close callback is
 * not ours to call; debug builds say so). Without a close callback the
 * stream is not touched after teardown. */
static void close_now(lull_stream *s, int reason, lull_frame *written,
                      lull_connect_fn told) {
    if (s->state & S_WFAIL) reason = s->error; /* the first failure */
    bool owed = s->ep.on_close != NULL;
    lull_frame *list = teardown(s);
    if (!owed) {
        release_struct(s);
        if (told) told(s, reason);
        release_list(written);
        release_list(list);
        return;
    }
    lull__stream_guard g;
    guard_enter(&s->guard, &g);
    if (told) told(s, reason);
    release_list(written);
    release_list(list);
    bool same = s->guard == &g; /* a new setup zeroes the guard */
    LULL_ASSERT(same, "lull: a stream set up again before its close callback "
                      "ran: reuse it in on_close");
    if (!same) return;
    s->guard = g.outer;
    release_struct(s);
    if (s->ep.on_close) s->ep.on_close(&s->ep, reason);
}
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
#pragma GCC diagnostic pop
#endif

/* The transport failed (or the peer ended it): the stream closes and its
 * close callback, the last, gets reason. A callback context. */
static void fail_now(lull_stream *s, int reason) {
    if (s->ep.flags & LULL__EP_CLOSED) return;
    close_now(s, reason, NULL, NULL);
}

/* A failure found where no callback may run (inside lull_endpoint_send): refuse
 * sends now, deliver the close in a later turn. */
static void fail_later(lull_stream *s, int reason) {
    if (s->state & S_FAIL) return;
    s->state |= S_FAIL;
    if (!(s->state & S_WFAIL)) s->error = reason; /* the first failure */
    s->ep.flags |= EP_NO_SEND;
    lull_io_stop(&s->io);
    lull_task_post(s->loop, &s->event);
}

/* ------------------------------------------------------------- writing */

/* The interest the kernel should hold for s. */
static void set_interest(lull_stream *s, lull_io *io, int want) {
    if (want == io->events) return;
    if (!want) {
        lull_io_stop(io);
        return;
    }
    int rc = lull_io_start(io, want);
    if (rc < 0) fail_later(s, rc);
}

/* The interest s's fd should have; a pair's writes are its write fd's
 * (*wio_want, when not NULL). */
static int io_wanted(const lull_stream *s, int *wio_want) {
    int want = 0;
    if (s->state & (S_CONNECTING | S_BLOCKED)) want |= LULL_WRITABLE;
    if ((s->state & (S_CONNECTED | S_READING | S_EOF)) ==
        (S_CONNECTED | S_READING))
        want |= LULL_READABLE;
    if (s->state & S_PAIR) { /* reads on io, writes on wio */
        if (wio_want) *wio_want = want & LULL_WRITABLE;
        want &= ~LULL_WRITABLE;
    } else if ((s->state & S_WATCH_HUP) && !(want & LULL_WRITABLE)) {
        /* A write-only pipe end is never readable: this interest only
         * hears the EPOLLERR of the reader's close. */
        want |= LULL_READABLE;
    }
    return want;
}

static void update_io(lull_stream *s) {
    if (s->state & S_FAIL) return;
    int wio_want = 0, want = io_wanted(s, &wio_want);
    if (s->state & S_PAIR) set_interest(s, &s->wio, wio_want);
    set_interest(s, &s->io, want);
}

/* Takes w written bytes off the queue; finished frames go to the done list
 * (done/done_tail), their payload off ep.queued. A frame its owner rewrote
 * shorter in flight than what was written of it (stream_send fails the
 * stream) needs nothing more: without the floor, `need` wrapped, the frame
 * never left the queue, and the close's last write spun. */
static void advance(lull_stream *s, size_t w, lull_frame **done,
                    lull_frame **done_tail) {
    size_t hl = framed(s) ? HDR : 0;
    while (s->head) {
        lull_frame *f = s->head;
        size_t whole = hl + f->len;
        size_t need = whole > s->head_done ? whole - s->head_done : 0;
        if (w < need) {
            s->head_done += w;
            return;
        }
        w -= need;
        s->head_done = 0;
        s->head = f->next;
        if (!s->head) s->tail = NULL;
        s->ep.queued = whole < s->ep.queued ? s->ep.queued - whole : 0;
        append(done, done_tail, f);
    }
}

/* A writev to a pipe, which raises SIGPIPE in this thread when the reader
 * is gone: MSG_NOSIGNAL is for sockets only, and SIGPIPE's default action
 * ends the process. lull leaves the process's disposition alone (it is the
 * program's, and a handler may be installed after any check) and blocks
 * SIGPIPE in this thread around the write instead; a SIGPIPE the write
 * raised is then pending for this thread, and sigtimedwait takes it back
 * before the old mask returns. One that was pending already (this thread
 * blocked SIGPIPE itself, and one had come) is left alone: it is not ours.
 * Two sigprocmask calls per writev, and a writev carries a whole batch. */
static ssize_t pipe_writev(int fd, const struct iovec *iov, int n,
                           bool nowait) {
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    bool blocked = sigismember(&old, SIGPIPE);
    bool pending_before = false;
    if (blocked) {
        sigset_t pending;
        pending_before =
            sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE);
    }
    ssize_t w =
        nowait ? pwritev2(fd, iov, n, -1, RWF_NOWAIT) : writev(fd, iov, n);
    int err = errno;
    if (w < 0 && err == EPIPE && !pending_before) {
        static const struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
        }
    }
    if (!blocked) pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return w;
}

/* Whether a preadv2 or pwritev2 with RWF_NOWAIT failed for the flag or the
 * call rather than the pipe: EOPNOTSUPP (a FIFO opened by path, whose file
 * lacks FMODE_NOWAIT; also glibc's answer for a kernel or seccomp filter
 * without the call, ENOSYS) or EPERM (a seccomp filter that predates the
 * calls, Docker's and systemd's answer to what they do not know). A pipe's
 * read or write has no EPERM of its own; a security module that refuses the
 * fd refuses the plain call the fallback makes as well. */
static bool nowait_unsupported(int err) {
    return err == EOPNOTSUPP || err == EPERM || err == ENOSYS;
}

/* The kernel refused RWF_NOWAIT on fd (nowait_unsupported): fall back to
 * O_NONBLOCK on its description, given back at close. 0, or -1 with errno
 * set. */
static int nowait_refused(lull_stream *s, int fd, uint32_t nowait,
                          uint32_t nb) {
    s->state &= ~nowait;
    int rc = nb_take(nb == S_IO_NB ? &s->io : &s->wio, fd);
    if (rc < 0) {
        errno = -rc;
        return -1;
    }
    s->state |= nb;
    return 0;
}

/* One write of the queue's iovecs to the stream's write fd, with the
 * batch b's fds attached when b is not NULL (a Unix socket). */
static ssize_t out_write(lull_stream *s, struct iovec *iov, int n,
                         const fd_batch *b) {
    bool pair = s->state & S_PAIR;
    int fd = pair ? s->wio.fd : s->io.fd;
    if (s->state & S_OUT_SOCK) {
        /* One buffer and no fds, what a request-response stream writes
         * most: send, which does not copy in a msghdr and an iovec array
         * (sendmsg cost ~100 ns more per call on a Unix socket). */
        if (n == 1 && !b)
            return send(fd, iov[0].iov_base, iov[0].iov_len,
                        MSG_NOSIGNAL | MSG_DONTWAIT);
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        union {
            char buf[CMSG_SPACE(sizeof(int) * FDS_MAX)];
            struct cmsghdr align;
        } ctl;
        if (b) {
            size_t fl = sizeof(int) * (size_t)b->n;
            /* The padding CMSG_SPACE adds goes to the kernel too: zeroed,
             * not whatever the stack held. */
            memset(ctl.buf, 0, CMSG_SPACE(fl));
            msg.msg_control = ctl.buf;
            msg.msg_controllen = CMSG_SPACE(fl);
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(fl);
            memcpy(CMSG_DATA(c), b->fd, fl);
        }
        return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    uint32_t nowait = pair ? S_WIO_NOWAIT : S_IO_NOWAIT;
    if (s->state & S_OUT_FIFO) {
        ssize_t w = pipe_writev(fd, iov, n, s->state & nowait);
        if (w >= 0 || !nowait_unsupported(errno) || !(s->state & nowait))
            return w;
        if (nowait_refused(s, fd, nowait, pair ? S_WIO_NB : S_IO_NB) < 0)
            return -1;
        return pipe_writev(fd, iov, n, false);
    }
    return writev(fd, iov, n);
}

/* The fds held for the framed stream's frame that holds buffer offset
 * `at`, with the bytes up to `end` read: those of the batches from that
 * frame's first byte on (all before `at`, the list being in read order). */
static int fds_of_frame(const lull_stream *s, size_t at, size_t end) {
    size_t p = s->rstart; /* the frame's start: walk the headers to it */
    while (end - p >= HDR) {
        size_t next = p + HDR + lull__frame_len(s->rbuf + p);
        if (at < next) break;
        p = next;
    }
    int n = 0;
    for (const fd_batch *b = s->fds ? s->fds->in : NULL; b; b = b->next)
        if (b->at >= p) n += b->n;
    return n;
}

/* A read from a Unix socket, which may bring fds: they become a batch (see
 * "passing fds"), O_CLOEXEC from the kernel on. Fds the kernel dropped
 * (MSG_CTRUNC: the receiver out of fds, or a peer sending more than fit)
 * cannot be given to their frame: EMFILE, the close reason, after closing
 * the ones that did arrive. The read keeps its bytes (lost, lost_at): a
 * framed stream's frames before that one still arrive (deliver_frames
 * closes the stream at the frame), and a raw read is delivered, then the
 * stream closes (read_some): the kernel glues the bytes sent before the
 * fds, with none, to the read that brings them. */
static ssize_t unix_read(lull_stream *s, unsigned char *at, size_t room) {
    /* Room for the sender's credentials too: a socket with SO_PASSCRED
     * (the program's, or inherited from a listener, as systemd's
     * PassCredentials=yes sets it) gets them with every read, ahead of
     * the fds, which would otherwise be cut short (MSG_CTRUNC) past 249
     * and taken for the reader being out of fds. */
    /* And for a pidfd of the sender (SCM_PIDFD, with SO_PASSPIDFD, which
     * a listener hands down as it does SO_PASSCRED): the kernel installs
     * it in this process with every read, so it is closed here, or each
     * read would leak one. */
    union {
        char buf[CMSG_SPACE(sizeof(int) * FDS_MAX) +
                 CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {at, room};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = sizeof ctl.buf};
    ssize_t n = recvmsg(s->io.fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) return n;
    int got[FDS_MAX], k = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET) continue;
        bool pidfd = c->cmsg_type == SCM_PIDFD;
        if (c->cmsg_type != SCM_RIGHTS && !pidfd) continue;
        int m = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < m; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (pidfd) {
                if (fd >= 0) close(fd); /* not the peer's to pass */
            } else if (k < FDS_MAX) {
                got[k++] = fd;
            } else {
                close(fd);
            }
        }
    }
    int err = 0;
    fd_batch *b = NULL;
    size_t last = (size_t)(at - s->rbuf) + (size_t)n - 1; /* when n > 0 */
    if (msg.msg_flags & MSG_CTRUNC) {
        err = EMFILE;
    } else if (k > 0 && n > 0 && framed(s) &&
               fds_of_frame(s, last, last + 1) + k > FDS_MAX) {
        /* A peer attaching fds to every byte of one long frame would have
         * them all held until the frame ends, up to the process's fd
         * limit, starving its other streams and accepts. A frame carries
         * at most FDS_MAX (all one sendmsg takes, and lull_stream_send_fds
         * attaches): past that the peer is not speaking the protocol. A raw
         * read's batch goes with the read, so nothing accumulates there. */
        err = ETOOMANYREFS;
    } else if (k > 0 && n > 0) {
        b = malloc(sizeof *b + sizeof(int) * (size_t)k);
        if (!b || !fds_get(s)) err = ENOMEM;
    }
    if (err || (k > 0 && n == 0)) {
        for (int i = 0; i < k; i++)
            close(got[i]);
        free(b);
        if (!err) return n;
        if (n > 0 && fds_get(s)) {
            s->fds->lost = err;
            s->fds->lost_at = last;
            return n;
        }
        errno = err;
        return -1;
    }
    if (b) {
        b->frame = NULL;
        b->at = last;
        b->n = k;
        b->taken = 0;
        memcpy(b->fd, got, sizeof(int) * (size_t)k);
        batch_push(&s->fds->in, &s->fds->in_tail, b);
    }
    return n;
}

/* One read from the stream's read fd, never blocking (see S_IO_NOWAIT). */
static ssize_t in_read(lull_stream *s, void *at, size_t room) {
    int fd = s->io.fd;
    if (s->flags & LULL_STREAM_FDS) return unix_read(s, at, room);
    if (s->state & S_SOCK) return recv(fd, at, room, MSG_DONTWAIT);
    if (s->state & S_IO_NOWAIT) {
        struct iovec iov = {at, room};
        ssize_t n = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
        if (n >= 0 || !nowait_unsupported(errno)) return n;
        if (nowait_refused(s, fd, S_IO_NOWAIT, S_IO_NB) < 0) return -1;
    }
    return read(fd, at, room);
}

/* after_send's verdicts besides 0 and -errno. */
#define SENT_ALL   1 /* every byte offered was taken: write on */
#define SENT_AGAIN 2 /* EINTR: the same write again */

/* Accounts for one write of `total` queued bytes that returned w, fb's fds
 * with it (or NULL): SENT_ALL, SENT_AGAIN, 0 when the socket is full
 * (BLOCKED, what was taken off the queue), or -errno for a close. */
static inline int after_send(lull_stream *s, ssize_t w, size_t total,
                             fd_batch *fb, lull_frame **done,
                             lull_frame **done_tail) {
    s->writes++;
    if (w < 0) {
        if (errno == EINTR) return SENT_AGAIN;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            s->state |= S_BLOCKED;
            return 0;
        }
        return -errno;
    }
    s->bytes_written += (uint64_t)w;
    if (s->idle_ns) s->active_ns = lull_loop_now(s->loop);
    if (fb && w > 0) { /* the kernel holds them now */
        s->fds->out = fb->next;
        if (!fb->next) s->fds->out_tail = NULL;
        batch_free(fb);
    }
    advance(s, (size_t)w, done, done_tail);
    if ((size_t)w < total) {
        s->state |= S_BLOCKED;
        return 0;
    }
    return SENT_ALL;
}

/* Writes what the kernel takes, IOV_CAP buffers per sendmsg, until the
 * queue is empty or a write comes up short (the socket is full: BLOCKED).
 * 0, or a negative errno the caller turns into a close. */
static int write_out(lull_stream *s, lull_frame **done,
                     lull_frame **done_tail) {
    struct iovec iov[IOV_CAP];
    uint32_t hdr[IOV_CAP]; /* zero-length frames take one iovec each */
    bool with_hdr = framed(s);
    while (s->head) {
        int n = 0, k = 0;
        size_t total = 0, off = s->head_done;
        /* A frame with fds leaves alone, from its first byte (see "passing
         * fds"): a batch stops before it, and it is a batch of its own. */
        fd_batch *fb = s->fds ? s->fds->out : NULL;
        lull_frame *with_fds = fb ? fb->frame : NULL;
        for (lull_frame *f = s->head; f && n <= IOV_CAP - 2; f = f->next) {
            if (f == with_fds && f != s->head) break;
            if (with_hdr) {
                if (off < HDR) {
                    hdr[k] = htonl((uint32_t)f->len);
                    iov[n].iov_base = (char *)&hdr[k] + off;
                    iov[n].iov_len = HDR - off;
                    total += HDR - off;
                    n++;
                    k++;
                    off = 0;
                } else {
                    off -= HDR;
                }
            }
            if (f->len > off) {
                iov[n].iov_base = (char *)f->bytes + off;
                iov[n].iov_len = f->len - off;
                total += f->len - off;
                n++;
            }
            off = 0;
            if (f == with_fds) break;
        }
        if (with_fds != s->head) fb = NULL;
        if (total == 0) { /* zero-length frames only */
            advance(s, 0, done, done_tail);
            continue;
        }
        int r =
            after_send(s, out_write(s, iov, n, fb), total, fb, done, done_tail);
        if (r != SENT_ALL && r != SENT_AGAIN) return r;
    }
    s->state &= ~S_BLOCKED;
    return 0;
}

/* write_out for what a request-response socket writes each turn: one raw
 * frame from its first byte, no fds. One send, without write_out's iovec
 * arrays (20 KiB of stack) and its walk of the queue; anything else, and
 * an interrupted send, goes to write_out. flush_now's alone, on a stream
 * not BLOCKED: a full send leaves that flag as it found it. */
static int write_queue(lull_stream *s, lull_frame **done,
                       lull_frame **done_tail) {
    lull_frame *f = s->head;
    if (f && f == s->tail && !s->head_done && f->len && !s->fds &&
        (s->state & (S_OUT_SOCK | S_PAIR)) == S_OUT_SOCK && !framed(s)) {
        ssize_t w =
            send(s->io.fd, f->bytes, f->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        int r = after_send(s, w, f->len, NULL, done, done_tail);
        if (r != SENT_AGAIN) return r == SENT_ALL ? 0 : r;
    }
    return write_out(s, done, done_tail);
}

/* After a write that found s unblocked: whether after_write has nothing
 * to do. Its queue is empty and no shutdown waits, so the write side wants
 * nothing, and its fd is not watched for writability, so the interest
 * update_io would set is the one the kernel holds already: every change
 * of the read side's state sets the interest itself (asserted). */
static bool written_as_watched(const lull_stream *s) {
    bool as_watched = !s->head && !(s->state & (S_SHUT_WANT | S_PAIR)) &&
                      !(s->io.events & LULL_WRITABLE);
    LULL_ASSERT(!as_watched || (s->state & S_FAIL) ||
                    io_wanted(s, NULL) == s->io.events,
                "lull: a stream's state changed without its interest");
    return as_watched;
}

/* Ends the write side: the peer reads EOF. A socket is shut (SHUT_WR),
 * which reaches the peer whoever else holds it; a pair's write fd is
 * closed too, which is what ends a pipe, and a pair's socket is shut first
 * because its close alone ends nothing while another fd holds the socket
 * (an inetd-style service's stdin and stdout are one socket). A single fd
 * of another kind cannot be half-closed. */
static void shut_write(lull_stream *s) {
    if (s->state & S_PAIR) {
        if ((s->state & S_OUT_SOCK) && s->wio.fd >= 0)
            shutdown(s->wio.fd, SHUT_WR);
        close_wio(s);
    } else if (s->state & S_OUT_SOCK) {
        shutdown(s->io.fd, SHUT_WR);
    }
}

/* After a write: shut the write side once the queue is empty, if asked. */
static void after_write(lull_stream *s) {
    if (!s->head && (s->state & S_SHUT_WANT) && !(s->state & S_SHUT_DONE)) {
        s->state |= S_SHUT_DONE;
        shut_write(s); /* a failure shows on the read side */
        /* A single fd of another kind cannot be half-closed: written out,
         * it is done; a write-only one closes below (S_EOF). */
        /* Both ways done (on_end kept it open): nothing more can happen. */
        if (s->state & S_EOF) fail_later(s, 0);
    }
    update_io(s);
}

/* A write failed with err: the write side ends, and only it. Reading goes
 * on to the peer's EOF, because a peer that stopped reading may still be
 * writing: a child that exits after its first line (head -n 1) closes its
 * stdin before it flushes its stdout, and a pipe or socketpair to it fails
 * our next write while its output is on its way. What was queued can never
 * be written: it joins the done list (released where user code may run),
 * and err becomes the close reason whatever ends the read side (S_WFAIL).
 * True when the read side is done already: the stream is to close now. */
static bool write_failed(lull_stream *s, int err, lull_frame **done,
                         lull_frame **done_tail) {
    s->state |= S_WFAIL | S_SHUT_DONE;
    /* S_FULL stays: a drain owed is paid (flush_now), so a producer that
     * stopped to wait for it hears of the failure (its next send is
     * -EPIPE) instead of waiting for good. */
    s->state &= ~(S_BLOCKED | S_SHUT_WANT);
    s->error = err;
    s->ep.flags |= EP_NO_SEND;
    while (s->head) {
        lull_frame *f = s->head;
        s->head = f->next;
        append(done, done_tail, f);
    }
    s->tail = NULL;
    s->head_done = 0;
    s->ep.queued = 0;
    fds_drop_out(s);
    /* Ended as a shutdown ends it: a peer that is still there (the write
     * failed for another reason than its going) reads EOF. */
    shut_write(s);
    if (s->state & S_EOF) return true;
    /* The fd was closed behind the stream (EBADF, or ENOTSOCK once its
     * number went to a file): when it is the read fd too, no read will
     * ever end the read side (a closed socket leaves epoll with its last
     * reference), so the stream would wait for ever. It closes now. */
    if (!(s->state & S_PAIR) && (err == -EBADF || err == -ENOTSOCK))
        return true;
    update_io(s);
    return false;
}

/* Inside lull_endpoint_send, the queue reached high_water: write now. Nothing
 * of the user's may run here: written frames wait for the next flush point. */
static void flush_in_send(lull_stream *s) {
    int err = write_out(s, &s->done, &s->done_tail);
    if (err) {
        if (write_failed(s, err, &s->done, &s->done_tail)) {
            fail_later(s, err);
            return;
        }
    } else {
        after_write(s);
    }
    if (s->done) lull__at_flush(s->loop, &s->flush);
}

/* A stream inherited through fork() (lull__stream_inherited), in the child
 * that called lull_loop_fork: the frames queued before the fork are in
 * both copies of the queue, and are the parent's to write, so the child's
 * first write (a flush, a send, send_fds, try_write, shutdown) releases
 * them unwritten (at the next flush point: no user code here) and then the
 * stream is the child's. A close in the copy writes nothing
 * (stream_close). */
static void adopt(lull_stream *s) {
    s->pid = (int)s->loop->pid;
    while (s->head) {
        lull_frame *f = s->head;
        s->head = f->next;
        size_t cost = lull__frame_cost(&s->ep, f->len);
        s->ep.queued = cost < s->ep.queued ? s->ep.queued - cost : 0;
        append(&s->done, &s->done_tail, f);
    }
    s->tail = NULL;
    s->head_done = 0;
    fds_drop_out(s);
    s->state &= ~S_BLOCKED;
    /* A shutdown the parent asked for waits for the parent's queue: the
     * copy's write side is simply over, the socket left as it is. */
    if (s->state & S_SHUT_WANT) {
        s->state = (s->state & ~S_SHUT_WANT) | S_SHUT_DONE;
        /* The peer's EOF came first (read_eof kept the stream open for
         * the queue it found, the parent's): both ways are done, as
         * after_write ends a shutdown that follows an EOF. No user code
         * here (a send may be the caller): the close comes later. */
        if (s->state & S_EOF) fail_later(s, 0);
    }
    if (s->done) lull__at_flush(s->loop, &s->flush);
    update_io(s);
}

/* A flush point, or the socket became writable: write, then release what
 * was written and run the drain callback if the queue fell below
 * high_water after the user saw it full. False when the stream closed. */
static bool flush_now(lull_stream *s) {
    if (lull__stream_inherited(s)) adopt(s);
    lull_frame *done = s->done, *done_tail = s->done_tail;
    s->done = s->done_tail = NULL;
    if ((s->state & (S_CONNECTED | S_BLOCKED | S_FAIL)) == S_CONNECTED) {
        int err = write_queue(s, &done, &done_tail);
        if (err && write_failed(s, err, &done, &done_tail)) {
            close_now(s, err, done, NULL); /* open here: S_CONNECTED */
            return false;
        }
        if (!err && !written_as_watched(s)) after_write(s);
    }
    bool drain = (s->state & S_FULL) && s->ep.queued < s->ep.high_water &&
                 !(s->ep.flags & LULL__EP_CLOSED) &&
                 (!(s->ep.flags & EP_NO_SEND) || (s->state & S_WFAIL));
    if (drain) s->state &= ~S_FULL;
    if (!done && !drain) return true;
    lull__stream_guard g;
    guard_enter(&s->guard, &g);
    release_list(done);
    if (drain && !g.closed && s->ep.on_drain) s->ep.on_drain(&s->ep);
    return guard_leave(&s->guard, &g);
}

static void flush_task(lull_task *t) {
    flush_now(LULL_CONTAINER_OF(t, lull_stream, flush));
}
LULL__OWN_NAME(flush_task, "lull_stream write flush", lull_stream, flush);

/* The idle clock starts now: at a resume, or at a send that starts the
 * queue of a paused stream. The timer, stopped by on_timer on a stream
 * paused with nothing to write, is armed again: only then, so a paused
 * stream's sends pay a timer arm at most once per pause that outlasted
 * the timeout, and otherwise a store of the cached now. */
static void idle_restart(lull_stream *s) {
    s->active_ns = lull_loop_now(s->loop);
    if ((s->state & S_CONNECTED) && !lull_timer_active(&s->timer))
        lull_timer_start(&s->timer, s->idle_ns, 0);
}

static void stream_send(lull_endpoint *ep, lull_frame *frame) {
    lull_stream *s = stream_of(ep);
    LULL_ASSERT_LOOP_THREAD(s->loop);
    if (lull__stream_inherited(s))
        adopt(s); /* before the frame joins the queue */
    /* Paused, the idle clock runs only while writes wait (on_timer): from
     * the send that starts the queue. */
    if (LULL_UNLIKELY(s->idle_ns && !s->head && !(s->state & S_READING)))
        idle_restart(s);
    /* A frame still queued (or written, not yet released) came back only
     * because its owner rewrote it in flight (in_flight cleared), and the
     * send cut its link: it can only be the last of its list, and linking
     * it again would make the queue a cycle. Refused as a frame in flight
     * is (-EBUSY), but accepted already: the stream fails, as past
     * max_queued, and the frame stays queued once. */
    if (LULL_UNLIKELY(frame == s->tail || frame == s->done_tail)) {
        ep->flags |= LULL__EP_PEER_GONE;
        fail_later(s, -EBUSY);
        return;
    }
    lull__frame_check_unqueued(s->head, frame);
    lull__frame_check_unqueued(s->done, frame);
    append(&s->head, &s->tail, frame);
    if ((s->state & (S_CONNECTED | S_BLOCKED)) == S_CONNECTED) {
        if (ep->queued >= ep->high_water) {
            flush_in_send(s);
        } else {
            lull__at_flush(s->loop, &s->flush);
        }
    }
    if (ep->queued >= ep->high_water) s->state |= S_FULL;
}

/* One last try before a close, so that a reply queued just before it
 * leaves, as far as the socket takes it now; what was written goes to
 * done. Not from a forked copy (a child closing what it inherited): what
 * is queued there is the parent's too, and would reach the peer twice. A
 * failed write leaves its queue empty (write_failed), so nothing is tried
 * twice. */
static void last_write(lull_stream *s, lull_frame **done,
                       lull_frame **done_tail) {
    if ((s->state & S_CONNECTED) && s->head && !lull__stream_inherited(s))
        (void)write_out(s, done, done_tail);
}

static void stream_close(lull_endpoint *ep, int reason) {
    (void)reason; /* a socket cannot carry it: the peer reads EOF */
    lull_stream *s = stream_of(ep);
    LULL_ASSERT_LOOP_THREAD(s->loop);
    lull_frame *done = NULL, *done_tail = NULL;
    last_write(s, &done, &done_tail);
    lull_frame *list = teardown(s);
    /* One free path: the close callback runs for this close too, in a later
     * turn, so the owner frees in one place whoever closed. Without one, the
     * struct is the caller's again when this returns. */
    if (s->ep.on_close) {
        s->state = S_CLOSE_CB;
        s->error = reason;
        lull_task_post(s->loop, &s->event);
    } else {
        release_struct(s);
    }
    release_list(done);
    release_list(list);
}

/* A send past max_queued (src/frame.c): close in a later turn. */
static void stream_fail(lull_endpoint *ep, int reason) {
    fail_later(stream_of(ep), reason);
}

static const lull_frame_ops stream_ops = {stream_send, stream_close,
                                          stream_fail};

/* ------------------------------------------------------------- reading */

/* Makes room for a frame of `need` bytes (its header included) from
 * rstart: compacts, then, once the bytes that came fill an owned buffer,
 * doubles it, never past the frame. The body's bytes earn the room, not
 * the length its header announces: a peer that announces 16 MiB and sends
 * nothing more holds no 16 MiB. False when the frame can never fit. */
static bool make_room(lull_stream *s, size_t need) {
    if (s->rstart > 0) {
        if (s->fds) {
            for (fd_batch *b = s->fds->in; b; b = b->next)
                b->at -= s->rstart; /* all at >= rstart: earlier ones went */
            if (s->fds->lost) s->fds->lost_at -= s->rstart; /* ditto */
        }
        memmove(s->rbuf, s->rbuf + s->rstart, s->rend - s->rstart);
        s->rend -= s->rstart;
        s->rstart = 0;
    }
    if (need <= s->rcap) return true;
    if (!(s->state & S_OWN_BUF)) return false;
    if (s->rend < s->rcap) return true; /* room for more bytes first */
    return lull__frame_buf_grow(&s->rbuf, &s->rcap, s->rcap + 1, need - HDR);
}

/* The read buffer's set-up size (read_size), which a grown buffer shrinks
 * back to: kept in the stream's own fd watcher's `data`, which nothing else
 * reads, so the public struct keeps its layout. */
static size_t read_size_of(const lull_stream *s) {
    return (size_t)(uintptr_t)s->io.data;
}

/* Back to the set-up size. Only the stream's own buffer, and not while a
 * frame callback of it runs (its bytes point into the buffer). A failed
 * realloc keeps the buffer as it was. */
static void shrink_buffer(lull_stream *s) {
    if (!(s->state & S_OWN_BUF) || s->guard) return;
    size_t size = read_size_of(s);
    unsigned char *b = realloc(s->rbuf, size);
    if (!b) return;
    s->rbuf = b;
    s->rcap = size;
}

/* The buffer emptied while grown past READ_SHRINK_RATIO x its set-up size,
 * `filled` bytes in it since it last emptied: back to that size, unless
 * those bytes were a big frame (or a burst) and so were the last ones (a
 * run of big frames, which would otherwise grow it again from read_size,
 * read by read, on fresh pages, for every frame: 5 times the time for 2 MiB
 * ones). A smaller frame that empties it ends the run. */
static void emptied_grown(lull_stream *s, size_t filled) {
    bool big = filled / READ_SHRINK_RATIO > read_size_of(s);
    if (big && (s->state & S_BIG_RUN)) return;
    if (big)
        s->state |= S_BIG_RUN;
    else
        s->state &= ~S_BIG_RUN;
    shrink_buffer(s);
}

/* Closes the stream when the frame ending before buffer offset end is the
 * one whose fds were dropped (see unix_read): true then. */
static bool fds_lost(lull_stream *s, size_t end) {
    if (!s->fds || !s->fds->lost || s->fds->lost_at >= end) return false;
    fail_now(s, -s->fds->lost);
    return true;
}

/* Hands every whole buffered frame to on_frame, while reading is on and
 * the stream is not closing (S_FAIL: a send refused past max_queued inside
 * an on_frame stops the frames behind it, as a failing loopback end gets
 * none). False when the stream closed. */
static bool deliver_frames(lull_stream *s) {
    while ((s->state & (S_READING | S_FAIL)) == S_READING &&
           s->rend - s->rstart >= HDR) {
        const unsigned char *p = s->rbuf + s->rstart;
        size_t len = lull__frame_len(p);
        if (len > s->ep.max_frame) {
            fail_now(s, -EMSGSIZE);
            return false;
        }
        if (fds_lost(s, s->rstart + HDR + len)) return false;
        if (s->rend - s->rstart < HDR + len) {
            if (HDR + len > s->rcap - s->rstart && !make_room(s, HDR + len)) {
                fail_now(s, (s->state & S_OWN_BUF) ? -ENOMEM : -EMSGSIZE);
                return false;
            }
            break;
        }
        s->rstart += HDR + len;
        if (!s->ep.on_frame) {
            fds_drop_in(s, s->rstart);
            continue;
        }
        if (s->fds) {
            s->fds->limit = s->rstart;
            s->fds->delivering = true;
        }
        lull__stream_guard g;
        guard_enter(&s->guard, &g);
        s->ep.on_frame(&s->ep, p + HDR, len);
        if (!guard_leave(&s->guard, &g)) return false;
        if (s->fds) {
            s->fds->delivering = false;
            fds_drop_in(s, s->rstart);
        }
    }
    /* Not a whole header yet, and the dropped fds came with these bytes. */
    if ((s->state & (S_READING | S_FAIL)) == S_READING && fds_lost(s, s->rend))
        return false;
    if (s->rstart == s->rend) {
        size_t filled = s->rend;
        s->rstart = s->rend = 0;
        /* (A call with nothing come since, a resume's, is none.) */
        if (LULL_UNLIKELY(s->rcap / READ_SHRINK_RATIO > read_size_of(s)) &&
            filled)
            emptied_grown(s, filled);
        else if (LULL_UNLIKELY(s->state & S_BIG_RUN) && filled)
            s->state &= ~S_BIG_RUN; /* a small frame between big ones */
    }
    return true;
}

/* The peer's EOF. */
static void read_eof(lull_stream *s) {
    if (framed(s) && s->rend > s->rstart) {
        fail_now(s, -EPROTO); /* a frame cut short */
        return;
    }
    /* A forked copy's queue is the parent's, which the copy never writes:
     * dropped now (adopt), not kept for a write that may wait for good
     * behind a full socket. */
    if (lull__stream_inherited(s)) adopt(s);
    /* Writes still queued (a reply to the request that came with this EOF,
     * an HTTP/1.0 client's shutdown say) are written before the end, as
     * if a shutdown had asked for them: a peer that shut its side may
     * still read, and dropping them would cut the reply while both sides
     * call it an orderly close (Node ends its side after the queue too).
     * A peer that is gone fails the write: that error is the reason. */
    if (!s->on_end && s->head && !(s->state & S_SHUT_DONE)) {
        s->state |= S_SHUT_WANT;
        s->ep.flags |= EP_NO_SEND;
    }
    /* A shutdown still writing its queue (S_SHUT_WANT) was asked to write
     * it all before the end: the stream stays open for that, as with
     * on_end, and closes with 0 once it is shut (after_write). */
    if ((s->state & S_SHUT_DONE) || (!s->on_end && !(s->state & S_SHUT_WANT))) {
        fail_now(s, 0);
        return;
    }
    s->state |= S_EOF;
    update_io(s);
    /* on_end keeps the write side open; after this end's own shutdown
     * (still writing its queue) there is none left to keep: no on_end. */
    if (s->on_end && !(s->state & S_SHUT_WANT)) s->on_end(s);
}

/* One recv per readable callback: fair to the loop's other fds, and the
 * rest is still readable next iteration. */
static void read_some(lull_stream *s) {
    unsigned char *at = s->rbuf;
    size_t room = s->rcap;
    if (framed(s)) {
        if (s->rend == s->rcap) make_room(s, s->rcap);
        at = s->rbuf + s->rend;
        room = s->rcap - s->rend;
        if (room == 0) return; /* paused on whole frames: nothing to add */
    }
    ssize_t n = in_read(s, at, room);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        fail_now(s, -errno);
        return;
    }
    if (n == 0) {
        read_eof(s);
        return;
    }
    s->reads++;
    s->bytes_read += (uint64_t)n;
    if (s->idle_ns) s->active_ns = lull_loop_now(s->loop);
    if (framed(s)) {
        s->rend += (size_t)n;
        deliver_frames(s);
        return;
    }
    if (s->ep.on_frame) {
        if (s->fds) {
            s->fds->limit = (size_t)n;
            s->fds->delivering = true;
        }
        lull__stream_guard g;
        guard_enter(&s->guard, &g);
        s->ep.on_frame(&s->ep, at, (size_t)n);
        if (!guard_leave(&s->guard, &g)) return;
        if (s->fds) s->fds->delivering = false;
    }
    fds_drop_in(s, SIZE_MAX); /* a raw read's batch is its own */
    /* The read's fds were dropped (see unix_read): its bytes came first. */
    if (s->fds && s->fds->lost && !(s->state & S_FAIL))
        fail_now(s, -s->fds->lost);
}

/* ---------------------------------------------------- connect, events */

static void arm_idle(lull_stream *s) {
    if (!s->idle_ns) return;
    s->active_ns = lull_loop_now(s->loop);
    lull_timer_start(&s->timer, s->idle_ns, 0);
}

/* The connect finished with err (0: connected). A failed one is a close:
 * the connect callback hears of it, then the close callback, the last, as
 * for any other close, so that the owner frees (or retries) in one place. */
static void connect_done(lull_stream *s, int err) {
    lull_connect_fn cb = s->on_connect;
    if (err) {
        close_now(s, err, NULL, cb);
        return;
    }
    lull_timer_stop(&s->timer);
    /* S_READING as the user left it: a pause before the connect holds. */
    s->state = (s->state & ~S_CONNECTING) | S_CONNECTED;
    arm_idle(s);
    update_io(s);
    if (s->head || (s->state & S_SHUT_WANT)) lull__at_flush(s->loop, &s->flush);
    if (cb) cb(s, 0);
}

static void event_task(lull_task *t) {
    lull_stream *s = LULL_CONTAINER_OF(t, lull_stream, event);
    if (s->state & S_CLOSE_CB) { /* closed: the last callback */
        s->state = 0;
        release_struct(s);
        if (s->ep.on_close) s->ep.on_close(&s->ep, s->error);
        return;
    }
    /* A failure first: one found while a connect result waited to be told
     * (a send past max_queued) is a close while connecting, which has no
     * connect callback, and it took `error`, the connect's result. */
    if (s->state & S_FAIL) {
        /* The sends accepted before the failure (a send past max_queued
         * refused after them in the same callback) get the last write a
         * close gives them: the flush point skipped the failing stream. */
        lull_frame *done = NULL, *done_tail = NULL;
        last_write(s, &done, &done_tail);
        close_now(s, s->error, done, NULL);
        return;
    }
    if (s->state & S_CONNECT_CB) {
        s->state &= ~S_CONNECT_CB;
        int err = s->error;
        s->error = 0;
        connect_done(s, err);
        return;
    }
    if (s->state & S_DELIVER) {
        s->state &= ~S_DELIVER;
        deliver_frames(s);
    }
}
LULL__OWN_NAME(event_task, "lull_stream event turn", lull_stream, event);

static void on_timer(lull_timer *t) {
    lull_stream *s = LULL_CONTAINER_OF(t, lull_stream, timer);
    if (s->state & S_CONNECTING) {
        connect_done(s, -ETIMEDOUT);
        return;
    }
    /* Idle: the timer is re-armed for what is left rather than on every
     * read and write, so an active stream pays nothing per operation. */
    uint64_t now = lull_loop_now(s->loop), idle = now - s->active_ns;
    if (!(s->state & S_READING) && !s->head) {
        /* Paused by the owner with nothing to write: the owner is holding
         * the stream (a proxy's backpressure), the stream is not idle.
         * The timer stays stopped (a paused stream is quiet); the resume
         * or a send that finds the queue empty starts the clock again
         * (idle_restart). */
    } else if (idle >= s->idle_ns) {
        fail_now(s, -ETIMEDOUT);
    } else {
        lull_timer_start(&s->timer, s->idle_ns - idle, 0);
    }
}
LULL__OWN_NAME(on_timer, "lull_stream timeout", lull_stream, timer);

/* A hang-up came with the writability, and the write still could not go
 * out. On a terminal's side whose other side closed (a pty master whose
 * slave is gone) the hang-up lasts and writes say EAGAIN for ever: what
 * they would add is never read. Left blocked, the level-triggered hang-up
 * would wake the loop for ever; the write side ends instead (-EIO, what a
 * read there says), as a refused write ends it. A socket (a half-close is
 * EPOLLRDHUP, and one shut both ways refuses the write) or a pipe (a gone
 * reader is EPOLLERR, and EPIPE) never stays blocked here for good, so
 * they are left to their own errors. False when the stream closed. */
static bool hung_up_while_blocked(lull_stream *s) {
    if ((s->state & (S_BLOCKED | S_FAIL | S_OUT_SOCK | S_OUT_FIFO)) !=
        S_BLOCKED)
        return true;
    if (write_failed(s, -EIO, &s->done, &s->done_tail)) {
        lull_frame *done = s->done;
        s->done = s->done_tail = NULL;
        close_now(s, -EIO, done, NULL);
        return false;
    }
    return flush_now(s); /* releases the queue, pays a drain owed */
}

static void on_io(lull_io *io, int events) {
    lull_stream *s = LULL_CONTAINER_OF(io, lull_stream, io);
    if (s->state & S_CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(io->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            err = errno;
        connect_done(s, -err);
        return;
    }
    if ((events & (LULL_WRITABLE | LULL_ERROR)) && (s->state & S_BLOCKED)) {
        s->state &= ~S_BLOCKED;
        if (!flush_now(s)) return;
        if ((events & LULL_HANGUP) && !hung_up_while_blocked(s)) return;
    }
    if ((s->state & S_WATCH_HUP) && (events & (LULL_ERROR | LULL_HANGUP))) {
        fail_now(s, -EPIPE); /* the pipe's reader is gone */
        return;
    }
    if ((events & (LULL_READABLE | LULL_HANGUP | LULL_ERROR)) &&
        (s->state & S_READING) && !(s->state & S_EOF)) {
        /* Frames buffered before a pause come before anything read now (the
         * peer's EOF, say, which would call them a frame cut short): the
         * event task that delivers them after the resume may not have run
         * yet. */
        if (s->state & S_DELIVER) {
            s->state &= ~S_DELIVER;
            if (!deliver_frames(s) || !(s->state & S_READING)) return;
        }
        read_some(s);
    }
}
LULL__OWN_NAME(on_io, "lull_stream fd", lull_stream, io);

/* A pair's write fd became writable (or its reader went: the write says). */
static void on_wio(lull_io *io, int events) {
    lull_stream *s = LULL_CONTAINER_OF(io, lull_stream, wio);
    if ((events & (LULL_WRITABLE | LULL_ERROR | LULL_HANGUP)) &&
        (s->state & S_BLOCKED)) {
        s->state &= ~S_BLOCKED;
        if (flush_now(s) && (events & LULL_HANGUP))
            (void)hung_up_while_blocked(s);
    }
}
LULL__OWN_NAME(on_wio, "lull_stream write fd", lull_stream, wio);

/* --------------------------------------------------------------- setup */

/* Open (a paused stream has no started watcher and nothing queued, yet
 * holds its fd), or closed with its on_close still queued, on any loop: in
 * the process's set of handles in use from its set-up to release_struct
 * (a loop's own records cannot see a stream another loop holds). Asked by
 * address only (a hash lookup, whatever the loops have queued): s is
 * garbage before its first setup. */
bool lull__stream_live(lull_loop *loop, const lull_stream *s) {
    (void)loop;
    return lull__inuse_has(s);
}

/* TCP_NODELAY on the TCP socket a stream writes to, unless
 * LULL_STREAM_NAGLE: the flush points batch already. */
static void nodelay(int fd, unsigned flags) {
    if (flags & LULL_STREAM_NAGLE) return;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static int setup(lull_loop *loop, lull_stream *s, int fd,
                 const lull_stream_options *opts, bool tcp) {
    static const lull_stream_options defaults;
    const lull_stream_options *o = opts ? opts : &defaults;
    /* A programming error that debug builds stop at; a release build must
     * not wipe a stream the loop still holds: -EBUSY, s untouched (the
     * caller closes fd), as lull_tty_init and lull_dial_start say. */
    bool live = lull__stream_live(loop, s);
    LULL_ASSERT(!live, "lull: a stream opened again while open, or before its "
                       "on_close ran");
    if (live) return -EBUSY;
    void *data = s->ep.data; /* the user's, kept */
    memset(s, 0, sizeof *s);
    s->ep.data = data;
    lull__endpoint_init(&s->ep, &stream_ops, o->max_frame, o->high_water,
                        o->max_queued);
    lull__io_setup(loop, &s->io, fd, on_io);
    lull_task_init(&s->flush, flush_task);
    lull_task_init(&s->event, event_task);
    lull_timer_init(loop, &s->timer, on_timer);
    lull_timer_unref(&s->timer); /* a timeout alone keeps nothing alive */
    s->loop = loop;
    /* The loop's process (its creator, or the child that called
     * lull_loop_fork): see adopt(). */
    s->pid = (int)loop->pid;
    s->flags = o->flags;
    /* A framed stream's limit is what its 4-byte length can say: a longer
     * send would go out with its length cut to 32 bits, and max_frame + HDR
     * (the read buffer's bound) must not wrap. */
    if (!(o->flags & LULL_STREAM_RAW) && s->ep.max_frame > FRAME_MAX)
        s->ep.max_frame = FRAME_MAX;
    /* Its headers count as queued bytes (src/frame.h). */
    if (!(o->flags & LULL_STREAM_RAW)) s->ep.flags |= LULL__EP_FRAMED;
    s->idle_ns = o->idle_timeout_ns;
    size_t size = o->read_size ? o->read_size : READ_SIZE_DEFAULT;
    if (size < 2 * HDR) size = 2 * HDR;
    s->rbuf = malloc(size);
    /* 1: another thread's set-up of s came first (the check above). */
    int rc = s->rbuf ? lull__inuse_add(s) : -ENOMEM;
    if (rc > 0) rc = -EBUSY;
    if (rc < 0) {
        free(s->rbuf);
        s->rbuf = NULL;
        s->ep.flags |= LULL__EP_CLOSED; /* never opened */
        s->io.fd = -1;
        return rc;
    }
    s->rcap = size;
    s->io.data = (void *)(uintptr_t)size; /* read_size_of */
    s->state = S_COUNTED | S_OWN_BUF | S_READING | S_SOCK | S_OUT_SOCK |
               (tcp ? S_TCP : 0);
    loop->handles++;
    if (tcp) nodelay(fd, o->flags);
    return 0;
}

static bool options_ok(const lull_stream_options *o) {
    if (!o) return true;
    if (o->flags & ~(LULL_STREAM_RAW | LULL_STREAM_NAGLE | LULL_STREAM_FDS))
        return false;
    return lull__marks_ok(o->high_water, o->max_queued);
}

/* LULL_STREAM_FDS asked of a stream that is not one Unix socket. */
static bool fds_unsupported(const lull_stream_options *o, bool unix_socket) {
    return o && (o->flags & LULL_STREAM_FDS) && !unix_socket;
}

int lull__stream_options_check(const lull_stream_options *o, int family) {
    if (!options_ok(o)) return -EINVAL;
    return fds_unsupported(o, family == AF_UNIX) ? -ENOTSUP : 0;
}

/* The socket is connected: open for reading and writing. */
static int start_connected(lull_stream *s) {
    s->state |= S_CONNECTED;
    arm_idle(s);
    int rc = 0;
    /* A write-only fd has nothing to read (S_EOF from the start); a pipe's
     * write end still watches for its reader's close. */
    if (!(s->state & S_EOF) || (s->state & S_WATCH_HUP))
        rc = lull_io_start(&s->io, LULL_READABLE);
    if (rc < 0) release_list(teardown_untold(s));
    return rc;
}

/* The fd kinds a stream takes (fd_kind's result). */
#define FD_READ  0x1 /* opened for reading */
#define FD_WRITE 0x2 /* opened for writing */
#define FD_SOCK  0x4 /* a connected stream socket */
#define FD_TCP   0x8 /* ... over IPv4 or IPv6 */
#define FD_FIFO  0x10
#define FD_UNIX  0x20 /* a Unix stream socket: fds may pass */

/* What fd is: a stream socket, or a pipe, FIFO or character device (a
 * tty), whichever ways it was opened; -EINVAL for anything else (a
 * datagram socket, a listening socket, a regular file, an eventfd) or a
 * number that is not an open fd. */
static int fd_kind(int fd, int *kind) {
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) return -EINVAL;
    if (S_ISSOCK(st.st_mode)) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int type = 0;
        socklen_t tlen = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0)
            return -errno;
        if (type != SOCK_STREAM) return -EINVAL;
        /* A listening socket is never connected: refused now rather than
         * closed later with -ENOTCONN from its first read. */
        int listening = 0;
        tlen = sizeof listening;
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &tlen) == 0 &&
            listening)
            return -EINVAL;
        if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) return -errno;
        *kind = FD_READ | FD_WRITE | FD_SOCK;
        if (ss.ss_family == AF_INET || ss.ss_family == AF_INET6)
            *kind |= FD_TCP;
        if (ss.ss_family == AF_UNIX) *kind |= FD_UNIX;
        return 0;
    }
    if (!S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) return -EINVAL;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) return -EINVAL;
    int acc = fl & O_ACCMODE;
    *kind = (S_ISFIFO(st.st_mode) ? FD_FIFO : 0) |
            (acc != O_WRONLY ? FD_READ : 0) | (acc != O_RDONLY ? FD_WRITE : 0);
    return 0;
}

/* Whether this kernel's pipes take RWF_NOWAIT and honour it: pipes have
 * FMODE_NOWAIT since Linux 6.4, whose first release candidate did not yet
 * check IOCB_NOWAIT before waiting (a read would block the loop); 6.5 is
 * the first release that surely does. Before, preadv2 says EOPNOTSUPP.
 * Read once per process: the answer cannot change. */
static bool pipes_nowait(void) {
    static int known; /* 0 unknown, 1 yes, 2 no; a race only repeats it */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k == 0) {
        struct utsname u;
        int major = 0, minor = 0;
        if (uname(&u) == 0) sscanf(u.release, "%d.%d", &major, &minor);
        k = (major > 6 || (major == 6 && minor >= 5)) ? 1 : 2;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k == 1;
}

/* Makes the stream's use of fd (kind: fd_kind's) non-blocking, leaving the
 * open file description as it is wherever the kernel has a per-call way:
 * a socket takes MSG_DONTWAIT, a pipe RWF_NOWAIT. Anything else (a tty, a
 * FIFO or pipe on an older kernel) gets O_NONBLOCK on its description
 * (nb_take), given back when the stream closes the fd. 0 or a negative
 * errno. */
static int make_nonblocking(lull_stream *s, int fd, int kind, uint32_t nowait,
                            uint32_t nb) {
    if (kind & FD_SOCK) return 0;
    if ((kind & FD_FIFO) && pipes_nowait()) {
        s->state |= nowait;
        return 0;
    }
    int rc = nb_take(nb == S_IO_NB ? &s->io : &s->wio, fd);
    if (rc == 0) s->state |= nb;
    return rc;
}

/* The state bits of a stream whose reads come from an fd of kind `in` and
 * whose writes go to one of kind `out` (the same fd unless a pair). A side
 * the fd cannot do starts done: no writes is a write side already shut, no
 * reads an EOF already read. */
static void apply_kinds(lull_stream *s, int in, int out) {
    s->state &= ~(S_SOCK | S_OUT_SOCK);
    if (in & FD_SOCK) s->state |= S_SOCK;
    if (out & FD_SOCK) s->state |= S_OUT_SOCK;
    if (out & FD_FIFO) s->state |= S_OUT_FIFO;
    if (!(out & FD_WRITE)) {
        s->state |= S_SHUT_DONE;
        s->ep.flags |= EP_NO_SEND;
    }
    if (!(in & FD_READ)) {
        s->state |= S_EOF;
        if (out & FD_FIFO) s->state |= S_WATCH_HUP;
    }
}

int lull_stream_open(lull_loop *loop, lull_stream *s, int fd,
                     const lull_stream_options *opts) {
    if (!loop || !s || fd < 0 || !options_ok(opts)) {
        if (fd >= 0) close(fd);
        return -EINVAL;
    }
    LULL_ASSERT_LOOP_THREAD(loop);
    int kind = 0;
    int rc = fd_kind(fd, &kind);
    if (rc == 0 && fds_unsupported(opts, kind & FD_UNIX)) rc = -ENOTSUP;
    if (rc == 0) rc = setup(loop, s, fd, opts, kind & FD_TCP);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    rc = make_nonblocking(s, fd, kind, S_IO_NOWAIT, S_IO_NB);
    if (rc < 0) {
        release_list(teardown_untold(s)); /* gives back what it changed */
        return rc;
    }
    apply_kinds(s, kind, kind);
    if (kind & FD_UNIX) s->state |= S_UNIX;
    return start_connected(s);
}

int lull_stream_open_pair(lull_loop *loop, lull_stream *s, int rfd, int wfd,
                          const lull_stream_options *opts) {
    if (rfd >= 0 && rfd == wfd) return lull_stream_open(loop, s, rfd, opts);
    int in = 0, out = 0, rc = -EINVAL;
    if (loop && s && options_ok(opts) && fd_kind(rfd, &in) == 0 &&
        fd_kind(wfd, &out) == 0 && (in & FD_READ) && (out & FD_WRITE))
        rc = fds_unsupported(opts, false) ? -ENOTSUP : 0;
    if (rc == 0) LULL_ASSERT_LOOP_THREAD(loop);
    if (rc == 0) rc = setup(loop, s, rfd, opts, false);
    if (rc < 0) { /* setup leaves nothing open on failure */
        if (rfd >= 0) close(rfd);
        if (wfd >= 0) close(wfd);
        return rc;
    }
    lull__io_setup(loop, &s->wio, wfd, on_wio); /* cannot fail: checked */
    s->state |= S_PAIR;
    /* Its writes go to wfd: the socket Nagle's algorithm would delay (an
     * inetd-style service's stdout, a TCP connection). */
    if (out & FD_TCP) nodelay(wfd, opts ? opts->flags : 0);
    rc = make_nonblocking(s, rfd, in, S_IO_NOWAIT, S_IO_NB);
    if (rc == 0) rc = make_nonblocking(s, wfd, out, S_WIO_NOWAIT, S_WIO_NB);
    if (rc < 0) {
        release_list(teardown_untold(s)); /* gives back what it changed */
        return rc;
    }
    apply_kinds(s, in, out);
    return start_connected(s);
}

int lull__stream_connect(lull_loop *loop, lull_stream *s, int family,
                         const struct sockaddr *addr, socklen_t len,
                         const lull_stream_options *opts, lull_connect_fn fn) {
    if (!loop || !s) return -EINVAL;
    int rc = lull__stream_options_check(opts, family);
    if (rc < 0) return rc;
    LULL_ASSERT_LOOP_THREAD(loop);
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    /* Never the program's closed stdio (lull__fd_above_stdio). */
    fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
    if (fd < 0) return fd;
    rc = setup(loop, s, fd, opts, family != AF_UNIX);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    s->on_connect = fn;
    s->state |= S_CONNECTING | (family == AF_UNIX ? S_UNIX : 0);
    if (opts && opts->connect_timeout_ns)
        lull_timer_start(&s->timer, opts->connect_timeout_ns, 0);
    if (connect(fd, addr, len) == 0) {
        s->error = 0;
    } else if (errno == EINPROGRESS || errno == EINTR) {
        rc = lull_io_start(&s->io, LULL_WRITABLE);
        if (rc == 0) return 0;
        s->error = rc;
    } else {
        s->error = -errno;
    }
    /* Known now, told in a later turn, never inside this call. */
    s->state |= S_CONNECT_CB;
    lull_task_post(loop, &s->event);
    return 0;
}

/* -------------------------------------------------------- user controls */

int lull_stream_read_stop(lull_stream *s) {
    if (!s || !s->loop) return -EINVAL;
    if (s->ep.flags & LULL__EP_CLOSED) return -ENOTCONN;
    LULL_ASSERT_LOOP_THREAD(s->loop);
    s->state &= ~S_READING;
    if (s->state & S_CONNECTED) update_io(s);
    return 0;
}

int lull_stream_read_start(lull_stream *s) {
    if (!s || !s->loop) return -EINVAL;
    if (s->ep.flags & LULL__EP_CLOSED) return -ENOTCONN;
    LULL_ASSERT_LOOP_THREAD(s->loop);
    if (s->state & S_READING) return 0;
    s->state |= S_READING;
    if (s->idle_ns) idle_restart(s);
    if (!(s->state & S_CONNECTED)) return 0;
    update_io(s);
    /* Frames that arrived before the pause: a later turn, not this call. */
    if (framed(s) && s->rend - s->rstart >= HDR) {
        s->state |= S_DELIVER;
        lull_task_post(s->loop, &s->event);
    }
    return 0;
}

int lull_stream_read_into(lull_stream *s, void *buf, size_t cap) {
    if (!s || !s->loop || !buf || cap < 2 * HDR) return -EINVAL;
    if (s->ep.flags & LULL__EP_CLOSED) return -ENOTCONN;
    if (s->rend != s->rstart || s->guard) return -EBUSY;
    if (s->state & S_OWN_BUF) free(s->rbuf);
    s->state &= ~S_OWN_BUF;
    s->rbuf = buf;
    s->rcap = cap;
    s->io.data = (void *)(uintptr_t)SIZE_MAX; /* never shrunk: the caller's */
    s->rstart = s->rend = 0;
    return 0;
}

void lull_stream_set_on_end(lull_stream *s, lull_end_fn fn) {
    if (s) s->on_end = fn;
}

int lull_stream_shutdown(lull_stream *s) {
    if (!s || !s->loop) return -EINVAL;
    if (s->ep.flags & LULL__EP_CLOSED) return -ENOTCONN;
    LULL_ASSERT_LOOP_THREAD(s->loop);
    /* A forked copy's own shutdown: the parent's queue (and a shutdown
     * it asked for) dropped first, so that this one is not taken for it. */
    if (lull__stream_inherited(s)) adopt(s);
    if (s->state & (S_SHUT_WANT | S_SHUT_DONE)) return 0;
    s->state |= S_SHUT_WANT;
    s->ep.flags |= EP_NO_SEND;
    if ((s->state & (S_CONNECTED | S_BLOCKED)) == S_CONNECTED && !s->head)
        after_write(s);
    /* Otherwise the write that empties the queue shuts it (after_write). */
    return 0;
}

int lull_stream_fd(const lull_stream *s) {
    /* Never set up (no loop): its io.fd is whatever the struct held, 0 in a
     * zeroed one, which is stdin, not the stream's. */
    if (!s || !s->loop || (s->ep.flags & LULL__EP_CLOSED)) return -1;
    return s->io.fd;
}

/* The fd leaves the stream as a close would leave it, but open: teardown
 * with the fd let go of first (unwatched; the O_NONBLOCK lull set is given
 * back by nb_give), so nothing of the stream is left in the loop. Only where
 * nothing would be lost: the bytes of a queued write or a read not yet
 * delivered exist nowhere else, and a failure or close on its way is the close
 * callback's to tell. Inside a callback of the stream's, the guards it
 * marks keep the code around the callback off the struct (as after a
 * close), which is the caller's once this returns. */
int lull_stream_detach(lull_stream *s) {
    if (!s || !s->loop) return -EINVAL;
    if (s->ep.flags & LULL__EP_CLOSED) return -ENOTCONN;
    LULL_ASSERT_LOOP_THREAD(s->loop);
    LULL_ASSERT(!(s->state & S_OWNED),
                "lull: lull_stream_detach of a stream another handle owns");
    if (s->state & S_OWNED) return -EINVAL;
    /* S_WFAIL too: a failed write's error waits for on_close (the frames
     * it dropped were released unwritten; nothing else tells of them). */
    if ((s->state & (S_CONNECTED | S_FAIL | S_WFAIL)) != S_CONNECTED)
        return -ENOTCONN;
    if (s->state & S_PAIR) return -ENOTSUP;
    /* A forked copy: the parent's queue is the parent's, not a write of
     * this copy's that would be lost. */
    if (lull__stream_inherited(s)) adopt(s);
    if (s->head || s->rend != s->rstart) return -EBUSY;
    lull_io_stop(&s->io); /* while io.fd still names the registration */
    int fd = s->io.fd;
    s->io.fd = -1; /* teardown gives back O_NONBLOCK and leaves it open */
    release_list(teardown_untold(s)); /* frames written, not yet released */
    return fd;
}

void lull__stream_own(lull_stream *s) {
    s->state |= S_OWNED;
}

int lull_stream_send_fds(lull_stream *s, lull_frame *frame, const int *fds,
                         int nfds) {
    if (!s || !s->loop || !frame || !fds || nfds < 1 || nfds > FDS_MAX ||
        (!frame->bytes && frame->len))
        return -EINVAL;
    /* A raw write of no bytes sends nothing, and with it no fds. */
    if (!framed(s) && frame->len == 0) return -EINVAL;
    /* From the stream alone, before the thread check: a closed stream's
     * loop may be freed by now (as lull_stream_read_stop answers). */
    if (s->ep.flags & LULL__EP_CLOSED) return -EPIPE;
    LULL_ASSERT_LOOP_THREAD(s->loop);
    if (s->ep.flags & EP_NO_SEND) return -EPIPE;
    if (!(s->state & S_UNIX)) return -ENOTSUP;
    /* lull_endpoint_send's refusals in its order, before any fd is copied:
     * a frame too long for this stream hears so even while in flight
     * elsewhere (-EBUSY would have its caller wait, then hear -EMSGSIZE). */
    if (frame->len > s->ep.max_frame) return -EMSGSIZE;
    if (frame->in_flight) return -EBUSY;
    /* A forked copy drops the parent's queue, its fds with it, before this
     * frame's batch joins them (stream_send would drop that too). */
    if (lull__stream_inherited(s)) adopt(s);
    fd_batch *b = malloc(sizeof *b + sizeof(int) * (size_t)nfds);
    if (!b || !fds_get(s)) {
        free(b);
        return -ENOMEM;
    }
    b->frame = frame;
    b->at = 0;
    b->n = 0;
    b->taken = 0;
    for (int i = 0; i < nfds; i++) {
        /* A copy, so the caller may close theirs at once, and a number that
         * is not open is refused here rather than failing a later write. */
        int fd = fds[i] < 0 ? -1 : fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
        if (fd < 0) {
            int err = fds[i] < 0 ? EBADF : errno;
            batch_free(b);
            return -err;
        }
        b->fd[b->n++] = fd;
    }
    struct lull__stream_fds *f = s->fds;
    fd_batch *before = f->out_tail;
    batch_push(&f->out, &f->out_tail, b);
    int rc = lull_endpoint_send(&s->ep, frame);
    if (rc < 0) { /* not queued: the batch is still the last */
        f->out_tail = before;
        if (before) {
            before->next = NULL;
        } else {
            f->out = NULL;
        }
        batch_free(b);
    }
    return rc;
}

int lull_stream_take_fds(lull_stream *s, int *fds, int max) {
    if (!s || max < 0 || (max > 0 && !fds)) return -EINVAL;
    struct lull__stream_fds *f = s->fds;
    if (!f || !f->delivering) return 0;
    int k = 0;
    for (fd_batch *b = f->in; b && b->at < f->limit && k < max; b = b->next)
        while (b->taken < b->n && k < max)
            fds[k++] = b->fd[b->taken++];
    return k;
}

int lull_stream_peer_cred(const lull_stream *s, pid_t *pid, uid_t *uid,
                          gid_t *gid) {
    if (!s || !s->loop) return -EINVAL;
    if (s->ep.flags & LULL__EP_CLOSED) return -ENOTCONN;
    if (!(s->state & S_UNIX)) return -ENOTSUP;
    struct ucred cr;
    socklen_t len = sizeof cr;
    if (getsockopt(s->io.fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0)
        return -errno;
    if (pid) *pid = cr.pid;
    if (uid) *uid = cr.uid;
    if (gid) *gid = cr.gid;
    return 0;
}

int lull_stream_try_write(lull_stream *s, const void *bytes, size_t len) {
    /* (no buffer is that long: a wrong length, where write(2) reads on
     * past the caller's bytes) */
    if (!s || !s->loop || (len > 0 && !bytes) || len > SSIZE_MAX)
        return -EINVAL;
    /* Before the thread check: a closed stream's loop may be freed. */
    if (s->ep.flags & LULL__EP_CLOSED) return -EPIPE;
    LULL_ASSERT_LOOP_THREAD(s->loop);
    if (s->ep.flags & EP_NO_SEND) return -EPIPE;
    if (framed(s)) return -ENOTSUP; /* part of a frame would cut the framing */
    if (lull__stream_inherited(s)) adopt(s);
    if (s->head) return -EBUSY;
    if (!(s->state & S_CONNECTED) || (s->state & S_FAIL)) return -EAGAIN;
    if (len == 0) return 0;
    /* One call returns what it wrote, so the count must fit the int. */
    if (len > INT_MAX) len = INT_MAX;
    struct iovec iov = {(void *)bytes, len};
    ssize_t w;
    do {
        w = out_write(s, &iov, 1, NULL);
    } while (w < 0 && errno == EINTR);
    s->writes++;
    if (w >= 0) {
        s->bytes_written += (uint64_t)w;
        if (s->idle_ns) s->active_ns = lull_loop_now(s->loop);
        return (int)w;
    }
    int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK) return -EAGAIN;
    /* As a failed queued write: the write side ends, reading goes on; the
     * close, if the read side is done too, comes in a later turn, since
     * this may run where no callback may (nothing was queued to release). */
    if (write_failed(s, -err, &s->done, &s->done_tail)) fail_later(s, -err);
    return -err;
}

/* -------------------------------------------------------------- server */

static void server_retry(lull_timer *t) {
    lull_server *srv = LULL_CONTAINER_OF(t, lull_server, retry);
    if (srv->io.fd < 0) return;
    /* Watching the listener again can fail (epoll_ctl ENOMEM): then
     * nothing would ever accept again, so wait and try once more. */
    if (lull_io_start(&srv->io, LULL_READABLE) < 0) {
        srv->paused++;
        lull_timer_start(&srv->retry, srv->retry_ns, 0);
    }
}
LULL__OWN_NAME(server_retry, "lull_server accept retry", lull_server, retry);

/* Errors no retry can mend: the socket was shut down (EINVAL: readable
 * for ever, accept refused), the fd is no longer a listening socket
 * (closed behind the server, or replaced), or there is no accept4 (ENOSYS:
 * an old kernel, or a seccomp filter's answer). */
static bool accept_failed_for_good(int err) {
    return err == EINVAL || err == EBADF || err == ENOTSOCK ||
           err == EOPNOTSUPP || err == ENOSYS;
}

/* The errors a wait mends: out of fds (EMFILE, ENFILE) or kernel memory
 * (ENOBUFS, ENOMEM), which come back as connections close. They pause
 * accepting for as long as they last. */
static bool accept_out_of_resources(int err) {
    return err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

/* Runs on_connection for srv->pending (a fd, or -1 with srv->failed set);
 * false when the server was closed inside it. */
static bool offer(lull_server *srv) {
    lull__stream_guard g;
    guard_enter(&srv->guard, &g);
    if (srv->on_connection) srv->on_connection(srv);
    /* Closed inside (and the waiting fd with it): do not touch srv. */
    if (!guard_leave(&srv->guard, &g)) return false;
    if (srv->pending >= 0) close(srv->pending); /* not taken */
    srv->pending = -1;
    return true;
}

/* Accepting paused by err, out of fds or kernel memory: on_connection runs
 * with nothing waiting and lull_server_accept says err, as libuv's
 * connection callback gets UV_EMFILE, so a server can say why new clients
 * wait; false when the server was closed inside. */
static bool offer_pause(lull_server *srv, int err) {
    int failed = srv->failed; /* a count of retries, kept */
    srv->failed = err;
    if (!offer(srv)) return false;
    srv->failed = failed;
    return true;
}

/* accept4 takes an fd before it looks at the backlog: out of fds it says
 * EMFILE (ENFILE) with no client waiting too, as after the last waiting
 * one was taken. Nothing waiting is no pause (the owner would hear of
 * clients waiting that are not): the level-triggered watch brings the
 * next client, and a pause then. A poll only on this rare path. */
static bool nothing_waits(int err, const lull_io *io) {
    if (err != EMFILE && err != ENFILE) return false;
    struct pollfd p = {.fd = io->fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

static void server_io(lull_io *io, int events) {
    (void)events;
    lull_server *srv = LULL_CONTAINER_OF(io, lull_server, io);
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        int fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        /* Never the program's closed stdio (lull__fd_above_stdio). With
         * no fd free above 2 the connection is closed, and accepting
         * pauses as for accept4's own EMFILE. */
        if (fd >= 0 && fd <= 2 && (fd = lull__fd_above_stdio(fd)) < 0) {
            errno = -fd;
            fd = -1;
        }
        if (fd < 0) {
            int err = errno;
            if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
            if (err == EAGAIN || err == EWOULDBLOCK || nothing_waits(err, io)) {
                srv->failed = 0; /* accept works: a refusal has passed */
                return;
            }
            /* The listener stays readable either way: stop watching it. */
            lull_io_stop(io);
            /* Neither for good nor out of resources: it may pass, and
             * failed counts its retries in a row (as minus their number)
             * up to ACCEPT_GIVE_UP. */
            bool may_pass =
                !accept_failed_for_good(err) && !accept_out_of_resources(err);
            if (accept_failed_for_good(err) ||
                (may_pass && -srv->failed >= ACCEPT_GIVE_UP)) {
                /* No timer: a retry would fail the same way for ever. The
                 * owner hears it once, through lull_server_accept. */
                srv->failed = err;
                offer(srv);
                return;
            }
            if (may_pass) srv->failed--;
            /* Out of fds (EMFILE, ENFILE) or kernel memory (ENOBUFS,
             * ENOMEM), or a refusal that may pass: the retry timer resumes
             * accepting. The owner hears why first. */
            srv->paused++;
            if (accept_out_of_resources(err) && !offer_pause(srv, err)) return;
            lull_timer_start(&srv->retry, srv->retry_ns, 0);
            return;
        }
        srv->failed = 0; /* accept works: a refusal has passed */
        srv->pending = fd;
        srv->accepted++;
        if (!offer(srv)) return;
    }
}
LULL__OWN_NAME(server_io, "lull_server listening socket", lull_server, io);

/* Listening (or paused after running out of fds) and not closed, on any
 * loop: setting it up again would lose its socket, leave its watcher
 * started or its retry armed, and keep that loop's count of open handles
 * up. Asked by address of the process's set of handles in use: srv is
 * garbage before its first set-up. */
static bool server_open(const lull_server *srv) {
    return lull__inuse_has(srv);
}

/* The socket file that a failed listen's bind made: lull's, so removed,
 * or every later listen on that path would be -EADDRINUSE. An abstract
 * name ("@name") has no file. */
static void unbind(int family, const struct sockaddr *addr) {
    const struct sockaddr_un *sun = (const struct sockaddr_un *)addr;
    if (family == AF_UNIX && sun->sun_path[0]) unlink(sun->sun_path);
}

int lull__server_listen(lull_loop *loop, lull_server *srv, int family,
                        const struct sockaddr *addr, socklen_t len, int backlog,
                        lull_connection_fn fn) {
    if (!loop || !srv || !fn) return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(loop);
    if (server_open(srv)) return -EBUSY;
    memset(srv, 0, sizeof *srv);
    srv->pending = -1;
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    fd = fd < 0 ? -errno : lull__fd_above_stdio(fd); /* never 0 to 2 */
    if (fd < 0) return fd;
    int one = 1;
    if (family != AF_UNIX)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc = bind(fd, addr, len) < 0 ? -errno : 0;
    bool bound = rc == 0;
    if (rc == 0 && listen(fd, backlog > 0 ? backlog : SOMAXCONN) < 0)
        rc = -errno;
    if (rc == 0) lull__io_setup(loop, &srv->io, fd, server_io);
    if (rc == 0) rc = lull__inuse_add(srv);
    if (rc == 0) rc = lull_io_start(&srv->io, LULL_READABLE);
    if (rc < 0) {
        lull__inuse_remove(srv);
        close(fd);
        srv->io.fd = -1;
        if (bound) unbind(family, addr);
        return rc;
    }
    lull_timer_init(loop, &srv->retry, server_retry);
    srv->loop = loop;
    srv->on_connection = fn;
    srv->family = family;
    srv->retry_ns = ACCEPT_RETRY_NS;
    loop->handles++; /* until lull_server_close: see S_COUNTED */
    return 0;
}

int lull_server_open(lull_loop *loop, lull_server *srv, int fd,
                     lull_connection_fn fn) {
    if (!loop || !srv || !fn || fd < 0) {
        if (fd >= 0) close(fd);
        return -EINVAL;
    }
    LULL_ASSERT_LOOP_THREAD(loop);
    if (server_open(srv)) {
        close(fd); /* owned, also on failure */
        return -EBUSY;
    }
    memset(srv, 0, sizeof *srv);
    srv->pending = -1;
    srv->io.fd = -1;
    int listening = 0, type = 0;
    socklen_t len = sizeof listening, tlen = sizeof type;
    struct sockaddr_storage ss;
    socklen_t slen = sizeof ss;
    int rc = 0;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &slen) < 0 || !listening ||
        type != SOCK_STREAM)
        rc = -EINVAL;
    /* accept4 has no per-call MSG_DONTWAIT: the description (shared with
     * whoever passed it, who accepts the same way) must not block, or a
     * connection another process took first would hang this loop. */
    int fl = rc == 0 ? fcntl(fd, F_GETFL) : -1;
    if (rc == 0 && (fl < 0 || (!(fl & O_NONBLOCK) &&
                               fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)))
        rc = -errno;
    if (rc == 0) lull__io_setup(loop, &srv->io, fd, server_io);
    if (rc == 0) rc = lull__inuse_add(srv);
    if (rc == 0) rc = lull_io_start(&srv->io, LULL_READABLE);
    if (rc < 0) {
        lull__inuse_remove(srv);
        close(fd);
        srv->io.fd = -1;
        return rc;
    }
    lull_timer_init(loop, &srv->retry, server_retry);
    srv->loop = loop;
    srv->on_connection = fn;
    srv->family = ss.ss_family;
    srv->retry_ns = ACCEPT_RETRY_NS;
    loop->handles++; /* until lull_server_close: see S_COUNTED */
    return 0;
}

int lull_server_accept(lull_server *srv, lull_stream *s,
                       const lull_stream_options *opts) {
    /* Closed (io.fd -1, loop kept): not listening, as never set up; not
     * -ENOENT, which says a later connection may still come. */
    if (!srv || !s || !srv->loop || srv->io.fd < 0 || !options_ok(opts))
        return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(srv->loop);
    if (srv->pending < 0) return srv->failed > 0 ? -srv->failed : -ENOENT;
    /* Refused before the connection is taken: it waits for an accept
     * with options that fit. */
    if (fds_unsupported(opts, srv->family == AF_UNIX)) return -ENOTSUP;
    int fd = srv->pending;
    srv->pending = -1;
    int rc = setup(srv->loop, s, fd, opts, srv->family != AF_UNIX);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    if (srv->family == AF_UNIX) s->state |= S_UNIX;
    return start_connected(s);
}

void lull_server_close(lull_server *srv) {
    if (!srv || !srv->loop || srv->io.fd < 0) return;
    LULL_ASSERT_LOOP_THREAD(srv->loop);
    lull_io_stop(&srv->io);
    lull_timer_stop(&srv->retry);
    close(srv->io.fd);
    srv->io.fd = -1;
    srv->loop->handles--;
    lull__inuse_remove(srv);
    if (srv->pending >= 0) close(srv->pending);
    srv->pending = -1;
    guards_close(&srv->guard, NULL);
}

int lull_server_port(const lull_server *srv) {
    if (!srv || !srv->loop || srv->io.fd < 0) return -EINVAL;
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(srv->io.fd, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    if (ss.ss_family == AF_INET)
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (ss.ss_family == AF_INET6)
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return -EAFNOSUPPORT;
}
