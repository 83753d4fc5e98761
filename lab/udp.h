/* The `udp` scenario's contract between its driver (lab/udp.c), the
 * application both sides run (lab/udp_app.c) and the implementations that
 * carry the datagrams: lull (lab/udp_lull.c), the bare batched floor
 * (lab/udp_floor.c) and the peers (lab/peers/<peer>_udp.c, each compiled
 * only when its library is installed).
 *
 * The workloads, on two UDP sockets bound to 127.0.0.1, a thread each,
 * both pinned to one CPU:
 *   echo   the client keeps `window` datagrams in flight; the server
 *          sends each back; every reply lets the client send the next
 *   flood  the client sends, the server only receives; every
 *          UDP_CREDIT_EVERY datagrams it returns a 16-byte credit, and the
 *          client keeps at most `window` datagrams beyond the last credit,
 *          so nothing overflows the socket buffer
 * Every datagram carries its sequence number and a checksum of its bytes
 * (UDP_HEADER); the receiver checks both, in order: a lost, repeated,
 * reordered or corrupt datagram fails the run. Only the I/O differs from
 * one implementation to the next: the application is this one code. */
#ifndef LAB_UDP_H
#define LAB_UDP_H

#include "lab.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

extern const lab_scenario lab_udp; /* lab/udp.c */

enum { UDP_ECHO, UDP_FLOOD };
enum { UDP_SERVER, UDP_CLIENT };

#define UDP_HEADER       16 /* seq (8 bytes), kind (4), check (4) */
#define UDP_CREDIT_EVERY 16 /* flood: datagrams per credit */
#define UDP_CREDITS                                                            \
    64 /* credit buffers, reused in turn: far more                             \
          than are ever in flight (window / 16 + 1) */

/* The per-thread system calls an implementation made, counted the same way
 * for all of them (lab/udp_count.c): datagram calls, polls, the rest a
 * datagram path might make (epoll_ctl, getsockname, getpeername). */
typedef struct udp_calls {
    uint64_t sends; /* sendto, sendmsg, sendmmsg (syscall() included) */
    uint64_t recvs; /* recvfrom, recvmsg, recvmmsg (syscall() included) */
    uint64_t polls; /* epoll_wait, epoll_pwait, epoll_pwait2 */
    uint64_t other; /* epoll_ctl, getsockname, getpeername */
} udp_calls;
void udp_calls_now(udp_calls *out); /* the calling thread's, so far */

typedef struct udp_side udp_side;

/* How the application hands a datagram to the implementation. stable:
 * bytes stay valid until the run ends (a client's slot, a credit); else
 * they are the datagram being received, valid during that call only (an
 * echo), which an implementation that sends later must copy. Errors go
 * into s->err. */
typedef void (*udp_send_fn)(udp_side *s, const void *bytes, size_t len,
                            bool stable);

struct udp_side {
    /* Set by the driver. */
    int workload;            /* UDP_ECHO or UDP_FLOOD */
    int role;                /* UDP_SERVER or UDP_CLIENT */
    int fd;                  /* bound, non-blocking: the side owns it */
    struct sockaddr_in peer; /* the other side's address */
    size_t size;             /* bytes of a data datagram */
    uint64_t count;          /* data datagrams one way */
    int window;              /* data datagrams in flight, at most */
    int cpu;                 /* pinned to it */
    unsigned variant;        /* the implementation's row: UDP_V_* */
    pthread_barrier_t *start;
    /* Set by the implementation before udp_app_start. */
    udp_send_fn send;
    void *impl;
    /* The application's (lab/udp_app.c). */
    uint64_t seq;         /* client: the next data seq to send */
    uint64_t received;    /* data datagrams accepted */
    uint64_t credit;      /* flood: the last credit sent or received */
    unsigned char *slots; /* client: window slots of size bytes */
    uint32_t *slot_hash;  /* client: each slot's payload checksum */
    uint64_t *sent_ns;    /* echo client: send time of each slot */
    uint32_t *lat_ns;     /* echo client: each round trip */
    unsigned char credits[UDP_CREDITS][UDP_HEADER];
    bool done;     /* the side's part is over */
    int err;       /* 0, or the first error (-EPROTO: a check) */
    char why[128]; /* what a failed check saw */
    /* Measured (udp_side_ready, udp_side_end). */
    bool ended;
    uint64_t t0, t1, cpu0, cpu1;
    udp_calls c0, c1;
    double own_calls; /* lull: its own count (udp counters + polls) */
};

/* The application: the client's first datagrams; one arrived (0, or a
 * negative errno with s->err set: -EPROTO a failed check, -ETIMEDOUT the
 * driver's abort). Both may call s->send. */
void udp_app_start(udp_side *s);
int udp_app_recv(udp_side *s, const void *bytes, size_t len);

/* An implementation calls udp_side_ready once its loop is set up (always,
 * also when set-up failed: the driver waits for both sides), then
 * udp_app_start; and udp_side_end when its part is done, before it tears
 * down (idempotent). */
void udp_side_ready(udp_side *s);
void udp_side_end(udp_side *s);

/* lull_udp rows, and libuv's. */
#define UDP_V_BATCH64 0x1u /* lull: recv_batch 64 (default 16) */
#define UDP_V_MMSG    0x2u /* libuv: UV_UDP_RECVMMSG */

/* One side in the calling thread: set-up, udp_side_ready, the run,
 * udp_side_end, teardown (closes s->fd). Returns 0 or a negative errno. */
typedef int (*udp_run_fn)(udp_side *s);

int udp_lull_run(udp_side *s);  /* lab/udp_lull.c */
int udp_floor_run(udp_side *s); /* lab/udp_floor.c */
#ifdef LAB_HAVE_UV
int udp_uv_run(udp_side *s); /* lab/peers/uv_udp.c */
const char *udp_uv_version(void);
bool udp_uv_has_mmsg(void); /* UV_UDP_RECVMMSG in this libuv */
#endif
#ifdef LAB_HAVE_EVENT
int udp_event_run(udp_side *s); /* lab/peers/event_udp.c */
const char *udp_event_version(void);
#endif

/* One measurement (lab/udp_app.c): both sides of impl, a thread each. */
typedef struct udp_result {
    double dgrams;  /* data datagrams moved: 2 × count (echo), count */
    double seconds; /* first side ready to last side done */
    double cpu_ns;  /* both threads, user + system */
    udp_calls calls;
    double own_calls;      /* lull's own count, NaN for the others */
    double p50_us, p99_us; /* echo round trip; NaN for the flood */
} udp_result;
int udp_measure(udp_run_fn run, unsigned variant, int workload, size_t size,
                uint64_t count, int window, udp_result *out, char *why,
                size_t why_size);

/* ------------------------------------------------------------ verdict */

/* The figures' value columns (lab/udp.c measures them). */
enum {
    UV_CPU,   /* CPU ns per datagram */
    UV_RATE,  /* datagrams per second */
    UV_CALLS, /* system calls per datagram */
    UV_SENDS,
    UV_RECVS,
    UV_POLLS,
    UV_OTHER, /* epoll_ctl, getsockname, getpeername */
    UV_OWN,   /* lull's own count per datagram */
    UV_P50,
    UV_P99,
    UV_COUNT
};

/* The rows, each tagged (lab_row.tag) with its index in lab/udp.c's
 * impls[], in this order. */
enum {
    UDP_I_FLOOR,
    UDP_I_LULL,
    UDP_I_LULL64,
    UDP_I_UV,
    UDP_I_UV_MMSG,
    UDP_I_EVENT,
    UDP_IMPLS
};

/* The figures: echo and flood at 64 and 1,200 bytes, the echoes first. */
#define UDP_FIGS      4
#define UDP_ECHO_FIGS 2

/* The verdict lines of the udp scenario over its figures (a figure with
 * no rows was not run: --only) and which rows could run (lab/udp.c);
 * quick: the first line only. Apart (lab/udp_verdict.c) so that
 * lab/test_verdict.c judges made-up figures with it. */
typedef struct lab_fig lab_fig;
void udp_verdict(lab_fig *const figs[UDP_FIGS], const bool ok[UDP_IMPLS],
                 bool quick);

#endif /* LAB_UDP_H */
