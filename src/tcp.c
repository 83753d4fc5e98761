/* TCP streams: numeric IPv4 and IPv6 addresses to sockaddrs; the stream
 * core (src/stream.c) does the rest, TCP_NODELAY included. No name
 * resolution: a DNS lookup blocks, and has no place on a loop thread. Loop
 * thread only. */
#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "internal.h"
#include "stream.h"

int lull__if_index(const char *zone, uint32_t *index) {
    if (!*zone) return -EINVAL;
    if (zone[strspn(zone, "0123456789")] == '\0') {
        errno = 0;
        char *end;
        unsigned long long n = strtoull(zone, &end, 10);
        if (errno || n == 0 || n > UINT32_MAX) return -EINVAL;
        *index = (uint32_t)n;
        return 0;
    }
    /* if_nametoindex's own ioctl, on a socket of the first family the
     * process may open, as glibc's: glibc reports ENOENT whenever none
     * opens, so a process out of fds (EMFILE) or a sandbox that refuses
     * socket() read as a missing interface. */
    struct ifreq ifr;
    if (strlen(zone) >= sizeof ifr.ifr_name) return -ENODEV;
    static const int families[] = {AF_UNIX, AF_INET, AF_INET6};
    int fd = -1, err = EAFNOSUPPORT;
    for (size_t i = 0; fd < 0 && i < sizeof families / sizeof *families; i++) {
        fd = socket(families[i], SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0 && errno != EAFNOSUPPORT) err = errno;
    }
    if (fd < 0) return -err;
    memset(&ifr, 0, sizeof ifr);
    strcpy(ifr.ifr_name, zone);
    int rc = ioctl(fd, SIOCGIFINDEX, &ifr) < 0 ? -errno : 0;
    close(fd);
    if (rc < 0) return rc == -ENXIO ? -ENODEV : rc;
    *index = (uint32_t)ifr.ifr_ifindex;
    return 0;
}

/* host: "1.2.3.4", "::1" or "[::1]", IPv6 with a zone after '%' (an
 * interface's name or index: "fe80::1%eth0", as libuv's uv_ip6_addr);
 * NULL is 127.0.0.1. UDP (src/udp.c) takes its addresses the same way. */
int lull__inet_address(const char *host, int port, struct sockaddr_storage *ss,
                       socklen_t *len, int *family) {
    if (port < 0 || port > 65535) return -EINVAL;
    memset(ss, 0, sizeof *ss);
    if (!host) host = "127.0.0.1";
    struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        *len = sizeof *v4;
        *family = AF_INET;
        return 0;
    }
    /* The address and its zone, unbracketed: a zone is at most an
     * interface name (IF_NAMESIZE) or a 32-bit index. */
    char buf[INET6_ADDRSTRLEN + 1 + IF_NAMESIZE + 10];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
        host++;
        n -= 2;
    }
    if (n >= sizeof buf) return -EINVAL;
    memcpy(buf, host, n);
    buf[n] = '\0';
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
    char *zone = strchr(buf, '%');
    if (zone) *zone++ = '\0';
    if (inet_pton(AF_INET6, buf, &v6->sin6_addr) != 1) return -EINVAL;
    if (zone) {
        int rc = lull__if_index(zone, &v6->sin6_scope_id);
        if (rc < 0) return rc;
    }
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    *len = sizeof *v6;
    *family = AF_INET6;
    return 0;
}

int lull_server_listen_tcp(lull_loop *loop, lull_server *srv, const char *host,
                           int port, int backlog, lull_connection_fn fn) {
    struct sockaddr_storage ss;
    socklen_t len;
    int family;
    int rc = lull__inet_address(host, port, &ss, &len, &family);
    if (rc < 0) return rc;
    return lull__server_listen(loop, srv, family, (struct sockaddr *)&ss, len,
                               backlog, fn);
}

int lull_stream_connect_tcp(lull_loop *loop, lull_stream *s, const char *host,
                            int port, const lull_stream_options *opts,
                            lull_connect_fn fn) {
    struct sockaddr_storage ss;
    socklen_t len;
    int family;
    int rc = lull__inet_address(host, port, &ss, &len, &family);
    if (rc < 0) return rc;
    if (port == 0) return -EINVAL;
    return lull__stream_connect(loop, s, family, (struct sockaddr *)&ss, len,
                                opts, fn);
}
