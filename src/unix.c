/* Unix-domain streams: a path (or "@name" in Linux's abstract namespace) to
 * a sockaddr_un; the stream core (src/stream.c) does the rest. lull never
 * creates or removes files of its own: bind creates the socket file, and
 * removing it is the caller's (a stale one makes listen fail with
 * -EADDRINUSE, which is safer than deleting whatever is there), but for a
 * listen that fails after its bind, which removes the file it just made. A
 * connect to a listener whose backlog is full fails with -EAGAIN: Linux
 * completes Unix connects at once or not at all. Loop thread only. */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/un.h>

#include "internal.h"
#include "stream.h"

static int unix_address(const char *path, struct sockaddr_un *sun,
                        socklen_t *len) {
    if (!path || !path[0]) return -EINVAL;
    size_t n = strlen(path);
    /* A path needs room for its NUL; an abstract name has none, so "@"
     * and 107 bytes fill sun_path exactly (the '@' becomes its NUL). */
    if (n > sizeof sun->sun_path ||
        (n == sizeof sun->sun_path && path[0] != '@'))
        return -ENAMETOOLONG;
    memset(sun, 0, sizeof *sun);
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path, path, n);
    if (path[0] == '@') {
        sun->sun_path[0] = '\0'; /* abstract: the name is the bytes after */
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    return 0;
}

int lull_server_listen_unix(lull_loop *loop, lull_server *srv, const char *path,
                            int backlog, lull_connection_fn fn) {
    struct sockaddr_un sun;
    socklen_t len;
    int rc = unix_address(path, &sun, &len);
    if (rc < 0) return rc;
    return lull__server_listen(loop, srv, AF_UNIX, (struct sockaddr *)&sun, len,
                               backlog, fn);
}

int lull_stream_connect_unix(lull_loop *loop, lull_stream *s, const char *path,
                             const lull_stream_options *opts,
                             lull_connect_fn fn) {
    struct sockaddr_un sun;
    socklen_t len;
    int rc = unix_address(path, &sun, &len);
    if (rc < 0) return rc;
    return lull__stream_connect(loop, s, AF_UNIX, (struct sockaddr *)&sun, len,
                                opts, fn);
}
