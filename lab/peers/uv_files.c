/* The `files` scenario's libuv row (lab/files.h): uv_fs_read on libuv's
 * pool, each read submitted from the callback of the one before. The pool
 * has one thread (UV_THREADPOOL_SIZE, set by lab/files.c before libuv
 * starts it), started from the row's thread, so it keeps that thread's
 * CPU. */
#include "files.h"

#include <errno.h>
#include <stddef.h>
#include <uv.h>

typedef struct uvtrip {
    uv_fs_t req;
    uv_loop_t *loop;
    uv_buf_t buf;
    files_trips *t;
    int rc;
} uvtrip;

static void back(uv_fs_t *req) {
    uvtrip *u = (uvtrip *)((char *)req - offsetof(uvtrip, req));
    int more = files_trip(u->t, (int64_t)req->result);
    uv_fs_req_cleanup(req);
    if (more < 0) u->rc = more;
    if (more != 0) return;
    int rc = uv_fs_read(u->loop, req, u->t->fd, &u->buf, 1,
                        (int64_t)files_offset(u->t), back);
    if (rc < 0) u->rc = rc;
}

int files_uv_run(files_trips *t) {
    uv_loop_t loop;
    int rc = uv_loop_init(&loop);
    if (rc < 0) return rc;
    uvtrip u = {.loop = &loop, .t = t};
    u.buf = uv_buf_init(t->block, FILES_BLOCK);
    rc = uv_fs_read(&loop, &u.req, t->fd, &u.buf, 1, 0, back);
    if (rc == 0) rc = uv_run(&loop, UV_RUN_DEFAULT) < 0 ? -EIO : 0;
    if (rc == 0) rc = u.rc;
    if (uv_loop_close(&loop) < 0 && rc == 0) rc = -EBUSY;
    return rc;
}

const char *files_uv_version(void) {
    return uv_version_string();
}
