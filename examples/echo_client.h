/* echo_client.h: the client that tests both echo servers of
 * docs/MIGRATING.md, the libuv original (examples/libuv/echo_libuv.c) and
 * its lull port (examples/port_echo_from_libuv.c), so that the two are held
 * to the same behaviour. Plain POSIX sockets on a thread of its own; it
 * knows nothing of either loop.
 *
 * It opens two connections to 127.0.0.1:port:
 *   - a quiet one sends 6 bytes, reads them back and then says nothing:
 *     the server must close it after its idle timeout, which reads here
 *     as end of file;
 *   - a busy one is a slow reader (a 32 KiB receive buffer): it sends
 *     more than the kernel's buffers can hold (echo_client_bytes) without
 *     reading a byte until its sends block (or all are out), then reads
 *     everything back while sending the rest, checks every byte and hangs
 *     up. A server that kept reading while its replies could not leave
 *     would queue megabytes here; one with backpressure stops reading
 *     instead (the servers report their largest queue).
 * Then it calls done(arg) on its own thread: the server's cue to stop.
 *
 * echo_client_start starts the thread; echo_client_join waits for it and
 * says whether every byte came back and both connections ended as they
 * should (cl->failure names the first step that did not). */
#ifndef ECHO_CLIENT_H
#define ECHO_CLIENT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct echo_client {
    uint16_t port;           /* the server's, on 127.0.0.1 */
    void (*done)(void *arg); /* called once, on the client's thread, last */
    void *arg;
    bool ok;             /* after echo_client_join: everything as expected */
    const char *failure; /* else: the step that failed */
    size_t bytes;        /* the busy connection's bytes (echo_client_start) */
    pthread_t thread;
} echo_client;

/* Enough that the server's replies cannot all fit in the kernel: twice the
 * largest send buffer TCP grows to (net.ipv4.tcp_wmem, 4 MiB by default)
 * and 4 MiB more, so the server must queue, and then stop reading. */
static size_t echo_client_bytes(void) {
    unsigned long lo, def, max = 4ul << 20;
    FILE *f = fopen("/proc/sys/net/ipv4/tcp_wmem", "r");
    if (f) {
        if (fscanf(f, "%lu %lu %lu", &lo, &def, &max) != 3) max = 4ul << 20;
        fclose(f);
    }
    return 2 * (size_t)max + ((size_t)4 << 20);
}

static int echo_client_dial(uint16_t port, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    /* Before connect: the receive window is agreed on at the handshake. */
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
    close(fd);
    return -1;
}

/* Sends n bytes of a pattern and reads them back, checking each. A slow
 * reader reads nothing until its sends have blocked for 100 ms or all are
 * out; then it reads and sends together (poll), so neither side's buffers
 * have to hold the whole exchange. */
static bool echo_client_exchange(int fd, size_t n, bool slow_reader) {
    static char out[65536], in[65536];
    size_t sent = 0, got = 0;
    bool reading = !slow_reader;
    while (got < n) {
        if (sent == n) reading = true;
        struct pollfd p = {.fd = fd, .events = reading ? POLLIN : 0};
        if (sent < n) p.events |= POLLOUT;
        int r = poll(&p, 1, reading ? 5000 : 100);
        if (r < 0) return false;
        if (r == 0) {
            if (reading) return false; /* 5 s without progress */
            reading = true;            /* the sends blocked: read now */
            continue;
        }
        if (p.revents & POLLOUT) {
            size_t k = n - sent < sizeof out ? n - sent : sizeof out;
            for (size_t i = 0; i < k; i++)
                out[i] = (char)((sent + i) % 251);
            ssize_t w = send(fd, out, k, MSG_NOSIGNAL);
            if (w < 0) return false;
            sent += (size_t)w;
        }
        if (p.revents & (POLLHUP | POLLERR)) reading = true;
        if (reading && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
            ssize_t k = read(fd, in, sizeof in);
            if (k <= 0) return false;
            for (ssize_t i = 0; i < k; i++)
                if (in[i] != (char)((got + (size_t)i) % 251)) return false;
            got += (size_t)k;
        }
    }
    return true;
}

/* True when the server closes fd (end of file) within 10 s. */
static bool echo_client_closed_by_server(int fd) {
    char c;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 10000) == 1 && read(fd, &c, 1) == 0;
}

static void *echo_client_main(void *arg) {
    echo_client *cl = arg;
    int quiet = echo_client_dial(cl->port, 0);
    int busy = echo_client_dial(cl->port, 32 * 1024);
    if (quiet < 0 || busy < 0)
        cl->failure = "connect";
    else if (!echo_client_exchange(quiet, 6, false))
        cl->failure = "the quiet connection's hello";
    else if (!echo_client_exchange(busy, cl->bytes, true))
        cl->failure = "the busy connection's echo";
    if (busy >= 0) close(busy); /* the server sees the hang-up */
    if (!cl->failure && !echo_client_closed_by_server(quiet))
        cl->failure = "the idle close of the quiet connection";
    if (quiet >= 0) close(quiet);
    cl->ok = !cl->failure;
    cl->done(cl->arg);
    return NULL;
}

static bool echo_client_start(echo_client *cl) {
    cl->ok = false;
    cl->failure = NULL;
    cl->bytes = echo_client_bytes();
    return pthread_create(&cl->thread, NULL, echo_client_main, cl) == 0;
}

static bool echo_client_join(echo_client *cl) {
    pthread_join(cl->thread, NULL);
    return cl->ok;
}

#endif
