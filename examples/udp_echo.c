/* udp_echo: a UDP echo server and a client on one loop. The client sends
 * a burst of numbered datagrams (they leave in one sendmmsg), the server
 * echoes each to its sender, and the client checks every reply: number,
 * payload, nothing lost or repeated on loopback.
 *
 * Build:
 *   cc -O2 -o udp_echo udp_echo.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#include <lull.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

enum { BURST = 64, BURSTS = 20 };

typedef struct server {
    lull_udp udp;
    lull_datagram replies[BURST]; /* one per datagram in flight */
    unsigned char bufs[BURST][32];
    int next;
} server;

typedef struct client {
    lull_udp udp;
    lull_datagram sends[BURST];
    unsigned char bufs[BURST][32];
    int sent, got, bad;
    unsigned char seen[BURST * BURSTS];
    struct sockaddr_in server_addr;
} client;

/* The server copies each datagram (its bytes are valid during the call
 * only) and sends it back to whoever sent it. */
static void server_recv(lull_udp *udp, int status, const void *bytes,
                        size_t len, const struct sockaddr *from,
                        unsigned flags) {
    server *s = udp->data;
    if (status < 0 || flags || len > sizeof s->bufs[0]) return;
    int i = s->next++ % BURST;
    memcpy(s->bufs[i], bytes, len);
    lull_udp_send(udp, &s->replies[i], s->bufs[i], len, from, NULL);
}

static void send_burst(client *c) {
    for (int i = 0; i < BURST; i++, c->sent++) {
        int n = snprintf((char *)c->bufs[i], sizeof c->bufs[i], "datagram %d",
                         c->sent);
        lull_udp_send(&c->udp, &c->sends[i], c->bufs[i], (size_t)n,
                      (struct sockaddr *)&c->server_addr, NULL);
    }
}

static void client_recv(lull_udp *udp, int status, const void *bytes,
                        size_t len, const struct sockaddr *from,
                        unsigned flags) {
    client *c = udp->data;
    (void)from;
    int n = -1;
    char text[32];
    if (status == 0 && !flags && len < sizeof text) {
        memcpy(text, bytes, len);
        text[len] = '\0';
        if (sscanf(text, "datagram %d", &n) != 1) n = -1;
    }
    if (n < 0 || n >= c->sent || c->seen[n]++) c->bad++;
    if (++c->got % BURST == 0 && c->sent < BURST * BURSTS) send_burst(c);
    if (c->got == BURST * BURSTS) lull_udp_recv_stop(udp);
}

int main(void) {
    static server s;
    static client c;
    lull_loop *loop;
    int err = lull_loop_new(&loop, NULL);
    if (err < 0) {
        fprintf(stderr, "udp_echo: %s\n", lull_strerror(err));
        return 1;
    }
    s.udp.data = &s;
    c.udp.data = &c;
    /* An initialized handle is live until closed, also when what follows
     * fails: the end below closes both whatever happened. */
    err = lull_udp_init(loop, &s.udp, NULL);
    bool s_live = err == 0;
    if (err == 0) err = lull_udp_bind(&s.udp, "127.0.0.1", 0, 0);
    if (err == 0) err = lull_udp_recv_start(&s.udp, server_recv);
    c.server_addr.sin_family = AF_INET;
    c.server_addr.sin_port = htons((uint16_t)lull_udp_local_port(&s.udp));
    c.server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool c_live = err == 0 && (err = lull_udp_init(loop, &c.udp, NULL)) == 0;
    if (err == 0) err = lull_udp_bind(&c.udp, "127.0.0.1", 0, 0);
    if (err == 0) err = lull_udp_recv_start(&c.udp, client_recv);
    if (err < 0) fprintf(stderr, "udp_echo: %s\n", lull_strerror(err));
    bool ok = err == 0;
    if (ok) send_burst(&c);
    /* The client stops reading after the last reply; then the server is
     * the one thing left, and it closes. */
    while (ok && c.got < BURST * BURSTS)
        ok = lull_loop_run(loop, LULL_RUN_ONCE) >= 0;
    if (s_live) lull_udp_close(&s.udp, NULL);
    if (c_live) lull_udp_close(&c.udp, NULL);
    if (lull_loop_run(loop, LULL_RUN_DEFAULT) < 0) ok = false;
    printf("udp_echo: %d datagrams echoed, %d wrong, in %llu sendmmsg calls\n",
           c.got, c.bad, (unsigned long long)c.udp.send_calls);
    return lull_loop_free(loop) == 0 && ok && c.bad == 0 ? 0 : 1;
}
