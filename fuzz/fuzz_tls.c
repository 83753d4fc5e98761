/* fuzz_tls: a libFuzzer target for a TLS server's handshake (src/tls.c),
 * driven through the public API: a lull_tls server on one end of a
 * socketpair, the input written to the other end as a client would (in
 * pieces of what the socket takes, the loop run between them), then EOF.
 *
 * Whatever the bytes, the connection closes exactly once, with a negative
 * reason, and no frame ever arrives: no input can complete a handshake
 * without the keys it would need. The server's certificate is made at
 * start-up (an EC key and a self-signed X509 in memory), never kept.
 *
 *   built by clang with -fsanitize=fuzzer and OpenSSL 3 (fuzz/CMakeLists);
 *   `make fuzz FUZZ_SECONDS=N` runs it on a copy of fuzz/corpus_tls, a few
 *   ClientHellos recorded from OpenSSL's client */
#define _GNU_SOURCE /* strndup */
#include <lull.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef LULL_HAVE_OPENSSL
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

/* A NUL-terminated PEM of what `write` writes. */
static char *pem_of(int (*write)(BIO *, const void *), const void *obj) {
    BIO *b = BIO_new(BIO_s_mem());
    if (!b || write(b, obj) != 1) abort();
    char *p = NULL;
    long n = BIO_get_mem_data(b, &p);
    char *s = strndup(p, (size_t)n);
    BIO_free(b);
    if (!s) abort();
    return s;
}

static int write_cert(BIO *b, const void *x) {
    return PEM_write_bio_X509(b, (X509 *)x);
}

static int write_key(BIO *b, const void *k) {
    return PEM_write_bio_PrivateKey(b, (EVP_PKEY *)k, NULL, NULL, 0, NULL,
                                    NULL);
}

static lull_tls_ctx *make_ctx(void) {
    EVP_PKEY *k = EVP_EC_gen("P-256");
    X509 *x = X509_new();
    if (!k || !x) abort();
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
    X509_gmtime_adj(X509_getm_notBefore(x), -86400);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, k);
    X509_NAME *name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               (const unsigned char *)"localhost", -1, -1, 0);
    X509_set_issuer_name(x, name);
    if (X509_sign(x, k, EVP_sha256()) <= 0) abort();
    char *cert = pem_of(write_cert, x), *key = pem_of(write_key, k);
    /* ALPN and client certificates on, so those paths are reached too. */
    lull_tls_config c = {.server = true,
                         .cert_pem = cert,
                         .key_pem = key,
                         .ca_pem = cert,
                         .verify_client = true,
                         .alpn = "h2,http/1.1"};
    lull_tls_ctx *ctx = NULL;
    if (lull_tls_ctx_new(&c, &ctx) != 0) abort();
    free(cert);
    free(key);
    X509_free(x);
    EVP_PKEY_free(k);
    return ctx;
}
#endif

/* NOWAIT runs one input may take: each reads at least a byte or ends. */
#define MAX_RUNS 100000

typedef struct server {
    lull_tls t;
    int closes;
    int reason;
} server;

static void on_frame(lull_endpoint *ep, const void *bytes, size_t len) {
    (void)ep;
    (void)bytes;
    (void)len;
    abort(); /* no handshake can have completed */
}

static void on_close(lull_endpoint *ep, int reason) {
    server *s = LULL_CONTAINER_OF(ep, server, t.ep);
    s->closes++;
    s->reason = reason;
}

/* Reads and drops what the server wrote, so it never blocks. */
static void drain_peer(int fd) {
    char buf[4096];
    while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) {
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lull_loop *loop;
    static lull_tls_ctx *ctx;
    if (!lull_tls_available()) return 0;
#ifdef LULL_HAVE_OPENSSL
    if (!ctx) ctx = make_ctx();
#endif
    if (!loop && lull_loop_new(&loop, NULL) != 0) abort();
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) abort();
    static server s;
    memset(&s, 0, sizeof s);
    if (lull_tls_open(loop, &s.t, ctx, sv[1], NULL) != 0) abort();
    lull_endpoint_set_callbacks(&s.t.ep, on_frame, NULL, on_close);
    size_t at = 0;
    int runs = 0;
    while (at < size && s.closes == 0) {
        ssize_t w =
            send(sv[0], data + at, size - at, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) at += (size_t)w;
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) break;
        if (lull_loop_run(loop, LULL_RUN_NOWAIT) != 0) abort();
        drain_peer(sv[0]);
        if (++runs > MAX_RUNS) abort();
    }
    shutdown(sv[0], SHUT_WR);
    while (s.closes == 0) {
        if (lull_loop_run(loop, LULL_RUN_NOWAIT) != 0) abort();
        drain_peer(sv[0]);
        if (++runs > MAX_RUNS) abort(); /* the EOF must close it */
    }
    if (s.closes != 1 || s.reason >= 0) abort();
    for (int i = 0; i < 4; i++) /* nothing more may follow */
        if (lull_loop_run(loop, LULL_RUN_NOWAIT) != 0) abort();
    if (s.closes != 1) abort();
    close(sv[0]);
    return 0;
}
