/* fs_copy: copies a file with lull's file operations, the way
 * uv_fs_copyfile users do it, and checks the copy. Every step is one
 * request on a pool of its own (the file lane); each callback starts the
 * next, so the loop never waits for the disk:
 *   mkdtemp, open + write the source, fstat it, open the destination,
 *   copy_range (copy_file_range, or read + write where the kernel
 *   refuses), fsync, read the copy back and compare, close, unlink, rmdir.
 *
 * Build:
 *   cc -O2 -o fs_copy fs_copy.c $(pkg-config --cflags --libs lull)
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <lull.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SIZE = 1 << 20 };

typedef struct copy {
    lull_loop *loop;
    lull_pool *files; /* the file lane */
    lull_fs req;      /* one request, reused by each step in turn */
    int step;
    char dir[64];
    char src[96], dst[96];
    int in, out;
    lull_stat st;
    uint64_t copied;
    char *data, *back;
    int failed;
    int done; /* every step ran */
} copy;

static void next(lull_fs *req, int64_t result);

static void fail(copy *c, const char *what, int64_t result) {
    fprintf(stderr, "fs_copy: %s: %s\n", what, lull_strerror((int)result));
    c->failed = 1;
}

/* Each case checks the result of the step before it and starts the next. */
static void next(lull_fs *req, int64_t r) {
    copy *c = LULL_CONTAINER_OF(req, copy, req);
    lull_loop *L = c->loop;
    lull_pool *P = c->files;
    if (r < 0) {
        fail(c, "a step failed", r);
        return;
    }
    int rc = 0;
    switch (c->step++) {
    case 0:
        rc = lull_fs_mkdtemp(L, P, req, c->dir, next);
        break;
    case 1:
        snprintf(c->src, sizeof c->src, "%s/source", c->dir);
        snprintf(c->dst, sizeof c->dst, "%s/copy", c->dir);
        rc = lull_fs_open(L, P, req, c->src, O_RDWR | O_CREAT | O_EXCL, 0600,
                          next);
        break;
    case 2:
        c->in = (int)r;
        rc = lull_fs_write(L, P, req, c->in, c->data, SIZE, 0, next);
        break;
    case 3:
        rc = lull_fs_fstat(L, P, req, c->in, &c->st, next);
        break;
    case 4:
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
            rc = lull_fs_copy_range(L, P, req, c->out, c->copied, c->in,
                                    c->copied, c->st.size - c->copied, next);
            break;
        }
        c->step = 7;
        rc = lull_fs_fsync(L, P, req, c->out, next);
        break;
    case 7:
        rc = lull_fs_read(L, P, req, c->out, c->back, SIZE, 0, next);
        break;
    case 8:
        if (r != SIZE || memcmp(c->data, c->back, SIZE) != 0) {
            fprintf(stderr, "fs_copy: the copy differs\n");
            c->failed = 1;
        }
        rc = lull_fs_close(L, P, req, c->in, next);
        break;
    case 9:
        rc = lull_fs_close(L, P, req, c->out, next);
        break;
    case 10:
        rc = lull_fs_unlink(L, P, req, c->src, next);
        break;
    case 11:
        rc = lull_fs_unlink(L, P, req, c->dst, next);
        break;
    case 12:
        rc = lull_fs_rmdir(L, P, req, c->dir, next);
        break;
    default:
        c->done = 1;
        return;
    }
    if (rc < 0) fail(c, "a submit was refused", rc);
}

int main(void) {
    static copy c;
    snprintf(c.dir, sizeof c.dir, "/tmp/fs_copy-XXXXXX");
    c.data = malloc(SIZE);
    c.back = malloc(SIZE);
    if (!c.data || !c.back) return 1;
    for (int i = 0; i < SIZE; i++)
        c.data[i] = (char)(i * 31 + i / 4096);
    if (lull_loop_new(&c.loop, NULL) < 0) return 1;
    lull_pool_options o = {.threads = 2, .name = "files"};
    if (lull_pool_new(&c.files, &o) < 0) return 1;
    next(&c.req, 0);
    lull_loop_run(c.loop, LULL_RUN_DEFAULT);
    lull_pool_free(c.files);
    lull_loop_free(c.loop);
    free(c.data);
    free(c.back);
    if (c.failed || !c.done) return 1;
    printf("fs_copy: %llu bytes copied and checked, nothing left behind\n",
           (unsigned long long)c.copied);
    return 0;
}
