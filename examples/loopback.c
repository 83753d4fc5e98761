/* loopback: a client and a server on lull's loopback pair, on the virtual
 * clock (docs/LOOPBACK.md walks through it).
 *
 * The server is written against the frame interface only (lull_endpoint):
 * the same function would serve a socket stream. The client hands two
 * requests over (no copy, no allocation) and is told when each is released;
 * the server answers by copy. Nothing arrives inside a send: every delivery
 * is a turn of its own, and a reply lands between two requests. Then the
 * client closes; the server hears the reason after every frame the client
 * sent, and the client's own close callback follows: each end's close
 * callback runs once, whoever closed, and is the place to free it.
 * lull_loop_settle runs it all with time frozen.
 *
 * Build:
 *   cc -O2 -o loopback loopback.c $(pkg-config --cflags --libs lull)
 * or with CMake (find_package(lull)), all examples at once:
 *   cmake -S examples -B build-examples -DCMAKE_PREFIX_PATH=<lull prefix>
 *   cmake --build build-examples */
#include <lull.h>
#include <stdio.h>

typedef struct request {
    lull_frame frame; /* handed over: the queue link lives here */
    char text[16];
} request;

static void released(lull_frame *f) {
    printf("  client: \"%s\" released: its memory is mine again\n",
           LULL_CONTAINER_OF(f, request, frame)->text);
}

static void serve(lull_endpoint *ep, const void *bytes, size_t len) {
    printf("  server: got \"%.*s\"\n", (int)len, (const char *)bytes);
    char reply[32];
    int n =
        snprintf(reply, sizeof reply, "ok %.*s", (int)len, (const char *)bytes);
    lull_endpoint_send_copy(ep, reply, (size_t)n); /* arrives on a later turn */
}

static void server_closed(lull_endpoint *ep, int reason) {
    (void)ep;
    printf("  server: the client closed, reason %d\n", reason);
}

static void client_got(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    printf("  client: got \"%.*s\"\n", (int)len, (const char *)bytes);
}

/* Its own close, in a later turn, once the frames it sent were delivered:
 * the one place a client would free its state. */
static void client_closed(lull_endpoint *ep, int reason) {
    (void)ep;
    printf("  client: my close callback, reason %d: free it here\n", reason);
}

int main(void) {
    lull_loop *loop;
    lull_loop_options opts = {.clock = LULL_CLOCK_VIRTUAL};
    int err = lull_loop_new(&loop, &opts);
    if (err < 0) {
        fprintf(stderr, "loopback: %s\n", lull_strerror(err));
        return 1;
    }
    lull_loopback client, server;
    if (lull_loopback_pair(loop, &client, &server, NULL) < 0) {
        lull_loop_free(loop);
        return 1;
    }
    lull_endpoint_set_callbacks(&client.ep, client_got, NULL, client_closed);
    lull_endpoint_set_callbacks(&server.ep, serve, NULL, server_closed);

    request req[2] = {{.text = "get a"}, {.text = "get b"}};
    for (int i = 0; i < 2; i++) {
        req[i].frame.bytes = req[i].text;
        req[i].frame.len = 5;
        req[i].frame.release = released;
        lull_endpoint_send(&client.ep, &req[i].frame);
        printf("client: sent \"%s\"; server has %llu frames\n", req[i].text,
               (unsigned long long)server.delivered);
    }
    int turns = lull_loop_settle(loop);
    printf("settle: %d turns, virtual time still %llu ns\n", turns,
           (unsigned long long)lull_loop_now(loop));

    lull_endpoint_send_copy(&client.ep, "bye", 3);
    lull_endpoint_close(&client.ep, 7); /* "bye" is still delivered */
    printf("client: closed with reason 7\n");
    lull_loop_settle(loop);             /* both close callbacks run in here */
    lull_endpoint_close(&server.ep, 0); /* already closed by the peer: 0 */
    if (lull_loop_free(loop) != 0) return 1;
    printf("done: loop freed\n");
    return 0;
}
