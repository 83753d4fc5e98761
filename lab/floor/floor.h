/* The floors of `lull-lab serve` (lab/serve_floor.c): two small
 * Redis-protocol servers in plain C, no lull, one on epoll
 * (lab/floor/epoll.c) and one on io_uring (lab/floor/uring.c), that answer
 * what redis-benchmark's ping and get tests send with lull-kv's batching:
 * one read of up to 64 KiB per readable connection (what the socket holds,
 * up to a lull stream's read buffer), every complete command in it
 * answered, and the replies written in one send. Neither keeps a keyspace:
 * GET answers a fixed value, SET says +OK. What is left per request is
 * the kernel's work and a parse: the least a request can cost here with
 * that batching.
 *
 * Each counts its own system calls (a counter beside every call it makes
 * while serving; on io_uring every io_uring_enter) and answers INFO with
 * them; SIGUSR1 prints them on stderr, SIGINT and SIGTERM print them and
 * exit. This file's code is what both share (lab/floor/floor.c): the
 * options, the listening socket, the counters, the protocol. One thread. */
#ifndef LAB_FLOOR_H
#define LAB_FLOOR_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One read: a lull stream's default read buffer (src/stream.c). */
#define FLOOR_READ_SIZE ((size_t)64 << 10)

typedef struct floor_counts {
    uint64_t syscalls; /* every system call made while serving */
    uint64_t waits;    /* epoll_wait, or io_uring_enter */
    uint64_t reads;    /* recv calls that returned data, or receive
                          completions that did */
    uint64_t writes;   /* send calls, or sends submitted */
    uint64_t commands; /* commands answered */
} floor_counts;

extern floor_counts floor_n;

/* A growable byte buffer: a connection's unparsed input or its replies. */
typedef struct floor_buf {
    char *p;
    size_t len; /* bytes held */
    size_t cap; /* bytes allocated */
} floor_buf;

/* Appends n bytes; false when out of memory. */
bool floor_buf_put(floor_buf *b, const void *p, size_t n);
/* Drops the first n bytes. */
void floor_buf_consume(floor_buf *b, size_t n);
void floor_buf_free(floor_buf *b);

/* Answers the complete commands at the front of p[0, len), appending the
 * replies to out. Returns the bytes they took (the rest is an incomplete
 * command), or -1 after a protocol error, whose reply is appended: send
 * it and close. */
long floor_answer(const char *p, size_t len, floor_buf *out);

/* Reads the options (--port N, default 0: any free port; --value V, what
 * GET answers, default redis-benchmark's "xxx"), listens on
 * 127.0.0.1:port (non-blocking), sets up floor_sigfd and prints
 * "<name>: listening on 127.0.0.1:PORT" (lull-kv's line, which lull-lab
 * reads). Returns the listening fd; exits with a message on failure. */
int floor_start(int argc, char **argv, const char *name, const char *mode);

/* What GET, the list pops and each LRANGE element answer from now on
 * (floor_start sets it from --value; shorter than 512 bytes, else false
 * and nothing changes). */
bool floor_set_value(const char *v);

/* SIGINT, SIGTERM and SIGUSR1 are blocked and arrive here (a signalfd,
 * non-blocking): the server waits for it beside its sockets, so a signal
 * is never lost between a check and a wait. */
extern int floor_sigfd;

/* floor_sigfd is readable: SIGUSR1 prints the counters on stderr, SIGINT
 * and SIGTERM print them and exit. */
void floor_on_signal(void);

#endif /* LAB_FLOOR_H */
