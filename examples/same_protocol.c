/* same_protocol: one protocol, written once against the frame interface
 * (lull_endpoint), run over a loopback pair, a socket stream and, when lull
 * was built with OpenSSL, TLS.
 *
 * The protocol code never learns which transport it runs on: its callbacks
 * get a lull_endpoint *, which lives inside a lull_loopback, a lull_stream
 * or a lull_tls, and ep->data (the user's; lull never touches it) leads back
 * to the session the protocol keeps per connection. Each session is
 * allocated when its connection starts and freed in one place, its close
 * callback, whoever closed: the client's own close here, the peer's close
 * on the other side.
 *
 * The protocol: the client sends "add N" requests; the server keeps a
 * running total per session and answers "total T"; after the last reply
 * the client closes. Every run must print the same replies. The TLS run
 * makes a throwaway self-signed certificate for localhost with the openssl
 * command in a temporary directory (skipped, with a line, without it).
 *
 * Build:
 *   cc -O2 -o same_protocol same_protocol.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#define _GNU_SOURCE
#include <errno.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define REQUESTS 3

/* ------------------------------------------- the protocol: endpoints only */

typedef struct session {
    bool server;     /* which side of the protocol it plays */
    long total;      /* server: the running total */
    int replies;     /* client: replies seen */
    char log[256];   /* client: the replies, in order */
    const char *via; /* for the printout */
} session;

static session *session_of(lull_endpoint *ep) {
    return ep->data;
}

static void send_text(lull_endpoint *ep, const char *text) {
    int rc = lull_endpoint_send_copy(ep, text, strlen(text));
    if (rc < 0) {
        fprintf(stderr, "send: %s\n", lull_strerror(rc));
        lull_endpoint_close(ep, rc);
    }
}

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    session *s = session_of(ep);
    char text[64];
    snprintf(text, sizeof text, "%.*s", (int)len, (const char *)bytes);
    if (s->server) {
        long n = strtol(text + 4, NULL, 10); /* "add N" */
        s->total += n;
        char reply[32];
        snprintf(reply, sizeof reply, "total %ld", s->total);
        send_text(ep, reply);
        return;
    }
    size_t used = strlen(s->log);
    snprintf(s->log + used, sizeof s->log - used, "%s%s", used ? ", " : "",
             text);
    if (++s->replies == REQUESTS) lull_endpoint_close(ep, 0);
}

/* The one free path: the session goes with its connection, whoever ended
 * it. The client's log is kept by the caller (copied out first). */
static char last_log[3][256]; /* loopback, stream, tls */

static void on_close(lull_endpoint *ep, int reason) {
    session *s = session_of(ep);
    if (!s->server) {
        printf("  %-8s client: %s (closed: %s)\n", s->via, s->log,
               lull_err_name(reason));
        int i = s->via[0] == 'l' ? 0 : s->via[0] == 's' ? 1 : 2;
        snprintf(last_log[i], sizeof last_log[0], "%s", s->log);
    }
    free(s);
    ep->data = NULL;
}

/* Starts the protocol on a connected endpoint, whatever carries it. */
static int start(lull_endpoint *ep, bool server, const char *via) {
    session *s = calloc(1, sizeof *s);
    if (!s) return -1;
    s->server = server;
    s->via = via;
    ep->data = s;
    lull_endpoint_set_callbacks(ep, on_frame, NULL, on_close);
    if (!server)
        for (int i = 1; i <= REQUESTS; i++) {
            char req[16];
            snprintf(req, sizeof req, "add %d", i * 10);
            send_text(ep, req);
        }
    return 0;
}

/* Starts both ends; if either cannot start, closes both (a session
 * already made goes with its close callback). */
static int start_both(lull_endpoint *server, lull_endpoint *client,
                      const char *via) {
    if (start(server, true, via) == 0 && start(client, false, via) == 0)
        return 0;
    lull_endpoint_close(server, -ENOMEM);
    lull_endpoint_close(client, -ENOMEM);
    return -1;
}

/* ------------------------------------------------------- two transports */

/* Each run ends by freeing its loop, also after a failure (then with
 * whatever it opened closed first). */
static int over_loopback(void) {
    lull_loop *loop;
    lull_loop_options o = {.clock = LULL_CLOCK_VIRTUAL};
    if (lull_loop_new(&loop, &o) < 0) return -1;
    lull_loopback client, server;
    int rc = lull_loopback_pair(loop, &client, &server, NULL);
    if (rc == 0) rc = start_both(&server.ep, &client.ep, "loopback");
    if (lull_loop_settle(loop) < 0) rc = -1;
    int freed = lull_loop_free(loop);
    return rc < 0 ? -1 : freed;
}

static int over_stream(void) {
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) < 0) return -1;
    int sv[2];
    lull_stream client, server;
    /* lull_stream_open owns its fd from the call on, also on failure. */
    int rc = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    if (rc == 0 && lull_stream_open(loop, &client, sv[0], NULL) < 0) {
        close(sv[1]);
        rc = -1;
    }
    if (rc == 0 && lull_stream_open(loop, &server, sv[1], NULL) < 0) {
        lull_endpoint_close(&client.ep, 0);
        rc = -1;
    }
    if (rc == 0) rc = start_both(&server.ep, &client.ep, "stream");
    if (lull_loop_run(loop, LULL_RUN_DEFAULT) < 0) rc = -1;
    int freed = lull_loop_free(loop);
    return rc < 0 ? -1 : freed;
}

/* TLS over a socketpair: a server of a fresh self-signed certificate for
 * localhost, a client that trusts exactly that certificate and checks the
 * name. 1 when skipped. */
static int over_tls(void) {
    if (!lull_tls_available()) {
        printf("  tls      skipped: lull was built without OpenSSL\n");
        return 1;
    }
    char dir[] = "/tmp/same_protocol.XXXXXX";
    if (!mkdtemp(dir)) return -1;
    char cmd[512], cert[64], key[64];
    snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir);
    snprintf(cmd, sizeof cmd,
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
             "-nodes -days 1 -subj /CN=localhost "
             "-addext subjectAltName=DNS:localhost -keyout %s -out %s "
             ">/dev/null 2>&1",
             key, cert);
    int made = system(cmd);
    lull_tls_config sc = {.server = true, .cert_file = cert, .key_file = key};
    lull_tls_config cc = {.ca_file = cert};
    lull_tls_ctx *sctx = NULL, *cctx = NULL;
    int rc = made == 0 ? lull_tls_ctx_new(&sc, &sctx) : 1;
    if (rc == 0) rc = lull_tls_ctx_new(&cc, &cctx);
    unlink(cert); /* the contexts hold what they need */
    unlink(key);
    rmdir(dir);
    if (made != 0) { /* the shell's 127: no such command */
        int code = made > 0 && WIFEXITED(made) ? WEXITSTATUS(made) : -1;
        if (code == 127)
            printf("  tls      skipped: no openssl command to make a "
                   "certificate\n");
        else
            printf("  tls      skipped: openssl could not make a "
                   "certificate (exit %d)\n",
                   code);
        return 1;
    }
    lull_loop *loop = NULL;
    int sv[2];
    lull_tls client, server;
    lull_tls_options co = {.server_name = "localhost"};
    if (rc == 0) rc = lull_loop_new(&loop, NULL);
    if (rc == 0) rc = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
    /* lull_tls_open owns its fd from the call on, also on failure. */
    if (rc == 0 && lull_tls_open(loop, &server, sctx, sv[1], NULL) < 0) {
        close(sv[0]);
        rc = -1;
    }
    if (rc == 0 && lull_tls_open(loop, &client, cctx, sv[0], &co) < 0) {
        lull_endpoint_close(&server.ep, 0);
        rc = -1;
    }
    if (rc == 0) rc = start_both(&server.ep, &client.ep, "tls");
    if (loop && lull_loop_run(loop, LULL_RUN_DEFAULT) < 0) rc = -1;
    lull_tls_ctx_free(sctx); /* NULL: nothing */
    lull_tls_ctx_free(cctx);
    int freed = loop ? lull_loop_free(loop) : 0;
    return rc < 0 ? -1 : freed;
}

int main(void) {
    printf("same_protocol: one protocol, every transport\n");
    int tls = over_loopback() == 0 && over_stream() == 0 ? over_tls() : -1;
    if (tls < 0) {
        fprintf(stderr, "same_protocol: a run failed\n");
        return 1;
    }
    if (strcmp(last_log[0], last_log[1]) != 0 || !last_log[0][0] ||
        (tls == 0 && strcmp(last_log[0], last_log[2]) != 0)) {
        fprintf(stderr, "same_protocol: the transports disagree\n");
        return 1;
    }
    printf("same_protocol: the %d transports gave the same %d replies\n",
           tls == 0 ? 3 : 2, REQUESTS);
    return 0;
}
