/* dial: connects to a server by name, as a dual-stack client should
 * (RFC 8305: IPv6 and IPv4 tried interleaved, a new attempt every 250 ms
 * until one connects), then sends a line and prints the reply. It starts
 * its own echo server on 127.0.0.1 and dials "localhost", so it runs
 * anywhere; give HOST PORT to dial another server instead.
 *
 *   dial [HOST PORT]  exits 0 when the reply came back; 1, with the reason,
 *                     when the dial failed (the name did not resolve, or no
 *                     address answered) or the server hung up first or
 *                     did not answer within 5 s
 *
 * Build:
 *   cc -O2 -pthread -o dial dial.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <lull.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static lull_server server;
static lull_stream accepted, client;
static lull_dial dialer;
static lull_timer no_answer; /* the wait for the reply; 5 s */
static int failed;           /* the exit status: 1 once the dial failed */
static bool answered;        /* the reply came */

/* The server echoes what it reads and closes when the client does. */
static void echo_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    lull_endpoint_send_copy(ep, bytes, len);
}

static void on_connection(lull_server *srv) {
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    if (lull_server_accept(srv, &accepted, &raw) == 0)
        lull_endpoint_set_callbacks(&accepted.ep, echo_frame, NULL, NULL);
    lull_server_close(srv); /* one client is all this example serves */
}

/* The answer came: the socket leaves the stream, open and the program's
 * (lull_stream_detach), as it would to be handed to other code: a dial to
 * a name carries TLS by lull_tls_open over it. Here it is only closed. */
static void client_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    answered = true;
    lull_timer_stop(&no_answer);
    printf("dial: the server answered \"%.*s\"\n", (int)len,
           (const char *)bytes);
    int fd = lull_stream_detach(&client);
    if (fd < 0) { /* more bytes came behind the answer: close it as it is */
        lull_endpoint_close(ep, 0);
        return;
    }
    printf("dial: the socket is the program's now; it closes it\n");
    close(fd);
}

/* The connection ended before the answer came (none runs after detach). */
static void client_close(lull_endpoint *ep, int reason) {
    (void)ep;
    lull_timer_stop(&no_answer);
    if (answered) return;
    if (reason == -ETIMEDOUT)
        fprintf(stderr, "dial: the server did not answer within 5 s\n");
    else
        fprintf(stderr,
                "dial: the server closed the connection without "
                "answering (%s)\n",
                reason ? lull_strerror(reason) : "EOF");
    failed = 1;
}

/* A server that accepts and stays silent would hold the client for ever. */
static void on_no_answer(lull_timer *t) {
    (void)t;
    lull_endpoint_close(&client.ep, -ETIMEDOUT); /* client_close reports */
}

static void on_dialed(lull_dial *d, int status) {
    if (status < 0) {
        if (d->gai_error)
            fprintf(stderr, "dial: the name did not resolve: %s\n",
                    gai_strerror(d->gai_error));
        else
            fprintf(stderr, "dial: %s (no address answered)\n",
                    lull_strerror(status));
        failed = 1;
        lull_server_close(&server);
        return;
    }
    printf("dial: connected after %d attempt%s\n", d->attempts,
           d->attempts == 1 ? "" : "s");
    lull_endpoint_set_callbacks(&d->stream->ep, client_frame, NULL,
                                client_close);
    lull_endpoint_send_copy(&d->stream->ep, "hello", 5);
    lull_timer_start(&no_answer, LULL_S(5), 0);
}

/* A port from the command line: digits only, 1-65535; -1 if not. */
static int port_arg(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    return *s >= '0' && *s <= '9' && !*end && v >= 1 && v <= 65535 ? (int)v
                                                                   : -1;
}

int main(int argc, char **argv) {
    const char *host = "localhost";
    int port = 0;
    /* --help is asked for: the usage on stdout, exit 0; a mistake: stderr, 2.
     */
    bool help = argc == 2 && strcmp(argv[1], "--help") == 0;
    if (help || (argc != 1 && (argc != 3 || (port = port_arg(argv[2])) < 0))) {
        fprintf(help ? stdout : stderr, "usage: dial [HOST PORT (1-65535)]\n");
        return help ? 0 : 2;
    }
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) < 0) return 1;
    lull_timer_init(loop, &no_answer, on_no_answer);
    if (argc == 3) {
        host = argv[1];
    } else {
        int rc = lull_server_listen_tcp(loop, &server, "127.0.0.1", 0, 0,
                                        on_connection);
        if (rc < 0) {
            fprintf(stderr, "dial: listen: %s\n", lull_strerror(rc));
            lull_loop_free(loop);
            return 1;
        }
        port = lull_server_port(&server);
    }
    lull_stream_options raw = {.flags = LULL_STREAM_RAW};
    lull_dial_options opts = {.stream = &raw, .timeout_ns = LULL_S(5)};
    if (argc != 3) opts.family = AF_INET; /* the server listens on IPv4 */
    /* NULL pool: the name resolves on lull's default pool. */
    int rc = lull_dial_start(loop, NULL, &dialer, &client, host, port, &opts,
                             on_dialed);
    if (rc < 0) {
        fprintf(stderr, "dial: %s\n", lull_strerror(rc));
        if (argc != 3) lull_server_close(&server);
        lull_loop_free(loop);
        return 1;
    }
    rc = lull_loop_run(loop, LULL_RUN_DEFAULT);
    return lull_loop_free(loop) == 0 && rc == 0 ? failed : 1;
}
