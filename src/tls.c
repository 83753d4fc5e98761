/* TLS (OpenSSL 3) as a transport of the frame interface.
 *
 * Owns: a lull_tls's plaintext queue (the caller's frames, linked through
 * frame->next), its SSL object and the memory it reads plaintext into, the
 * ciphertext chunks it hands to its stream, and its close. One thread: the
 * loop's. A context (lull_tls_ctx) is shared by connections on any thread:
 * OpenSSL's SSL_CTX is thread-safe, and the one slot of the client's
 * session cache has a lock.
 *
 * Why over a lull_stream and not the fd. The records ride on a raw
 * lull_stream the lull_tls embeds, so TCP, Unix sockets and socketpairs,
 * connect and accept, their timeouts and the flush-point batching are the
 * stream's, tested there. OpenSSL talks to a BIO of ours: its
 * reads take the bytes the stream just read (no copy into a memory BIO),
 * its writes append to 64 KiB chunks that are sent on the stream as raw
 * frames and come back to a free list when written. The price: OpenSSL's
 * kTLS path needs its socket BIO, so kTLS is not used (see docs/API.md).
 *
 * When records leave. A send queues the frame and queues the flush task at
 * the loop's next flush point; there every queued frame is copied (with its
 * length) into a 16 KiB stage, one SSL_write per full stage (a frame that
 * large alone is written from its own bytes), and the chunks go to the
 * stream, whose own flush writes them in one sendmsg. A frame is released
 * once the chunk that holds its last record was written, as a stream's
 * frame once written: released at encryption, a protocol that closes
 * after its last reply's release (as it may on a stream) dropped that
 * reply's records, still queued behind a full socket. Encryption stops
 * while the stream is past its high-water
 * mark, and resumes on its drain: the plaintext waits in the caller's
 * frames, counted in ep.queued, so backpressure and max_queued work as on
 * a stream.
 *
 * Whose code runs where: as in src/stream.c. Nothing of the user's runs
 * inside lull_endpoint_send (a failure there is delivered by the event
 * task); user callbacks run inside a guard, a stack record a close marks,
 * after which nothing of the struct is touched. A close inside on_frame
 * hands the plaintext buffer to the outermost guard to free.
 *
 * One free path: on_close runs once per connection set up, as its last
 * callback, after every frame was released: at once for a failure, the
 * stream's own close (a reset, an EOF, a failed connect) or the peer's
 * close_notify; in a later turn for lull_endpoint_close. The stream under
 * it is closed first, without a callback of its own.
 *
 * The five rows, for a connection:
 *   Trigger                 a send (flush point), ciphertext read by the
 *                           stream, the stream's drain, a resume, the
 *                           handshake timeout, a close
 *   Source of truth         the plaintext queue; the SSL object; state
 *   Pending-work predicate  frames queued and the stream writable, or
 *                           ciphertext saved while paused and reading again
 *                           (stalled on unread answers: once they left)
 *   Next deadline or retry  the handshake timeout (one timer, stopped when
 *                           the handshake completes)
 *   Quiet condition         queue empty: no task queued; the stream idles
 *                           in epoll */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "lull.h"
#include "tls.h"

#ifndef LULL_HAVE_OPENSSL

/* Built without OpenSSL: the API is there and says so. */
static void stub_send(lull_endpoint *ep, lull_frame *frame) {
    (void)ep;
    (void)frame;
}
static void stub_close(lull_endpoint *ep, int reason) {
    (void)ep;
    (void)reason;
}
const lull_frame_ops lull__tls_ops = {stub_send, stub_close, stub_close};
int lull__tls_read(lull_endpoint *ep, bool on) {
    (void)ep;
    (void)on;
    return -ENOTSUP;
}
int lull__tls_shutdown(lull_endpoint *ep) {
    (void)ep;
    return -ENOTSUP;
}
bool lull_tls_available(void) {
    return false;
}
int lull_tls_ctx_new(const lull_tls_config *cfg, lull_tls_ctx **out) {
    (void)cfg;
    if (out) *out = NULL;
    return -ENOTSUP;
}
void lull_tls_ctx_free(lull_tls_ctx *ctx) {
    (void)ctx;
}
int lull_tls_accept(lull_server *srv, lull_tls *tls, lull_tls_ctx *ctx,
                    const lull_tls_options *opts) {
    (void)srv;
    (void)tls;
    (void)ctx;
    (void)opts;
    return -ENOTSUP;
}
int lull_tls_connect_tcp(lull_loop *loop, lull_tls *tls, lull_tls_ctx *ctx,
                         const char *host, int port,
                         const lull_tls_options *opts) {
    (void)loop;
    (void)tls;
    (void)ctx;
    (void)host;
    (void)port;
    (void)opts;
    return -ENOTSUP;
}
int lull_tls_connect_unix(lull_loop *loop, lull_tls *tls, lull_tls_ctx *ctx,
                          const char *path, const lull_tls_options *opts) {
    (void)loop;
    (void)tls;
    (void)ctx;
    (void)path;
    (void)opts;
    return -ENOTSUP;
}
int lull_tls_open(lull_loop *loop, lull_tls *tls, lull_tls_ctx *ctx, int fd,
                  const lull_tls_options *opts) {
    (void)loop;
    (void)tls;
    (void)ctx;
    (void)opts;
    if (fd >= 0) close(fd);
    return -ENOTSUP;
}
bool lull_tls_resumed(const lull_tls *tls) {
    (void)tls;
    return false;
}
const char *lull_tls_server_name(const lull_tls *tls) {
    (void)tls;
    return NULL;
}
int lull_tls_alpn(const lull_tls *tls, char *buf, size_t cap) {
    (void)tls;
    (void)buf;
    (void)cap;
    return -ENOTSUP;
}
int lull_tls_key_update(lull_tls *tls) {
    (void)tls;
    return -ENOTSUP;
}
const char *lull_tls_error_string(const lull_tls *tls) {
    (void)tls;
    return "lull was built without OpenSSL";
}

#else /* LULL_HAVE_OPENSSL */

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "own_name.h"
#include "stream.h"

/* Framed plaintext: a 4-byte big-endian length before each frame, as on a
 * stream. */
#define HDR                       LULL__FRAME_HDR
/* TLS's largest record: stage this much plaintext per SSL_write, so small
 * frames share records; and read this much at a time. */
#define RECORD                    16384
/* The decrypted-bytes buffer, grown for a frame, shrinks back to its
 * set-up size (a record and a header) once it empties if it grew past this:
 * as a stream's read buffer (READ_SHRINK_RATIO in src/stream.c), frames up
 * to 16 records keep their room, and one big frame's is not held for the
 * life of an idle connection; bigger frames in a row keep theirs from the
 * second on (T_BIG_RUN). */
#define PBUF_SHRINK_ABOVE         (16 * (RECORD + HDR))
/* A ciphertext chunk: four full records and their overhead fit, so a
 * flush point's output is one or a few frames on the stream. */
#define CHUNK                     ((size_t)64 << 10)
/* Chunks kept for reuse after they were written: enough for the stream's
 * default high-water mark twice over; more (after a burst of large
 * frames) are freed. */
#define SPARE_MAX                 4
/* 10 s: long enough for a slow client on a bad link, short enough that a
 * peer that stalls the handshake does not hold its connection for long. */
#define HANDSHAKE_TIMEOUT_DEFAULT 10000000000ull

/* lull_tls.state */
#define T_CLIENT                  0x001u /* the client's role */
#define T_STARTED                 0x002u /* the stream is connected: handshaking */
#define T_OPEN                    0x004u /* the handshake completed */
#define T_READING                 0x008u /* not paused by lull_endpoint_read_stop */
#define T_FULL                    0x010u /* the user saw queued >= high_water: drain owed */
#define T_SHUT                                                                 \
    0x020u                 /* lull_endpoint_shutdown: close_notify once the    \
                              queue is encrypted */
#define T_SHUT_SENT 0x040u /* ... sent */
#define T_RESUME    0x080u /* event task: feed what was saved while paused */
#define T_FAIL      0x100u /* event task: close with `error` */
#define T_CLOSE_CB  0x200u /* closed; event task: on_close(`error`) */
#define T_KEYUPD    0x400u /* a key update to send at the flush point */
#define T_LIVE      0x800u /* set up and not closed */
#define T_RAW                                                                  \
    0x1000u             /* plaintext is bytes, not framed (the stream          \
                           under it is always raw) */
#define T_NOMEM 0x2000u /* a ciphertext chunk could not be allocated */
#define T_STALL                                                                \
    0x4000u /* reading stopped: the peer asks for answers it does not read;    \
               the release of those that leave reads on (chunk_release) */
#define T_PEER_SHUT                                                            \
    0x8000u /* the peer's close_notify came while a shutdown still had         \
               bytes to send: they leave, then ours, and the stream's EOF      \
               closes (peer_closed) */
/* The decrypted-bytes buffer last emptied after a big frame (pbuf_emptied). */
#define T_BIG_RUN 0x10000u

typedef struct chunk chunk;
struct chunk {
    lull_frame frame;       /* sent on the stream as a raw frame */
    chunk *next;            /* the filling list or the spare list */
    lull_tls *owner;        /* whose spare list it returns to */
    lull_frame *plain;      /* the user's frames whose last record is in it, */
    lull_frame *plain_tail; /* released once it is written */
    size_t used;
    unsigned char bytes[CHUNK];
};

/* The chunk lists: filled (oldest first, the last one filling) and spare. */
typedef struct outq {
    chunk *head, *tail, *spare;
    int nspare;
    size_t written;   /* all OpenSSL ever wrote: what a call wrote is a delta */
    size_t answers;   /* written by SSL_read (answers to the peer's key
                         updates, its renegotiation attempts) since the
                         stream was last seen below its mark */
    size_t head_done; /* of the head frame's bytes on the wire (its length
                         first, if framed), those already sealed: a frame
                         larger than the stream's mark is sealed a slice
                         per pass */
    uint64_t handshake_ns; /* the handshake's timeout (a connect starts it
                              once connected) */
    lull_frame *plain_done, *plain_done_tail; /* the user's frames whose chunks
                         were written (or dropped): released by progress,
                         in a callback context of ours */
    /* A client's server_name when it is an IP address, which is sent as
     * no SNI (RFC 6066): the name its session is kept under
     * (on_new_session). INET6_ADDRSTRLEN: the longest literal. */
    char ip_name[INET6_ADDRSTRLEN];
} outq;

typedef struct guard guard;
struct guard {
    guard *outer;
    void *buf; /* the plaintext buffer, to free on leaving */
    bool closed;
};

struct lull_tls_ctx {
    SSL_CTX *ssl;
    bool server;
    bool verify;         /* a client verifies the server */
    unsigned char *alpn; /* wire format: length-prefixed names */
    unsigned alpn_len;
    atomic_int refs;      /* the owner's, and one per connection */
    pthread_mutex_t lock; /* the session slot */
    SSL_SESSION *session; /* a client's last session, for host */
    char *session_host;
};

static inline lull_tls *of_ep(lull_endpoint *ep) {
    return LULL_CONTAINER_OF(ep, lull_tls, ep);
}
static inline lull_tls *of_stream(lull_stream *s) {
    return LULL_CONTAINER_OF(s, lull_tls, stream);
}
static bool framed(const lull_tls *t) {
    return !(t->state & T_RAW);
}
static outq *out_of(lull_tls *t) {
    return (outq *)t->out;
}

/* Not inlined: GCC's -Wdangling-pointer cannot follow that every path out
 * of the caller takes the record off again (guard_leave, guards_close). */
__attribute__((noinline)) static void guard_enter(lull_tls *t, guard *g) {
    g->outer = t->guard;
    g->buf = NULL;
    g->closed = false;
    t->guard = g;
}

static bool guard_leave(lull_tls *t, guard *g) {
    if (g->closed) {
        free(g->buf);
        return false;
    }
    t->guard = g->outer;
    return true;
}

static void guards_close(lull_tls *t, void *buf) {
    guard *g = t->guard, *last = NULL;
    for (; g; g = g->outer) {
        g->closed = true;
        last = g;
    }
    if (last) {
        last->buf = buf;
    } else {
        free(buf);
    }
    t->guard = NULL;
}

static void release_list(lull_frame *f) {
    while (f) {
        lull_frame *next = f->next;
        lull__frame_release(f);
        f = next;
    }
}

/* Records the failure's words for lull_tls_error_string and empties this
 * thread's OpenSSL error queue, which must not leak into the next
 * connection's calls. */
static void set_why(lull_tls *t, const char *what) {
    snprintf(t->why, sizeof t->why, "%s", what);
}

/* Empties this thread's OpenSSL error queue before the SSL calls whose
 * failure is read from it (an error user code left there would read as
 * ours): before each SSL_read, since on_frame ran in between. Looked at
 * first (some 200 instructions): ERR_clear_error walks and frees all 16
 * slots, some 800, and an empty queue is the rule. */
static void errors_clear(void) {
    if (ERR_peek_error() != 0) ERR_clear_error();
}

/* ---------------------------------------------------------------- BIO */

/* OpenSSL's reads take the bytes the stream delivered (t->in); its writes
 * append to the chunks. Never a system call: the stream does those. */
static int bio_write(BIO *b, const char *buf, int len) {
    lull_tls *t = BIO_get_data(b);
    outq *q = out_of(t);
    int done = 0;
    t->state &= ~T_NOMEM; /* says the last write's fate, not an earlier one's */
    while (done < len) {
        chunk *c = q->tail;
        if (!c || c->used == CHUNK) {
            c = q->spare;
            if (c) {
                q->spare = c->next;
                q->nspare--;
            } else {
                c = malloc(sizeof *c);
                if (!c) {
                    /* OpenSSL sees only a failed write: failure() reads
                     * this to say -ENOMEM, not a TLS failure. */
                    t->state |= T_NOMEM;
                    return done ? done : -1;
                }
                c->owner = t;
            }
            c->used = 0;
            c->next = NULL;
            c->plain = c->plain_tail = NULL;
            if (q->tail) {
                q->tail->next = c;
            } else {
                q->head = c;
            }
            q->tail = c;
        }
        size_t n = CHUNK - c->used;
        if (n > (size_t)(len - done)) n = (size_t)(len - done);
        memcpy(c->bytes + c->used, buf + done, n);
        c->used += n;
        done += (int)n;
    }
    q->written += (size_t)len;
    return len;
}

static int bio_read(BIO *b, char *buf, int len) {
    lull_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (t->in_len == 0) {
        BIO_set_retry_read(b);
        return -1;
    }
    size_t n = (size_t)len < t->in_len ? (size_t)len : t->in_len;
    memcpy(buf, t->in, n);
    t->in += n;
    t->in_len -= n;
    return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b) {
    BIO_set_init(b, 1);
    return 1;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

/* One method for the process, made on first use and kept (OpenSSL keeps
 * its own tables as long). */
static void bio_method_make(void) {
    BIO_METHOD *m =
        BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "lull");
    if (!m) return;
    BIO_meth_set_write(m, bio_write);
    BIO_meth_set_read(m, bio_read);
    BIO_meth_set_ctrl(m, bio_ctrl);
    BIO_meth_set_create(m, bio_create);
    bio_method = m;
}

/* ------------------------------------------------------------- chunks */

static void append_list(lull_frame **head, lull_frame **tail, lull_frame *f,
                        lull_frame *last) {
    if (!f) return;
    if (*tail) {
        (*tail)->next = f;
    } else {
        *head = f;
    }
    *tail = last;
}

/* The user's frames a chunk carries go to the written list (it was
 * written, or is dropped): progress releases them, or the teardown. */
static void chunk_give_plain(outq *q, chunk *c) {
    append_list(&q->plain_done, &q->plain_done_tail, c->plain, c->plain_tail);
    c->plain = c->plain_tail = NULL;
}

/* A chunk the stream wrote (or discarded): spare again, and the user's
 * frames it ends released by progress at the flush point (not here: the
 * stream is inside its own release loop, where a close of ours would free
 * chunks it still holds). Runs at the stream's flush point: with frames
 * still waiting for room (encryption stopped at the stream's mark, which
 * the stream may never have reached, so no drain will come), encrypt more
 * at the next flush point. */
static void fail_later(lull_tls *t, int reason);

static void chunk_release(lull_frame *f) {
    chunk *c = LULL_CONTAINER_OF(f, chunk, frame);
    lull_tls *t = c->owner;
    outq *q = out_of(t);
    if (!q) { /* torn down: nothing of ours runs again */
        release_list(c->plain);
        free(c);
        return;
    }
    bool plain = c->plain != NULL;
    chunk_give_plain(q, c);
    if ((t->head || plain) && (t->state & T_OPEN) &&
        !(t->ep.flags & LULL__EP_CLOSED))
        lull__at_flush(t->loop, &t->flush);
    /* Stalled on answers the peer did not read, and it read them: read
     * on. Here, not in the stream's on_drain, which a shutdown ends. */
    if ((t->state & T_STALL) && !(t->ep.flags & LULL__EP_CLOSED) &&
        t->stream.ep.queued < t->stream.ep.high_water) {
        t->state = (t->state & ~T_STALL) | T_RESUME;
        lull_task_post(t->loop, &t->event);
    }
    /* After the peer's close_notify (peer_closed), ours and all before it
     * were written: the connection is done, closed with 0 in a later
     * turn. The peer's EOF is not waited for: a peer may hold its socket
     * open once it read our close_notify. */
    if ((t->state & (T_PEER_SHUT | T_SHUT_SENT)) ==
            (T_PEER_SHUT | T_SHUT_SENT) &&
        t->stream.ep.queued == 0 && !(t->ep.flags & LULL__EP_CLOSED))
        fail_later(t, 0);
    if (q->nspare >= SPARE_MAX) {
        free(c);
        return;
    }
    c->next = q->spare;
    q->spare = c;
    q->nspare++;
}

/* Hands the filled chunks to the stream. 0, or the stream's refusal
 * (closed under us): the chunks are dropped. */
static int send_out(lull_tls *t) {
    outq *q = out_of(t);
    int rc = 0;
    while (q->head) {
        chunk *c = q->head;
        q->head = c->next;
        if (!q->head) q->tail = NULL;
        if (c->used == 0 || rc < 0) {
            chunk_give_plain(q, c);
            free(c);
            continue;
        }
        c->frame = (lull_frame){
            .bytes = c->bytes, .len = c->used, .release = chunk_release};
        t->cipher_bytes += c->used;
        rc = lull_endpoint_send(&t->stream.ep, &c->frame);
        if (rc < 0) {
            chunk_give_plain(q, c);
            free(c);
        }
    }
    return rc;
}

/* ---------------------------------------------------------- failures */

/* Is this OpenSSL reason a certificate refused, by us or the peer? */
static bool cert_reason(int r) {
    switch (r) {
    case SSL_R_CERTIFICATE_VERIFY_FAILED:
    case SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE:
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
        return true;
    default:
        return false;
    }
}

/* The reason an SSL call failed with: -EKEYREJECTED for a certificate
 * refused, else `otherwise`; the words go to lull_tls_error_string. */
static int failure(lull_tls *t, int otherwise) {
    /* The last error names the failure; a failed allocation is first in
     * the queue, with OpenSSL's "internal error" (or "BUF lib", "EVP lib")
     * on top of it: any one in the queue is why. The queue is emptied
     * here anyway. */
    unsigned long e = 0, x;
    bool nomem = t->state & T_NOMEM;
    while ((x = ERR_get_error()) != 0) {
        e = x;
        if (ERR_GET_REASON(x) == ERR_R_MALLOC_FAILURE) nomem = true;
    }
    int r = ERR_GET_REASON(e);
    const char *s = e ? ERR_reason_error_string(e) : NULL;
    long v = t->ssl ? SSL_get_verify_result(t->ssl) : X509_V_OK;
    int reason = otherwise;
    if (nomem) {
        /* Out of memory here, not anything the peer did. */
        set_why(t, "out of memory");
        reason = -ENOMEM;
    } else if (r == SSL_R_CERTIFICATE_VERIFY_FAILED && v != X509_V_OK) {
        snprintf(t->why, sizeof t->why, "certificate verify failed: %s",
                 X509_verify_cert_error_string(v));
        reason = -EKEYREJECTED;
    } else {
        set_why(t, s ? s : "TLS failure");
        if (cert_reason(r)) reason = -EKEYREJECTED;
    }
    ERR_clear_error();
    return reason;
}

/* Takes the SSL object, the buffers and the stream down; returns the
 * frames not yet encrypted, for the caller to release. The stream closes
 * without a callback (its struct is ours again at once); what the last
 * write attempt did not write is dropped. */
static lull_frame *teardown(lull_tls *t, int reason, bool stream_open) {
    t->ep.flags |= LULL__EP_CLOSED; /* first: the stream's releases see it */
    lull_task_cancel(&t->flush);
    lull_task_cancel(&t->event);
    lull_timer_stop(&t->timer);
    if (stream_open && !lull_endpoint_closed(&t->stream.ep)) {
        /* An alert OpenSSL wrote, a close_notify: not from a forked copy,
         * whose session is the parent's (keys and sequence numbers: a
         * record of the copy's would end or corrupt it at the peer). */
        if (!lull__stream_inherited(&t->stream)) (void)send_out(t);
        t->stream.ep.on_close = NULL;
        lull_endpoint_close(&t->stream.ep, reason);
    }
    outq *q = out_of(t);
    lull_frame *written = NULL;
    if (q) {
        for (chunk *c = q->head; c;) {
            chunk *n = c->next;
            chunk_give_plain(q, c);
            free(c);
            c = n;
        }
        written = q->plain_done;
        for (chunk *c = q->spare; c;) {
            chunk *n = c->next;
            free(c);
            c = n;
        }
        free(q);
        t->out = NULL;
    }
    if (t->ssl) SSL_free(t->ssl);
    t->ssl = NULL;
    ERR_clear_error();
    if (t->ctx) lull_tls_ctx_free(t->ctx);
    t->ctx = NULL;
    guards_close(t, t->pbuf);
    t->pbuf = NULL;
    t->pcap = t->pstart = t->pend = 0;
    free(t->stage);
    free(t->saved);
    t->stage = t->saved = NULL;
    t->saved_cap = t->saved_len = 0;
    t->in = NULL;
    t->in_len = 0;
    lull_frame *list = t->head;
    if (written) { /* encrypted first: released first */
        lull_frame *w = written;
        while (w->next)
            w = w->next;
        w->next = list;
        list = written;
    }
    t->head = t->tail = NULL;
    t->state = 0;
    t->ep.flags |= LULL__EP_CLOSED;
    t->ep.queued = 0;
    return list;
}

/* The struct is the owner's again: out of the set of handles in use
 * (see prepare), right before its close callback, or at its teardown when
 * none is owed. */
static void release(lull_tls *t) {
    lull__inuse_remove(t);
}

/* Undoes prepare for a stream that could not be set up. */
static void unprepare(lull_tls *t) {
    lull_frame *list = teardown(t, 0, false);
    release(t);
    release_list(list);
}

/* A close the transport made, in a callback context: down, frames back,
 * then on_close, the last. */
static void fail_now(lull_tls *t, int reason, bool stream_open) {
    if (!(t->state & T_LIVE)) return;
    lull_frame *list = teardown(t, reason, stream_open);
    if (!t->ep.on_close) {
        release(t);
        release_list(list);
        return;
    }
    guard g;
    guard_enter(t, &g);
    release_list(list);
    /* A release callback that set the struct up again made it another
     * connection, whose close callback is not ours to call. */
    if (t->guard != &g) {
        LULL_ASSERT(false, "lull: a TLS connection set up again before its "
                           "close callback ran: reuse it in on_close");
        return;
    }
    t->guard = g.outer;
    release(t);
    t->ep.on_close(&t->ep, reason);
}

/* A failure found where no callback may run: sends refused now, the close
 * in a later turn. */
static void fail_later(lull_tls *t, int reason) {
    if (t->state & T_FAIL) return;
    t->state |= T_FAIL;
    t->error = reason;
    t->ep.flags |= LULL__EP_PEER_GONE;
    lull_task_post(t->loop, &t->event);
}

/* ------------------------------------------------------------ writing */

/* Encrypts `len` bytes: the chunks take what OpenSSL writes. */
static int seal(lull_tls *t, const void *p, size_t len) {
    while (len > 0) {
        int n = len > INT32_MAX ? INT32_MAX : (int)len;
        int w = SSL_write(t->ssl, p, n);
        if (w <= 0) return failure(t, -EPROTO);
        p = (const char *)p + w;
        len -= (size_t)w;
    }
    return 0;
}

/* Encrypts the queued frames while the stream is writable: small ones
 * gathered in the stage, one SSL_write per 16 KiB; a frame's payload of a
 * record or more straight from its bytes, as much of it as the stream
 * takes below its mark (the rest in a later pass: a 100 MB send is not
 * sealed at once, its size again in memory and a long stall). Encrypted
 * frames move to *done. 0 or a negative errno. */
static int encrypt_queue(lull_tls *t, lull_frame **done) {
    /* The stream's queue grows only when the chunks are handed over, after
     * this: bound the pass by what it can take below its mark. */
    lull_endpoint *sep = &t->stream.ep;
    outq *q = out_of(t);
    size_t budget = 0, sealed = 0;
    if (lull_endpoint_writable(sep)) budget = sep->high_water - sep->queued;
    size_t st = 0;
    bool hdr = framed(t);
    lull_frame **dtail = done;
    while (*dtail)
        dtail = &(*dtail)->next;
    int rc = 0;
    while (t->head && sealed < budget) {
        lull_frame *f = t->head;
        if (hdr && q->head_done == 0) {
            if (st + HDR > RECORD) {
                if ((rc = seal(t, t->stage, st)) < 0) return rc;
                st = 0;
            }
            uint32_t be = htonl((uint32_t)f->len);
            memcpy(t->stage + st, &be, HDR);
            st += HDR;
            sealed += HDR;
            q->head_done = HDR;
        }
        size_t at = q->head_done - (hdr ? HDR : 0); /* payload sealed */
        const unsigned char *p = f->bytes + at;
        size_t left = f->len - at;
        while (left > 0) {
            if (st == RECORD) {
                if ((rc = seal(t, t->stage, st)) < 0) return rc;
                st = 0;
            }
            if (st == 0 && left >= RECORD) { /* no copy for the bulk */
                if (sealed >= budget) break; /* the rest in a later pass */
                size_t n = left - left % RECORD, room = budget - sealed;
                if (n > room) n = room + (RECORD - room % RECORD) % RECORD;
                if ((rc = seal(t, p, n)) < 0) return rc;
                p += n;
                left -= n;
                sealed += n;
                continue;
            }
            size_t n = RECORD - st < left ? RECORD - st : left;
            memcpy(t->stage + st, p, n);
            st += n;
            p += n;
            left -= n;
            sealed += n;
        }
        if (left > 0) { /* a slice of it sealed */
            q->head_done = (hdr ? HDR : 0) + f->len - left;
            break;
        }
        q->head_done = 0;
        t->head = f->next;
        if (!t->head) t->tail = NULL;
        size_t cost = lull__frame_cost(&t->ep, f->len);
        t->ep.queued = cost < t->ep.queued ? t->ep.queued - cost : 0;
        f->next = NULL;
        *dtail = f;
        dtail = &f->next;
    }
    if (st > 0) rc = seal(t, t->stage, st);
    return rc;
}

/* ------------------------------------------------------------ reading */

/* Room for `need` bytes from pstart: compact, then grow (framed). */
static bool make_room(lull_tls *t, size_t need) {
    if (t->pstart > 0) {
        memmove(t->pbuf, t->pbuf + t->pstart, t->pend - t->pstart);
        t->pend -= t->pstart;
        t->pstart = 0;
    }
    if (need <= t->pcap) return true;
    return lull__frame_buf_grow(&t->pbuf, &t->pcap, need, t->ep.max_frame);
}

/* Back to the set-up size, unless a frame callback of ours runs (its bytes
 * point into the buffer). A failed realloc keeps the buffer as it was. */
static void shrink_pbuf(lull_tls *t) {
    if (t->guard) return;
    unsigned char *b = realloc(t->pbuf, RECORD + HDR);
    if (!b) return;
    t->pbuf = b;
    t->pcap = RECORD + HDR;
}

/* The buffer emptied while grown past PBUF_SHRINK_ABOVE, `filled` bytes in
 * it since it last emptied: shrunk, unless those bytes and the last ones
 * were big frames (a run, which would otherwise grow it again from one
 * record for every frame), as a stream's read buffer (emptied_grown in
 * src/stream.c). A smaller frame that empties it ends the run. */
static void pbuf_emptied(lull_tls *t, size_t filled) {
    bool big = filled > PBUF_SHRINK_ABOVE;
    if (big && (t->state & T_BIG_RUN)) return;
    if (big)
        t->state |= T_BIG_RUN;
    else
        t->state &= ~T_BIG_RUN;
    shrink_pbuf(t);
}

/* Hands the whole buffered frames to on_frame while reading. False when
 * the connection closed. */
static bool deliver_frames(lull_tls *t) {
    while ((t->state & T_READING) && t->pend - t->pstart >= HDR) {
        const unsigned char *p = t->pbuf + t->pstart;
        size_t len = lull__frame_len(p);
        if (len > t->ep.max_frame) {
            set_why(t, "frame longer than max_frame");
            fail_now(t, -EMSGSIZE, true);
            return false;
        }
        /* Cut short: read_plain makes room as the body's bytes arrive,
         * not for the length the header announces (a peer announcing
         * 16 MiB and sending nothing more holds no 16 MiB). */
        if (t->pend - t->pstart < HDR + len) break;
        t->pstart += HDR + len;
        if (!t->ep.on_frame) continue;
        guard g;
        guard_enter(t, &g);
        t->ep.on_frame(&t->ep, p + HDR, len);
        if (!guard_leave(t, &g)) return false;
    }
    if (t->pstart == t->pend) {
        size_t filled = t->pend;
        t->pstart = t->pend = 0;
        /* (A call with nothing come since, read_plain's first, is none.) */
        if (LULL_UNLIKELY(t->pcap > PBUF_SHRINK_ABOVE) && filled)
            pbuf_emptied(t, filled);
        else if (LULL_UNLIKELY(t->state & T_BIG_RUN) && filled)
            t->state &= ~T_BIG_RUN; /* a small frame between big ones */
    }
    return true;
}

/* The peer's EOF after its close_notify (peer_closed): the stream stays
 * open for what this end still writes; its shutdown then closes it. */
static void on_stream_end(lull_stream *s) {
    (void)s;
}

/* The peer's close_notify: answer it and close with 0 (a frame cut short
 * is a protocol error, as at a stream's EOF). Unless this end still has
 * frames to encrypt, or records the stream has not written: a shutdown
 * of ours was asked to deliver them before the end; and frames sent
 * without one are the answer to what came with the close_notify (TLS 1.3
 * makes it a half-close), which the close would drop behind a clean
 * close_notify (the close's last write takes what the socket takes, and
 * a peer that reads later found the rest cut off), so a shutdown begins,
 * as a stream's EOF writes its queue before the end; further sends are
 * refused. It goes on, reading nothing more, and once its close_notify
 * was written (chunk_release), or the stream's EOF came (on_stream_close),
 * it ends with 0. True then. */
static bool peer_closed(lull_tls *t) {
    int reason = 0;
    if (framed(t) && t->pend > t->pstart) {
        set_why(t, "close_notify inside a frame");
        reason = -EPROTO;
    } else if (t->head || t->stream.ep.queued > 0) {
        if (!(t->state & T_SHUT)) {
            t->state |= T_SHUT;
            t->ep.flags |= LULL__EP_PEER_GONE;
            lull__at_flush(t->loop, &t->flush);
        }
        t->state |= T_PEER_SHUT;
        t->in_len = 0;
        lull_stream_set_on_end(&t->stream, on_stream_end);
        ERR_clear_error();
        return true;
    } else {
        (void)SSL_shutdown(t->ssl);
    }
    ERR_clear_error();
    fail_now(t, reason, true);
    return false;
}

/* Decrypts and delivers while reading. False when the connection closed. */
static bool read_plain(lull_tls *t) {
    if (t->state & T_PEER_SHUT) { /* nothing after its close_notify */
        t->in_len = 0;
        return true;
    }
    /* Whole frames a pause inside on_frame left in the buffer: a resume
     * delivers them without waiting for the peer's next bytes. */
    if (framed(t) && !deliver_frames(t)) return false;
    while (t->state & T_READING) {
        /* No ciphertext left and no record half read: SSL_read could only
         * say WANT_READ (it reads nothing without bytes), at some 1500
         * instructions with SSL_get_error, twice a request-reply. */
        if (t->in_len == 0 && !SSL_has_pending(t->ssl)) return true;
        /* Records of ours the peer asked for (a key update it requests
         * back, a warning that renegotiation is refused) are not the
         * application's sends, so its backpressure cannot hold them: a
         * peer asking without end and never reading would grow the
         * stream's queue as fast as it sends. Past the stream's mark and
         * as much again of answers, read nothing more until it drains. */
        outq *q = out_of(t);
        lull_endpoint *sep = &t->stream.ep;
        if (sep->queued < sep->high_water) {
            q->answers = 0;
        } else if (q->answers > sep->high_water) {
            t->state |= T_STALL;
            return true;
        }
        size_t written = q->written;
        if (!framed(t)) t->pstart = t->pend = 0;
        if (t->pcap - t->pend < RECORD / 4) {
            /* make_room stops at the frame limit: what room there is. */
            if (!make_room(t, t->pend - t->pstart + RECORD) ||
                t->pcap == t->pend) {
                fail_now(t, -ENOMEM, true);
                return false;
            }
        }
        size_t room = t->pcap - t->pend;
        size_t before = t->in_len;
        errors_clear(); /* on_frame may have used OpenSSL too */
        int n = SSL_read(t->ssl, t->pbuf + t->pend,
                         room > INT32_MAX ? INT32_MAX : (int)room);
        q->answers += q->written - written;
        if (n <= 0) {
            int e = SSL_get_error(t->ssl, n);
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                errors_clear();
                /* A post-handshake message (a ticket, a key update) can
                 * end the call with records still to read. */
                if (t->in_len > 0 && t->in_len < before) continue;
                return true;
            }
            if (e == SSL_ERROR_ZERO_RETURN) return peer_closed(t);
            fail_now(t, failure(t, -EPROTO), true);
            return false;
        }
        if (framed(t)) {
            t->pend += (size_t)n;
            if (!deliver_frames(t)) return false;
        } else if (t->ep.on_frame) {
            guard g;
            guard_enter(t, &g);
            t->ep.on_frame(&t->ep, t->pbuf, (size_t)n);
            if (!guard_leave(t, &g)) return false;
        }
    }
    return true;
}

/* --------------------------------------------------------- the engine */

/* Moves the connection on: the handshake, reading, then encrypting the
 * queue (the stream permitting), a key update, a close_notify after a
 * shutdown, and the chunks out. A callback context. False when the
 * connection closed. */
static bool progress(lull_tls *t) {
    if (!(t->state & T_STARTED)) return true;
    while (!(t->state & T_OPEN)) {
        size_t before = t->in_len;
        errors_clear();
        int r = SSL_do_handshake(t->ssl);
        if (r != 1) {
            int e = SSL_get_error(t->ssl, r);
            if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
                fail_now(t, failure(t, -ECONNABORTED), true);
                return false;
            }
            ERR_clear_error();
            if (t->in_len > 0 && t->in_len < before) continue;
            if (send_out(t) < 0) return true; /* the stream tells */
            return true;
        }
        t->state |= T_OPEN;
        lull_timer_stop(&t->timer);
        /* Paused during it: the socket stops now (lull__tls_read). */
        if (!(t->state & T_READING)) (void)lull_stream_read_stop(&t->stream);
        if (send_out(t) < 0) return true;
        if (t->on_handshake) {
            guard g;
            guard_enter(t, &g);
            t->on_handshake(t);
            if (!guard_leave(t, &g)) return false;
        }
    }
    if (!read_plain(t)) return false;
    lull_frame *done = NULL;
    if (t->head && !(t->state & T_SHUT_SENT)) {
        errors_clear(); /* a failure's words are ours (on_frame ran) */
        int rc = encrypt_queue(t, &done);
        if (rc < 0) {
            /* The close releases them all, encrypted or not. */
            lull_frame **end = &done;
            while (*end)
                end = &(*end)->next;
            *end = t->head;
            t->head = done;
            fail_now(t, rc, true);
            return false;
        }
        if (done) {
            t->flushes++;
            /* Released once the chunk holding their last record is
             * written (chunk_release); with no record made (empty raw
             * frames), at the end of this pass. */
            lull_frame *last = done;
            while (last->next)
                last = last->next;
            outq *q = out_of(t);
            if (q->tail)
                append_list(&q->tail->plain, &q->tail->plain_tail, done, last);
            else
                append_list(&q->plain_done, &q->plain_done_tail, done, last);
        }
    }
    if (t->state & T_KEYUPD) {
        t->state &= ~T_KEYUPD;
        if (SSL_key_update(t->ssl, SSL_KEY_UPDATE_REQUESTED) == 1)
            (void)SSL_do_handshake(t->ssl);
        ERR_clear_error();
    }
    bool shut = (t->state & (T_SHUT | T_SHUT_SENT)) == T_SHUT && !t->head;
    if (shut) {
        t->state |= T_SHUT_SENT;
        (void)SSL_shutdown(t->ssl);
        ERR_clear_error();
    }
    (void)send_out(t);
    if (shut) (void)lull_stream_shutdown(&t->stream);
    bool drain = (t->state & T_FULL) && t->ep.queued < t->ep.high_water &&
                 !(t->ep.flags & (LULL__EP_CLOSED | LULL__EP_PEER_GONE));
    if (drain) t->state &= ~T_FULL;
    outq *q = out_of(t);
    lull_frame *written = q->plain_done;
    q->plain_done = q->plain_done_tail = NULL;
    if (!written && !drain) return true;
    guard g;
    guard_enter(t, &g);
    release_list(written);
    if (drain && !g.closed && t->ep.on_drain) t->ep.on_drain(&t->ep);
    return guard_leave(t, &g);
}

/* Keeps ciphertext a pause left unread. From `saved` itself (a resume,
 * which set saved_len to 0) it moves to the front. */
static bool save(lull_tls *t, const unsigned char *p, size_t n) {
    if (t->saved && p >= t->saved && p < t->saved + t->saved_cap) {
        memmove(t->saved + t->saved_len, p, n);
        t->saved_len += n;
        return true;
    }
    size_t need = t->saved_len + n;
    if (need > t->saved_cap) {
        unsigned char *b = realloc(t->saved, need);
        if (!b) return false;
        t->saved = b;
        t->saved_cap = need;
    }
    memcpy(t->saved + t->saved_len, p, n);
    t->saved_len += n;
    return true;
}

/* Feeds ciphertext to OpenSSL and moves on; what a pause left unread is
 * kept for the resume, and the stream stops reading meanwhile. */
static void feed(lull_tls *t, const void *bytes, size_t len) {
    t->in = bytes;
    t->in_len = len;
    if (!progress(t)) return;
    const unsigned char *rest = t->in;
    size_t n = t->in_len;
    t->in = NULL;
    t->in_len = 0;
    if (n == 0) return;
    if (!save(t, rest, n)) {
        fail_now(t, -ENOMEM, true);
        return;
    }
    (void)lull_stream_read_stop(&t->stream);
    /* Reading, yet OpenSSL left bytes: try them again in a later turn
     * rather than hold them (stalled: once our answers left). */
    if ((t->state & (T_READING | T_STALL)) == T_READING) {
        t->state |= T_RESUME;
        lull_task_post(t->loop, &t->event);
    }
}

static void on_cipher(lull_endpoint *ep, const void *bytes, size_t len) {
    lull_tls *t = of_stream(LULL_CONTAINER_OF(ep, lull_stream, ep));
    if (t->saved_len > 0) { /* paused: behind what is saved */
        if (!save(t, bytes, len)) fail_now(t, -ENOMEM, true);
        return;
    }
    feed(t, bytes, len);
}

static void on_stream_drain(lull_endpoint *ep) {
    lull_tls *t = of_stream(LULL_CONTAINER_OF(ep, lull_stream, ep));
    if (t->head) progress(t);
}

/* The stream closed by itself (a reset, an EOF, a failed connect): the
 * connection with it. */
static void on_stream_close(lull_endpoint *ep, int reason) {
    lull_tls *t = of_stream(LULL_CONTAINER_OF(ep, lull_stream, ep));
    if (reason == 0 && (t->state & T_PEER_SHUT)) {
        /* Both close_notifys went: a clean end. */
    } else if (reason == 0) {
        if (!(t->state & T_OPEN)) {
            set_why(t, "EOF during the handshake");
            reason = -ECONNABORTED;
        } else {
            set_why(t, "EOF without close_notify (truncated)");
            reason = -EPROTO;
        }
    } else if (!t->why[0]) {
        set_why(t, strerror(-reason));
    }
    fail_now(t, reason, false);
}

static void on_connected(lull_stream *s, int status) {
    lull_tls *t = of_stream(s);
    if (status < 0) return; /* on_stream_close follows */
    t->state |= T_STARTED;
    /* The handshake's clock starts now: the connect has its own
     * (connect_timeout_ns), and a handshake timer from the connect cut it
     * short, saying "handshake timed out" of one not begun. */
    lull_timer_start(&t->timer, out_of(t)->handshake_ns, 0);
    progress(t);
}

static void flush_task(lull_task *task) {
    lull_tls *t = LULL_CONTAINER_OF(task, lull_tls, flush);
    progress(t);
}
LULL__OWN_NAME(flush_task, "lull_tls encrypt at flush", lull_tls, flush);

static void event_task(lull_task *task) {
    lull_tls *t = LULL_CONTAINER_OF(task, lull_tls, event);
    if (t->state & T_CLOSE_CB) {
        t->state = 0;
        release(t);
        if (t->ep.on_close) t->ep.on_close(&t->ep, t->error);
        return;
    }
    if (t->state & T_FAIL) {
        fail_now(t, t->error, true);
        return;
    }
    if (t->state & T_RESUME) {
        t->state &= ~T_RESUME;
        if ((t->state & (T_READING | T_STALL)) != T_READING) return;
        size_t n = t->saved_len;
        t->saved_len = 0;
        guard g; /* feed may close and free `saved` */
        guard_enter(t, &g);
        feed(t, t->saved, n);
        if (!guard_leave(t, &g)) return;
        if ((t->state & T_READING) && t->saved_len == 0)
            (void)lull_stream_read_start(&t->stream);
    }
}
LULL__OWN_NAME(event_task, "lull_tls event", lull_tls, event);

static void on_timeout(lull_timer *timer) {
    lull_tls *t = LULL_CONTAINER_OF(timer, lull_tls, timer);
    set_why(t, "handshake timed out");
    fail_now(t, -ETIMEDOUT, true);
}
LULL__OWN_NAME(on_timeout, "lull_tls handshake timeout", lull_tls, timer);

/* ---------------------------------------------------------------- ops */

static void tls_send(lull_endpoint *ep, lull_frame *frame) {
    lull_tls *t = of_ep(ep);
    LULL_ASSERT_LOOP_THREAD(t->loop);
    frame->next = NULL;
    /* Rewritten in flight and sent again (lull__frame_check_unqueued): as
     * the last queued, linked again it was a cycle, encrypted for ever. */
    if (LULL_UNLIKELY(frame == t->tail)) {
        fail_later(t, -EBUSY);
        return;
    }
    lull__frame_check_unqueued(t->head, frame);
    if (t->tail) {
        t->tail->next = frame;
    } else {
        t->head = frame;
    }
    t->tail = frame;
    if (t->state & T_OPEN) lull__at_flush(t->loop, &t->flush);
    if (ep->queued >= ep->high_water) t->state |= T_FULL;
}

static void tls_close(lull_endpoint *ep, int reason) {
    lull_tls *t = of_ep(ep);
    LULL_ASSERT_LOOP_THREAD(t->loop);
    lull_frame *done = NULL;
    /* What was sent before the close leaves as far as the socket takes it
     * now, as on a stream, then close_notify; a forked copy writes nothing
     * (lull__stream_inherited). A slice at a time below the stream's mark,
     * each handed over (at the mark the stream writes inside the send),
     * until the socket is full: encrypting all of a long queue cost the
     * loop a second and its size again in memory, to be dropped at the
     * stream's close. Frames left over are dropped without close_notify,
     * so the peer sees the truncation. */
    if ((t->state & (T_OPEN | T_FAIL)) == T_OPEN &&
        !lull__stream_inherited(&t->stream)) {
        ERR_clear_error();
        if (!(t->state & T_SHUT_SENT)) {
            int rc = 0;
            while (rc == 0 && t->head && lull_endpoint_writable(&t->stream.ep))
                if ((rc = encrypt_queue(t, &done)) == 0 && send_out(t) < 0)
                    rc = -EPIPE;
            if (rc == 0 && !t->head) (void)SSL_shutdown(t->ssl);
        }
        ERR_clear_error();
    }
    lull_frame *list = teardown(t, reason, true);
    if (t->ep.on_close) {
        t->state = T_CLOSE_CB;
        t->error = reason;
        lull_task_post(t->loop, &t->event);
    } else {
        release(t);
    }
    release_list(done);
    release_list(list);
}

static void tls_fail(lull_endpoint *ep, int reason) {
    fail_later(of_ep(ep), reason);
}

const lull_frame_ops lull__tls_ops = {tls_send, tls_close, tls_fail};

int lull__tls_read(lull_endpoint *ep, bool on) {
    lull_tls *t = of_ep(ep);
    LULL_ASSERT_LOOP_THREAD(t->loop);
    if (!on) {
        t->state &= ~T_READING;
        /* The socket stops too, as a paused stream's: its idle clock
         * stands still (the stream counts no idle time while paused with
         * nothing to write) and the peer's bytes wait in the kernel, not
         * in `saved`. A handshake goes on (progress stops the socket once
         * it completes), and after the peer's close_notify the socket is
         * read to its EOF, which ends the connection. */
        if ((t->state & (T_OPEN | T_PEER_SHUT)) == T_OPEN)
            (void)lull_stream_read_stop(&t->stream);
        return 0;
    }
    if (t->state & T_READING) return 0;
    t->state |= T_READING;
    /* What waits (saved ciphertext, buffered frames, OpenSSL's own) comes
     * in a later turn; the stream reads again after it. */
    t->state |= T_RESUME;
    lull_task_post(t->loop, &t->event);
    return 0;
}

int lull__tls_shutdown(lull_endpoint *ep) {
    lull_tls *t = of_ep(ep);
    LULL_ASSERT_LOOP_THREAD(t->loop);
    if (t->state & T_SHUT) return 0;
    t->state |= T_SHUT;
    t->ep.flags |= LULL__EP_PEER_GONE;
    if (t->state & T_OPEN) lull__at_flush(t->loop, &t->flush);
    return 0;
}

/* ------------------------------------------------------------- setup */

/* The host a client's server_name names, as certificates and SNI carry
 * it, into buf: "[::1]" (a URL's form, which the connect calls take for a
 * host too) is the address inside, and a fully qualified "example.com."
 * is example.com (SNI has no final dot, RFC 6066, nor has a certificate's
 * name: it was checked as written, "hostname mismatch"). -EINVAL past
 * SNI's 255 bytes: no host has such a name (OpenSSL then sent none). */
#define HOST_MAX  255
static int host_of(const char *given, char buf[HOST_MAX + 1]) {
    size_t n = strlen(given);
    if (n > 2 && given[0] == '[' && given[n - 1] == ']' &&
        n - 2 < INET6_ADDRSTRLEN) {
        unsigned char ip[16];
        memcpy(buf, given + 1, n - 2);
        buf[n - 2] = '\0';
        if (inet_pton(AF_INET6, buf, ip) == 1) return 0;
    } else if (n >= 2 && given[n - 1] == '.' && given[n - 2] != '.') {
        n--;
    }
    if (n > HOST_MAX) return -EINVAL;
    memcpy(buf, given, n);
    buf[n] = '\0';
    return 0;
}

static int prepare(lull_loop *loop, lull_tls *t, lull_tls_ctx *ctx,
                   const lull_tls_options *o, lull_stream_options *so) {
    /* The memset below would re-initialise tasks and a stream a loop still
     * holds (a queued on_close lost, the ready queue cut): the stream's
     * own check comes too late to see it. A connection set up and not yet
     * told of its end (its stream open, its encryption or its close
     * callback queued) is in the process's set of handles in use, from
     * here to release(), on any loop: asked by address (t is garbage
     * before its first set-up), in one lookup, in every build. */
    int held = lull__inuse_add(t);
    LULL_ASSERT(held <= 0, "lull: a TLS connection set up again while open, "
                           "or before its on_close ran");
    if (held) return held < 0 ? held : -EBUSY;
    pthread_once(&bio_once, bio_method_make);
    if (!bio_method) {
        release(t);
        return -ENOMEM;
    }
    void *data = t->ep.data; /* the user's, kept */
    memset(t, 0, sizeof *t);
    t->ep.data = data;
    *so = o->stream;
    /* The records' stream is raw, unbounded (the plaintext queue holds
     * the bound), with the user's high-water mark on ciphertext. */
    so->flags = (o->stream.flags & LULL_STREAM_NAGLE) | LULL_STREAM_RAW;
    so->max_queued = 0;
    so->max_frame = 0;
    lull__endpoint_init(&t->ep, &lull__tls_ops, o->stream.max_frame,
                        o->stream.high_water, o->stream.max_queued);
    /* Framed, as on a stream: what a 4-byte length can say (a SIZE_MAX
     * limit wrapped the read buffer's bound, and a frame past a record
     * closed with -ENOMEM). */
    if (!(o->stream.flags & LULL_STREAM_RAW) &&
        t->ep.max_frame > LULL__FRAME_MAX)
        t->ep.max_frame = LULL__FRAME_MAX;
    /* Framed, each frame's 4-byte length counts as queued (src/frame.h),
     * as on a stream: it is plaintext to encrypt, and an empty frame
     * counted as 0 never turned the endpoint unwritable nor reached
     * max_queued while the queue grew. */
    if (!(o->stream.flags & LULL_STREAM_RAW)) t->ep.flags |= LULL__EP_FRAMED;
    t->loop = loop;
    lull_task_init(&t->flush, flush_task);
    lull_task_init(&t->event, event_task);
    lull_timer_init(loop, &t->timer, on_timeout);
    lull_timer_unref(&t->timer); /* a timeout alone keeps nothing alive */
    t->on_handshake = o->on_handshake;
    t->out = calloc(1, sizeof(outq));
    t->pcap = RECORD + HDR;
    t->pbuf = malloc(t->pcap);
    t->stage = malloc(RECORD);
    SSL *ssl = SSL_new(ctx->ssl);
    BIO *bio = ssl ? BIO_new(bio_method) : NULL;
    if (!t->out || !t->pbuf || !t->stage || !bio) {
        BIO_free(bio);
        SSL_free(ssl);
        free(t->out);
        free(t->pbuf);
        free(t->stage);
        t->out = t->pbuf = t->stage = NULL;
        t->ep.flags |= LULL__EP_CLOSED;
        ERR_clear_error();
        release(t);
        return -ENOMEM;
    }
    BIO_set_data(bio, t);
    SSL_set_bio(ssl, bio, bio);
    SSL_set_app_data(ssl, t);
    t->ssl = ssl;
    atomic_fetch_add(&ctx->refs, 1);
    t->ctx = ctx;
    if (!ctx->server) {
        t->state |= T_CLIENT;
        SSL_set_connect_state(ssl);
        char host[HOST_MAX + 1];
        const char *name = NULL;
        if (o->server_name && host_of(o->server_name, host) == 0) name = host;
        if (name) {
            unsigned char ip[16];
            bool literal = inet_pton(AF_INET, name, ip) == 1 ||
                           inet_pton(AF_INET6, name, ip) == 1;
            /* Refused only for want of memory: host_of bounds the name. */
            if (!literal && SSL_set_tlsext_host_name(ssl, name) != 1) {
                unprepare(t);
                return -ENOMEM;
            }
            if (literal) /* inet_pton took it: it fits */
                snprintf(out_of(t)->ip_name, sizeof out_of(t)->ip_name, "%.*s",
                         (int)sizeof out_of(t)->ip_name - 1, name);
            if (ctx->verify) {
                int ok = literal ? X509_VERIFY_PARAM_set1_ip_asc(
                                       SSL_get0_param(ssl), name)
                                 : SSL_set1_host(ssl, name);
                /* Failed (no memory), no name would be checked: any
                 * certificate the trusted CAs signed would pass. */
                if (ok != 1) {
                    unprepare(t);
                    return -ENOMEM;
                }
            }
            pthread_mutex_lock(&ctx->lock);
            if (ctx->session && ctx->session_host &&
                strcmp(ctx->session_host, name) == 0)
                SSL_set_session(ssl, ctx->session);
            pthread_mutex_unlock(&ctx->lock);
        }
    } else {
        SSL_set_accept_state(ssl);
    }
    ERR_clear_error();
    t->state |= T_LIVE | T_READING;
    if (o->stream.flags & LULL_STREAM_RAW) t->state |= T_RAW;
    return 0;
}

/* The stream is set up: our callbacks, the handshake's clock (for a
 * connect, from on_connected). */
static void attach(lull_tls *t, const lull_tls_options *o, bool connected) {
    lull__stream_own(&t->stream); /* no detach under the records */
    lull_endpoint_set_callbacks(&t->stream.ep, on_cipher, on_stream_drain,
                                on_stream_close);
    out_of(t)->handshake_ns = o->handshake_timeout_ns
                                  ? o->handshake_timeout_ns
                                  : HANDSHAKE_TIMEOUT_DEFAULT;
    if (connected) lull_timer_start(&t->timer, out_of(t)->handshake_ns, 0);
}

static bool args_ok(lull_tls *t, lull_tls_ctx *ctx, const lull_tls_options *o,
                    bool server) {
    if (!t || !ctx || ctx->server != server) return false;
    if (o->stream.flags & ~(LULL_STREAM_RAW | LULL_STREAM_NAGLE)) return false;
    if (!lull__marks_ok(o->stream.high_water, o->stream.max_queued))
        return false;
    /* A verifying client without a name to check would accept any
     * certificate a trusted CA signed for anyone. */
    if (!server && ctx->verify && !o->server_name) return false;
    /* Nor an empty one: OpenSSL takes SSL_set1_host(ssl, "") as "check
     * no name", the same hole. */
    if (!server && ctx->verify && !o->server_name[0]) return false;
    char host[HOST_MAX + 1];
    if (!server && o->server_name && host_of(o->server_name, host) < 0)
        return false;
    return true;
}

static const lull_tls_options no_options;

int lull_tls_accept(lull_server *srv, lull_tls *tls, lull_tls_ctx *ctx,
                    const lull_tls_options *opts) {
    const lull_tls_options *o = opts ? opts : &no_options;
    if (!srv || !srv->loop || !args_ok(tls, ctx, o, true)) return -EINVAL;
    lull_stream_options so;
    int rc = prepare(srv->loop, tls, ctx, o, &so);
    if (rc < 0) return rc;
    rc = lull_server_accept(srv, &tls->stream, &so);
    if (rc < 0) {
        unprepare(tls);
        return rc;
    }
    attach(tls, o, true);
    tls->state |= T_STARTED; /* the ClientHello's bytes start it */
    return 0;
}

static int connect_common(lull_loop *loop, lull_tls *tls, lull_tls_ctx *ctx,
                          const char *host, int port, const char *path,
                          const lull_tls_options *opts) {
    const lull_tls_options *o = opts ? opts : &no_options;
    if (!loop || !args_ok(tls, ctx, o, false)) return -EINVAL;
    lull_stream_options so;
    int rc = prepare(loop, tls, ctx, o, &so);
    if (rc < 0) return rc;
    rc = path ? lull_stream_connect_unix(loop, &tls->stream, path, &so,
                                         on_connected)
              : lull_stream_connect_tcp(loop, &tls->stream, host, port, &so,
                                        on_connected);
    if (rc < 0) {
        unprepare(tls);
        return rc;
    }
    attach(tls, o, false);
    return 0;
}

int lull_tls_connect_tcp(lull_loop *loop, lull_tls *tls, lull_tls_ctx *ctx,
                         const char *host, int port,
                         const lull_tls_options *opts) {
    return connect_common(loop, tls, ctx, host, port, NULL, opts);
}

int lull_tls_connect_unix(lull_loop *loop, lull_tls *tls, lull_tls_ctx *ctx,
                          const char *path, const lull_tls_options *opts) {
    if (!path) return -EINVAL;
    return connect_common(loop, tls, ctx, NULL, 0, path, opts);
}

int lull_tls_open(lull_loop *loop, lull_tls *tls, lull_tls_ctx *ctx, int fd,
                  const lull_tls_options *opts) {
    const lull_tls_options *o = opts ? opts : &no_options;
    if (!loop || fd < 0 || !ctx || !args_ok(tls, ctx, o, ctx->server)) {
        if (fd >= 0) close(fd);
        return -EINVAL;
    }
    /* Records go both ways on one fd, in order: a stream socket. Over a
     * pipe's end the stream refuses the writes without a word (or has
     * nothing to read), and the handshake ended at its timeout as if the
     * peer had stalled. */
    int type = 0;
    socklen_t tlen = sizeof type;
    int rc = getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 ? -errno
             : type != SOCK_STREAM                                 ? -EINVAL
                                                                   : 0;
    if (rc < 0) {
        close(fd);
        return rc;
    }
    lull_stream_options so;
    rc = prepare(loop, tls, ctx, o, &so);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    rc = lull_stream_open(loop, &tls->stream, fd, &so);
    if (rc < 0) {
        unprepare(tls);
        return rc;
    }
    attach(tls, o, true);
    tls->state |= T_STARTED;
    /* A client speaks first: its ClientHello at the next flush point. */
    if (tls->state & T_CLIENT) lull__at_flush(loop, &tls->flush);
    return 0;
}

/* ------------------------------------------------------------ queries */

bool lull_tls_available(void) {
    return true;
}

bool lull_tls_resumed(const lull_tls *tls) {
    return tls && tls->ssl && SSL_session_reused(tls->ssl);
}

const char *lull_tls_server_name(const lull_tls *tls) {
    if (!tls || !tls->ssl) return NULL;
    return SSL_get_servername(tls->ssl, TLSEXT_NAMETYPE_host_name);
}

int lull_tls_alpn(const lull_tls *tls, char *buf, size_t cap) {
    if (!tls || !tls->ssl || (!buf && cap)) return -EINVAL;
    const unsigned char *p = NULL;
    unsigned len = 0;
    SSL_get0_alpn_selected(tls->ssl, &p, &len);
    if (!p || len == 0) return -ENOENT;
    if (cap < (size_t)len + 1) return -ENOSPC;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return (int)len;
}

int lull_tls_key_update(lull_tls *tls) {
    if (!tls || !tls->ssl || !(tls->state & T_OPEN) ||
        SSL_version(tls->ssl) < TLS1_3_VERSION)
        return -EINVAL;
    LULL_ASSERT_LOOP_THREAD(tls->loop);
    /* Shut down (or failing): sends are refused, and its KeyUpdate would
     * follow the close_notify, which the shut stream drops. */
    if (tls->ep.flags & (LULL__EP_CLOSED | LULL__EP_PEER_GONE)) return -EPIPE;
    tls->state |= T_KEYUPD;
    lull__at_flush(tls->loop, &tls->flush);
    return 0;
}

const char *lull_tls_error_string(const lull_tls *tls) {
    return tls ? tls->why : "";
}

/* ------------------------------------------------------------ context */

/* A client's new session (a TLS 1.3 ticket arrives after the handshake):
 * the context keeps the last one, for the next connection to that host. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess) {
    lull_tls_ctx *ctx = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
    const char *host = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    lull_tls *t = SSL_get_app_data(ssl);
    /* An address is no SNI: its session is kept under the address. */
    if (!host && t && t->out && out_of(t)->ip_name[0])
        host = out_of(t)->ip_name;
    if (!ctx || !host) return 0;
    char *h = strdup(host);
    if (!h) return 0;
    pthread_mutex_lock(&ctx->lock);
    SSL_SESSION *old = ctx->session;
    char *oldh = ctx->session_host;
    ctx->session = sess;
    ctx->session_host = h;
    pthread_mutex_unlock(&ctx->lock);
    if (old) SSL_SESSION_free(old);
    free(oldh);
    return 1; /* the reference is ours */
}

static int on_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                   const unsigned char *in, unsigned inlen, void *arg) {
    (void)ssl;
    lull_tls_ctx *ctx = arg;
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, ctx->alpn, ctx->alpn_len, in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_ALERT_FATAL; /* no protocol in common */
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* "h2,http/1.1" in the wire's form: each name after its length. */
static int alpn_wire(lull_tls_ctx *ctx, const char *list) {
    size_t n = strlen(list);
    if (n == 0 || n > 1024) return -EINVAL;
    /* A trailing comma is an empty last name, refused as ",a" and "a,,b"
     * are (the loop below would stop before it and offer the rest). */
    if (list[n - 1] == ',') return -EINVAL;
    ctx->alpn = malloc(n + 1);
    if (!ctx->alpn) return -ENOMEM;
    size_t at = 0;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == 0 || len > 255) return -EINVAL;
        ctx->alpn[at++] = (unsigned char)len;
        memcpy(ctx->alpn + at, p, len);
        at += len;
        p += len + (e ? 1 : 0);
    }
    ctx->alpn_len = (unsigned)at;
    return 0;
}

/* The passphrase of an encrypted key (or PEM block): there is none to
 * give, so it is refused (-EINVAL). Without a callback OpenSSL asks for
 * one on the process's terminal and waits for an answer: a server started
 * from a shell would stop inside lull_tls_ctx_new. */
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

static int load_pem_certs(SSL_CTX *c, const char *pem) {
    BIO *b = BIO_new_mem_buf(pem, -1);
    if (!b) return -ENOMEM;
    X509 *x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL);
    int rc = x && SSL_CTX_use_certificate(c, x) == 1 ? 0 : -EINVAL;
    X509_free(x);
    while (rc == 0 && (x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL)))
        if (SSL_CTX_add0_chain_cert(c, x) != 1) {
            X509_free(x);
            rc = -EINVAL;
        }
    BIO_free(b);
    return rc;
}

static int load_pem_key(SSL_CTX *c, const char *pem) {
    BIO *b = BIO_new_mem_buf(pem, -1);
    if (!b) return -ENOMEM;
    EVP_PKEY *k = PEM_read_bio_PrivateKey(b, NULL, no_passphrase, NULL);
    int rc = k && SSL_CTX_use_PrivateKey(c, k) == 1 ? 0 : -EINVAL;
    EVP_PKEY_free(k);
    BIO_free(b);
    return rc;
}

static int load_pem_trust(SSL_CTX *c, const char *pem) {
    BIO *b = BIO_new_mem_buf(pem, -1);
    if (!b) return -ENOMEM;
    X509_STORE *st = SSL_CTX_get_cert_store(c);
    int n = 0, rc = 0;
    X509 *x;
    while ((x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL))) {
        if (X509_STORE_add_cert(st, x) != 1) rc = -EINVAL;
        X509_free(x);
        n++;
    }
    BIO_free(b);
    return n == 0 ? -EINVAL : rc;
}

static int file_ok(const char *path) {
    return !path || access(path, R_OK) == 0 ? 0 : -ENOENT;
}

static int configure(lull_tls_ctx *ctx, const lull_tls_config *cfg) {
    SSL_CTX *c = ctx->ssl;
    int rc;
    /* The trust directory too: OpenSSL reads it only when it looks a
     * certificate up, so one not there would be an empty store that fails
     * every handshake later, as "unable to get local issuer
     * certificate". */
    if ((rc = file_ok(cfg->cert_file)) < 0 ||
        (rc = file_ok(cfg->key_file)) < 0 || (rc = file_ok(cfg->ca_file)) < 0 ||
        (rc = file_ok(cfg->ca_dir)) < 0)
        return rc;
    int minv = cfg->min_version ? cfg->min_version : TLS1_2_VERSION;
    if (minv < TLS1_2_VERSION || (cfg->max_version && cfg->max_version < minv))
        return -EINVAL;
    if (SSL_CTX_set_min_proto_version(c, minv) != 1) return -EINVAL;
    if (cfg->max_version &&
        SSL_CTX_set_max_proto_version(c, cfg->max_version) != 1)
        return -EINVAL;
    /* Renegotiation refused (TLS 1.2); TLS 1.3 key updates still work. */
    SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION |
                               (cfg->no_tickets ? SSL_OP_NO_TICKET : 0));
    SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE);
    SSL_CTX_set_default_passwd_cb(c, no_passphrase); /* the files' */
    if (cfg->cert_file &&
        SSL_CTX_use_certificate_chain_file(c, cfg->cert_file) != 1)
        return -EINVAL;
    if (cfg->key_file &&
        SSL_CTX_use_PrivateKey_file(c, cfg->key_file, SSL_FILETYPE_PEM) != 1)
        return -EINVAL;
    if (cfg->cert_pem && (rc = load_pem_certs(c, cfg->cert_pem)) < 0) return rc;
    if (cfg->key_pem && (rc = load_pem_key(c, cfg->key_pem)) < 0) return rc;
    bool has_cert = cfg->cert_file || cfg->cert_pem;
    bool has_key = cfg->key_file || cfg->key_pem;
    if (has_cert != has_key) return -EINVAL;
    if (has_cert && SSL_CTX_check_private_key(c) != 1) return -EINVAL;
    if (cfg->server && !has_cert) return -EINVAL;
    bool verify = cfg->server ? cfg->verify_client || cfg->require_client_cert
                              : !cfg->insecure_skip_verify;
    if (verify) {
        if (cfg->ca_file || cfg->ca_dir) {
            if (SSL_CTX_load_verify_locations(c, cfg->ca_file, cfg->ca_dir) !=
                1)
                return -EINVAL;
        }
        if (cfg->ca_pem && (rc = load_pem_trust(c, cfg->ca_pem)) < 0) return rc;
        if (!cfg->ca_file && !cfg->ca_dir && !cfg->ca_pem &&
            SSL_CTX_set_default_verify_paths(c) != 1)
            return -EINVAL;
        int mode = SSL_VERIFY_PEER;
        if (cfg->server && cfg->require_client_cert)
            mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        SSL_CTX_set_verify(c, mode, NULL);
        /* A wildcard stands for a whole leftmost label: OpenSSL also
         * matches "l*.example.com" by default, which browsers, Go,
         * rustls, curl and Python refuse. And the name is in the
         * subjectAltName or nowhere: by default a certificate without one
         * passes for the name in its subject CN (a client certificate of
         * a CA that also signs servers, CN=db, would pass for "db"), which
         * browsers, Go and rustls refuse. Copied into each SSL. */
        X509_VERIFY_PARAM_set_hostflags(
            SSL_CTX_get0_param(c), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS |
                                       X509_CHECK_FLAG_NEVER_CHECK_SUBJECT);
    } else {
        SSL_CTX_set_verify(c, SSL_VERIFY_NONE, NULL);
    }
    ctx->verify = verify;
    /* Resumption needs a context id when client certificates are
     * verified; any fixed one will do for one context. */
    static const unsigned char sid[] = "lull";
    SSL_CTX_set_session_id_context(c, sid, sizeof sid - 1);
    if (cfg->alpn && (rc = alpn_wire(ctx, cfg->alpn)) < 0) return rc;
    if (ctx->alpn) {
        if (cfg->server) {
            SSL_CTX_set_alpn_select_cb(c, on_alpn, ctx);
        } else if (SSL_CTX_set_alpn_protos(c, ctx->alpn, ctx->alpn_len) != 0) {
            return -ENOMEM;
        }
    }
    if (!cfg->server) {
        SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_CLIENT |
                                              SSL_SESS_CACHE_NO_INTERNAL_STORE);
        SSL_CTX_sess_set_new_cb(c, on_new_session);
    }
    return 0;
}

int lull_tls_ctx_new(const lull_tls_config *cfg, lull_tls_ctx **out) {
    if (!out) return -EINVAL;
    *out = NULL;
    if (!cfg) return -EINVAL;
    lull_tls_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return -ENOMEM;
    ctx->server = cfg->server;
    atomic_init(&ctx->refs, 1);
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->ssl =
        SSL_CTX_new(cfg->server ? TLS_server_method() : TLS_client_method());
    int rc = ctx->ssl ? configure(ctx, cfg) : -ENOMEM;
    ERR_clear_error();
    if (rc < 0) {
        lull_tls_ctx_free(ctx);
        return rc;
    }
    SSL_CTX_set_app_data(ctx->ssl, ctx);
    *out = ctx;
    return 0;
}

void lull_tls_ctx_free(lull_tls_ctx *ctx) {
    if (!ctx || atomic_fetch_sub(&ctx->refs, 1) != 1) return;
    SSL_CTX_free(ctx->ssl);
    if (ctx->session) SSL_SESSION_free(ctx->session);
    free(ctx->session_host);
    free(ctx->alpn);
    pthread_mutex_destroy(&ctx->lock);
    free(ctx);
}

#endif /* LULL_HAVE_OPENSSL */
