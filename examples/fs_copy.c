/* fs_copy: copies a file with lull's file operations, the way
 * uv_fs_copyfile users do it, and checks the copy. Every step is one
 * request on a pool of its own (the file lane); each callback starts the
 * next, so the loop never waits for the disk:
 *   mkdtemp, open + write the source (at its own position:
 *   LULL_FS_CURRENT), fstat it, open the destination,
 *   copy_range (copy_file_range, or read + write where the kernel
 *   refuses), fsync, read the copy back and compare, close, unlink, rmdir.
 * The directory goes in $TMPDIR (else /tmp). A step that fails ends the
 * chain; main then closes and removes what it left.
 *
 * Build:
 *   cc -O2 -o fs_copy fs_copy.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SIZE = 1 << 20 };

typedef struct copy {
    lull_loop *loop;
    lull_pool *files; /* the file lane */
    lull_fs req;      /* one request, reused by each step in turn */
    int step;
    char dir[200];
    char src[256], dst[256];
    bool dir_made;
    int in, out; /* -1: not open */
    lull_stat st;
    uint64_t copied;
    char *data, *back;
    int failed;
    int done;         /* every step ran */
    const char *what; /* the request in flight, named if it fails, */
    const char *path; /* with the path it was given (NULL: none) */
} copy;

static void next(lull_fs *req, int64_t result);

static void fail(copy *c, const char *what, int64_t result) {
    fprintf(stderr, "fs_copy: %s%s%s: %s\n", what, c->path ? " " : "",
            c->path ? c->path : "", lull_strerror((int)result));
    c->failed = 1;
}

/* Names the request about to go, for a failure to say which it was. */
static void doing(copy *c, const char *what, const char *path) {
    c->what = what;
    c->path = path;
}

/* Each case checks the result of the step before it and starts the next. */
static void next(lull_fs *req, int64_t r) {
    copy *c = LULL_CONTAINER_OF(req, copy, req);
    lull_loop *L = c->loop;
    lull_pool *P = c->files;
    if (r < 0) {
        fail(c, c->what, r);
        return;
    }
    int rc = 0;
    switch (c->step++) {
    case 0:
        doing(c, "mkdtemp", c->dir);
        rc = lull_fs_mkdtemp(L, P, req, c->dir, next);
        break;
    case 1:
        c->dir_made = true;
        snprintf(c->src, sizeof c->src, "%s/source", c->dir);
        snprintf(c->dst, sizeof c->dst, "%s/copy", c->dir);
        doing(c, "open", c->src);
        rc = lull_fs_open(L, P, req, c->src, O_RDWR | O_CREAT | O_EXCL, 0600,
                          next);
        break;
    case 2:
        c->in = (int)r;
        /* At the file's own position (just opened: 0), which the write
         * moves, as libuv's offset -1; the later steps give offsets. */
        doing(c, "write", c->src);
        rc = lull_fs_write(L, P, req, c->in, c->data, SIZE, LULL_FS_CURRENT,
                           next);
        break;
    case 3:
        if (r != SIZE) { /* what was written before an error */
            fprintf(stderr, "fs_copy: wrote %lld of %d bytes\n", (long long)r,
                    SIZE);
            c->failed = 1;
            return;
        }
        doing(c, "fstat", c->src);
        rc = lull_fs_fstat(L, P, req, c->in, &c->st, next);
        break;
    case 4:
        doing(c, "open", c->dst);
        rc = lull_fs_open(L, P, req, c->dst, O_RDWR | O_CREAT | O_EXCL, 0600,
                          next);
        break;
    case 5:
        /* The copy step repeats until every byte is over. */
        c->out = (int)r;
        r = 0;
        /* fall through */
    case 6:
        c->copied += (uint64_t)r;
        if (c->copied < c->st.size) {
            c->step = 6;
            doing(c, "copy_range to", c->dst);
            rc = lull_fs_copy_range(L, P, req, c->out, c->copied, c->in,
                                    c->copied, c->st.size - c->copied, next);
            break;
        }
        c->step = 7;
        doing(c, "fsync", c->dst);
        rc = lull_fs_fsync(L, P, req, c->out, next);
        break;
    case 7:
        doing(c, "read", c->dst);
        rc = lull_fs_read(L, P, req, c->out, c->back, SIZE, 0, next);
        break;
    case 8:
        if (r != SIZE || memcmp(c->data, c->back, SIZE) != 0) {
            fprintf(stderr, "fs_copy: the copy differs\n");
            c->failed = 1;
        }
        doing(c, "close", c->src);
        rc = lull_fs_close(L, P, req, c->in, next);
        break;
    case 9:
        c->in = -1;
        doing(c, "close", c->dst);
        rc = lull_fs_close(L, P, req, c->out, next);
        break;
    case 10:
        c->out = -1;
        doing(c, "unlink", c->src);
        rc = lull_fs_unlink(L, P, req, c->src, next);
        break;
    case 11:
        doing(c, "unlink", c->dst);
        rc = lull_fs_unlink(L, P, req, c->dst, next);
        break;
    case 12:
        doing(c, "rmdir", c->dir);
        rc = lull_fs_rmdir(L, P, req, c->dir, next);
        break;
    default:
        c->dir_made = false;
        c->done = 1;
        return;
    }
    if (rc < 0) {
        c->path = NULL;
        fail(c, "a submit was refused", rc);
    }
}

/* After a failed step: what the chain opened and made, closed and removed
 * here, the loop being done. */
static void clean_up(copy *c) {
    if (c->in >= 0) close(c->in);
    if (c->out >= 0) close(c->out);
    if (!c->dir_made) return;
    unlink(c->src);
    unlink(c->dst);
    rmdir(c->dir);
}

int main(void) {
    static copy c = {.in = -1, .out = -1};
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    int len = snprintf(c.dir, sizeof c.dir, "%s/fs_copy-XXXXXX", tmp);
    c.data = malloc(SIZE);
    c.back = malloc(SIZE);
    int rc = len >= (int)sizeof c.dir ? -ENAMETOOLONG
             : !c.data || !c.back     ? -ENOMEM
                                      : lull_loop_new(&c.loop, NULL);
    if (rc == 0) {
        for (int i = 0; i < SIZE; i++)
            c.data[i] = (char)(i * 31 + i / 4096);
        lull_pool_options o = {.threads = 2, .name = "files"};
        rc = lull_pool_new(&c.files, &o);
        if (rc == 0) {
            next(&c.req, 0);
            rc = lull_loop_run(c.loop, LULL_RUN_DEFAULT);
            int freed = lull_pool_free(c.files);
            if (rc == 0) rc = freed;
        }
        int freed = lull_loop_free(c.loop);
        if (rc == 0) rc = freed;
    }
    if (rc < 0) fprintf(stderr, "fs_copy: %s\n", lull_strerror(rc));
    free(c.data);
    free(c.back);
    if (rc < 0 || c.failed || !c.done) {
        clean_up(&c);
        return 1;
    }
    printf("fs_copy: %llu bytes copied and checked, nothing left behind\n",
           (unsigned long long)c.copied);
    return 0;
}
