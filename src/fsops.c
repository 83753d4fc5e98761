/* One-shot file operations on the worker pool: the uv_fs_* set.
 *
 * Owns: lull_fs requests, each a caller-owned struct around a lull_work.
 * The submit functions (loop thread) check their arguments, copy them into
 * the request and hand it to lull_work_submit; fs_run (a pool thread)
 * makes the system calls and touches nothing but its own request; fs_done
 * (loop thread) runs the callback once. Nothing is allocated per operation
 * but a directory listing's state (its entry batch and the DIR), made at
 * lull_fs_scandir and freed before its cb runs.
 *
 * Invariants: every accepted request gets its cb exactly once, through the
 * pool's own exactly-once done; a scandir is one request going back and
 * forth, one batch per trip: the pool thread fills at most
 * LULL_FS_DIR_BATCH entries, the loop hands them to dir_cb and submits the
 * next trip (never refused for a full queue: the listing was accepted
 * once, lull__work_submit_again), so the loop runs its other tasks between
 * batches and a huge directory never holds it longer than one batch's callback.
 *
 * The file lane: these requests go to whatever pool the caller names; a
 * pool is the lane (docs/POOL.md, "Lanes"), so a slow disk holds only the
 * threads of the pool given for files. No background component of its own:
 * the pool's threads are the only ones, and their five rows are pool.c's. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

#include "internal.h"
#include "lull.h"
#include "pool.h"

enum {
    OP_OPEN,
    OP_CLOSE,
    OP_READ,
    OP_WRITE,
    OP_READV,
    OP_WRITEV,
    OP_STAT,
    OP_LSTAT,
    OP_FSTAT,
    OP_RENAME,
    OP_UNLINK,
    OP_MKDIR,
    OP_RMDIR,
    OP_MKDTEMP,
    OP_LINK,
    OP_SYMLINK,
    OP_READLINK,
    OP_REALPATH,
    OP_SCANDIR,
    OP_FSYNC,
    OP_FDATASYNC,
    OP_FTRUNCATE,
    OP_COPY,
    OP_SENDFILE,
    OP_CHMOD,
    OP_FCHMOD,
    OP_CHOWN,
    OP_FCHOWN,
    OP_UTIME,
    OP_FUTIME,
};

/* The bounce buffer of the read/write fallbacks, on the pool thread's
 * stack (8 MiB at least, src/pool.c): 64 KiB is what a pipe holds, so a
 * sendfile fallback to a pipe moves a full pipe per write. */
#define COPY_CHUNK 65536

/* A listing in progress: one batch at a time, refilled on a pool thread. */
typedef struct dir_state {
    DIR *d;          /* opened on the first trip */
    lull_pool *pool; /* where each next trip goes */
    size_t count;    /* entries handed to dir_cb so far */
    size_t n;        /* entries in ents, filled by the last trip */
    int err;         /* the listing's errno, once it failed */
    bool end;        /* readdir said there is no more */
    bool in_cb;      /* dir_cb is running (lull_fs_cancel sets stop) */
    lull_dirent ents[LULL_FS_DIR_BATCH];
} dir_state;

/* ------------------------------------------------- on a pool thread */

/* A system call's return as a result: the value, or the negative errno.
 * Pool threads block every signal (pool.c), so only open, which can wait
 * on a FIFO or a network filesystem, is retried on EINTR. */
static int64_t sys(long r) {
    return r < 0 ? -(int64_t)errno : (int64_t)r;
}

/* Reads or writes all of the request's buffers at its offset; a short
 * count only at end of file or after an error that came past the first
 * byte. At LULL_FS_CURRENT a read is one readv(2), whose short count a
 * pipe or terminal gives when that is all it has (more would wait for
 * bytes the caller may never send), and a write goes on at the position
 * writev(2) moved. The caller's iovec array is copied, never modified. */
/* One call at off, or at the fd's own position for LULL_FS_CURRENT. */
static ssize_t rw_once(int fd, const struct iovec *v, int cnt, uint64_t off,
                       bool write) {
    if (off == LULL_FS_CURRENT)
        return write ? writev(fd, v, cnt) : readv(fd, v, cnt);
    return write ? pwritev(fd, v, cnt, (off_t)off)
                 : preadv(fd, v, cnt, (off_t)off);
}

static int64_t rw_all(lull_fs *req, bool write) {
    struct iovec one, v[IOV_MAX];
    struct iovec *p = v;
    int cnt = req->iovcnt;
    if (req->iov) {
        memcpy(v, req->iov, (size_t)cnt * sizeof *v);
    } else {
        one.iov_base = req->buf;
        one.iov_len = req->len;
        p = &one;
        cnt = 1;
    }
    uint64_t off = req->offset;
    size_t total = 0;
    for (int k = 0; k < cnt; k++)
        total += p[k].iov_len;
    if (total == 0) {
        /* Nothing to move, but still one call, as read(2) and libuv's
         * uv_fs_read make: the kernel checks the fd (closed, or opened
         * for the other direction: -EBADF; a pipe at an offset: -ESPIPE). */
        ssize_t n;
        do
            n = rw_once(req->fd, p, cnt, off, write);
        while (n < 0 && errno == EINTR);
        return n < 0 ? -errno : 0;
    }
    size_t done = 0;
    int i = 0;
    while (i < cnt) {
        if (p[i].iov_len == 0) {
            i++;
            continue;
        }
        ssize_t n = rw_once(req->fd, p + i, cnt - i, off, write);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return done ? (int64_t)done : -errno;
        if (n == 0) {
            if (write && !done) return -EIO; /* a regular file never */
            break;
        }
        done += (size_t)n;
        if (off == LULL_FS_CURRENT) {
            if (!write) break;
        } else {
            off += (uint64_t)n;
        }
        size_t left = (size_t)n;
        while (i < cnt && left >= p[i].iov_len) {
            left -= p[i].iov_len;
            i++;
        }
        if (left) {
            p[i].iov_base = (char *)p[i].iov_base + left;
            p[i].iov_len -= left;
        }
    }
    return (int64_t)done;
}

/* Writes all len bytes; returns how many were written, fewer only with
 * *err set: the bytes a full non-blocking pipe took before its EAGAIN were
 * sent all the same, and a result that left them out had the caller send
 * them twice. */
static size_t write_all(int fd, const char *buf, size_t len, off_t *at,
                        int *err) {
    size_t done = 0;
    *err = 0;
    while (done < len) {
        ssize_t n = at ? pwrite(fd, buf + done, len - done, *at)
                       : write(fd, buf + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            *err = -errno;
            break;
        }
        done += (size_t)n;
        if (at) *at += n;
    }
    return done;
}

/* Whether a copy from `in` to `out` of len bytes is inside one file with
 * the destination starting within the source: the kernel refuses that
 * pair (EINVAL), and front-to-back chunks would read bytes the copy had
 * already overwritten. */
static bool overlaps_forward(const lull_fs *req, off_t in, off_t out,
                             size_t len) {
    struct stat a, b;
    if (out <= in || (uint64_t)(out - in) >= len) return false;
    return fstat(req->fd, &a) == 0 && fstat(req->fd2, &b) == 0 &&
           a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The fallback for overlaps_forward: chunks from the back to the front, as
 * memmove does, over as much of the source as the file holds. The bytes
 * copied are not a prefix of the range, so an error is the result alone. */
static int64_t copy_backward(lull_fs *req, off_t in, off_t out, size_t len) {
    struct stat st;
    if (fstat(req->fd, &st) < 0) return -errno;
    if (st.st_size <= in) return 0;
    if ((uint64_t)(st.st_size - in) < len) len = (size_t)(st.st_size - in);
    char buf[COPY_CHUNK];
    for (size_t left = len; left > 0;) {
        size_t n = left < sizeof buf ? left : sizeof buf;
        left -= n;
        size_t got = 0;
        while (got < n) {
            ssize_t r =
                pread(req->fd, buf + got, n - got, in + (off_t)(left + got));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return -errno;
            if (r == 0) return -EIO; /* the file shrank under the copy */
            got += (size_t)r;
        }
        off_t at = out + (off_t)left;
        int err;
        write_all(req->fd2, buf, n, &at, &err);
        if (err) return err;
    }
    return (int64_t)len;
}

/* copy_file_range (to_pos) or sendfile (!to_pos), and pread + write where
 * the kernel refuses the pair. A first zero from the kernel call also
 * tries the fallback once: copy_file_range copies nothing out of procfs
 * and sysfs files, which report a size of 0. */
static int64_t copy_run(lull_fs *req, bool to_pos) {
    off_t in = (off_t)req->offset, out = (off_t)req->offset2;
    if (req->len == 0) {
        /* Nothing to copy, but both fds are still asked, as the kernel's
         * calls (and libuv's sendfile) ask them with a length of 0: the
         * fallback's read and write of nothing, whose errors are each
         * fd's own on every kernel (-EBADF: closed, or opened for the
         * other direction). */
        char c;
        ssize_t n;
        do
            n = pread(req->fd, &c, 0, in);
        while (n < 0 && errno == EINTR);
        if (n == 0) {
            do
                n = to_pos ? pwrite(req->fd2, &c, 0, out)
                           : write(req->fd2, &c, 0);
            while (n < 0 && errno == EINTR);
        }
        return n < 0 ? -errno : 0;
    }
    size_t done = 0;
    bool fallback = false;
    while (done < req->len) {
        size_t want = req->len - done;
        ssize_t n;
        if (!fallback) {
            if (to_pos)
                n = copy_file_range(req->fd, &in, req->fd2, &out, want, 0);
            else
                n = sendfile(req->fd2, req->fd, &in,
                             want > 0x7ffff000 ? 0x7ffff000 : want);
            if (n < 0 && errno == EINTR) continue;
            /* EPERM: older seccomp profiles refuse the calls they do not
             * know with it (a true EPERM, an immutable destination,
             * fails the fallback's write the same way). */
            if ((n < 0 &&
                 (errno == EXDEV || errno == EINVAL || errno == ENOSYS ||
                  errno == EOPNOTSUPP || errno == EPERM)) ||
                (n == 0 && done == 0)) {
                fallback = true;
                if (to_pos && overlaps_forward(req, in, out, want)) {
                    int64_t r = copy_backward(req, in, out, want);
                    return r < 0 ? r : (int64_t)done + r;
                }
                continue;
            }
        } else {
            char buf[COPY_CHUNK];
            n = pread(req->fd, buf, want < sizeof buf ? want : sizeof buf, in);
            if (n < 0 && errno == EINTR) continue;
            if (n > 0) {
                int err;
                size_t w = write_all(req->fd2, buf, (size_t)n,
                                     to_pos ? &out : NULL, &err);
                if (err) {
                    done += w;
                    return done ? (int64_t)done : err;
                }
                in += n;
            }
        }
        if (n < 0) return done ? (int64_t)done : -errno;
        if (n == 0) break; /* end of fd_in */
        done += (size_t)n;
    }
    return (int64_t)done;
}

static int64_t stat_run(int dirfd, const char *path, int flags,
                        lull_stat *out) {
    memset(out, 0, sizeof *out);
#ifdef SYS_statx
    struct statx sx;
    if (syscall(SYS_statx, dirfd, path, flags | AT_STATX_SYNC_AS_STAT,
                STATX_BASIC_STATS | STATX_BTIME, &sx) == 0) {
        out->dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
        out->rdev = makedev(sx.stx_rdev_major, sx.stx_rdev_minor);
        out->ino = sx.stx_ino;
        out->mode = sx.stx_mode;
        out->nlink = sx.stx_nlink;
        out->uid = sx.stx_uid;
        out->gid = sx.stx_gid;
        out->size = sx.stx_size;
        out->blksize = sx.stx_blksize;
        out->blocks = sx.stx_blocks;
#define NS(t) ((int64_t)(t).tv_sec * 1000000000 + (t).tv_nsec)
        out->atime_ns = NS(sx.stx_atime);
        out->mtime_ns = NS(sx.stx_mtime);
        out->ctime_ns = NS(sx.stx_ctime);
        if (sx.stx_mask & STATX_BTIME) out->btime_ns = NS(sx.stx_btime);
        return 0;
    }
    /* ENOSYS, or EPERM from a seccomp profile older than statx: fstatat
     * (no stat of a path gives a true EPERM). */
    if (errno != ENOSYS && errno != EPERM) return -errno;
#endif
    struct stat st;
    if (fstatat(dirfd, path, &st, flags) < 0) return -errno;
    out->dev = st.st_dev;
    out->rdev = st.st_rdev;
    out->ino = st.st_ino;
    out->mode = st.st_mode;
    out->nlink = (uint32_t)st.st_nlink;
    out->uid = st.st_uid;
    out->gid = st.st_gid;
    out->size = (uint64_t)st.st_size;
    out->blksize = (uint64_t)st.st_blksize;
    out->blocks = (uint64_t)st.st_blocks;
    out->atime_ns = NS(st.st_atim);
    out->mtime_ns = NS(st.st_mtim);
    out->ctime_ns = NS(st.st_ctim);
    return 0;
}

/* One trip of a listing: opens the directory on the first, then fills at
 * most one batch. */
static void scandir_run(lull_fs *req) {
    dir_state *st = req->dir;
    st->n = 0;
    if (!st->d) {
        int fd = open(req->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        /* Held from batch to batch: never the program's closed stdio
         * (lull__fd_above_stdio). */
        fd = fd < 0 ? -errno : lull__fd_above_stdio(fd);
        if (fd < 0) {
            st->err = fd;
            return;
        }
        st->d = fdopendir(fd);
        if (!st->d) {
            st->err = -errno;
            close(fd);
            return;
        }
    }
    while (st->n < LULL_FS_DIR_BATCH) {
        errno = 0;
        struct dirent *e = readdir(st->d);
        if (!e) {
            if (errno)
                st->err = -errno;
            else
                st->end = true;
            return;
        }
        if (e->d_name[0] == '.' &&
            (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2])))
            continue;
        lull_dirent *d = &st->ents[st->n++];
        d->ino = e->d_ino;
        d->type = e->d_type;
        size_t l = strnlen(e->d_name, sizeof d->name - 1);
        memcpy(d->name, e->d_name, l);
        d->name[l] = '\0';
    }
}

static int fs_run(lull_work *work) {
    lull_fs *req = LULL_CONTAINER_OF(work, lull_fs, work);
    struct timespec ts[2]; /* utime: copied out, as they were copied in */
    int64_t r = 0;
    switch (req->op) {
    case OP_OPEN:
        do {
            r = sys(open(req->path, req->flags | O_CLOEXEC, (mode_t)req->mode));
        } while (r == -EINTR);
        break;
    case OP_CLOSE:
        /* Linux frees the descriptor even when close reports EINTR: never
         * retry, another thread may already own the number. */
        r = close(req->fd) < 0 && errno != EINTR ? -errno : 0;
        break;
    case OP_READ:
    case OP_READV:
        r = rw_all(req, false);
        break;
    case OP_WRITE:
    case OP_WRITEV:
        r = rw_all(req, true);
        break;
    case OP_STAT:
        r = stat_run(AT_FDCWD, req->path, 0, req->buf);
        break;
    case OP_LSTAT:
        r = stat_run(AT_FDCWD, req->path, AT_SYMLINK_NOFOLLOW, req->buf);
        break;
    case OP_FSTAT:
        r = stat_run(req->fd, "", AT_EMPTY_PATH, req->buf);
        break;
    case OP_RENAME:
        r = sys(rename(req->path, req->path2));
        break;
    case OP_UNLINK:
        r = sys(unlink(req->path));
        break;
    case OP_MKDIR:
        r = sys(mkdir(req->path, (mode_t)req->mode));
        break;
    case OP_RMDIR:
        r = sys(rmdir(req->path));
        break;
    case OP_MKDTEMP:
        r = mkdtemp(req->buf) ? 0 : -errno;
        break;
    case OP_LINK:
        r = sys(link(req->path, req->path2));
        break;
    case OP_SYMLINK:
        r = sys(symlink(req->path, req->path2));
        break;
    case OP_READLINK:
        r = sys(readlink(req->path, req->buf, req->len));
        if (r >= (int64_t)req->len) r = -ENAMETOOLONG;
        if (r >= 0) ((char *)req->buf)[r] = '\0';
        break;
    case OP_REALPATH: {
        char tmp[PATH_MAX];
        if (!realpath(req->path, tmp)) {
            r = -errno;
            break;
        }
        r = (int64_t)strlen(tmp);
        if (r >= (int64_t)req->len)
            r = -ENAMETOOLONG;
        else
            memcpy(req->buf, tmp, (size_t)r + 1);
        break;
    }
    case OP_SCANDIR:
        scandir_run(req);
        break;
    case OP_FSYNC:
        r = sys(fsync(req->fd));
        break;
    case OP_FDATASYNC:
        r = sys(fdatasync(req->fd));
        break;
    case OP_FTRUNCATE:
        r = sys(ftruncate(req->fd, (off_t)req->offset));
        break;
    case OP_COPY:
        r = copy_run(req, true);
        break;
    case OP_SENDFILE:
        r = copy_run(req, false);
        break;
    case OP_CHMOD:
        r = sys(chmod(req->path, (mode_t)req->mode));
        break;
    case OP_FCHMOD:
        r = sys(fchmod(req->fd, (mode_t)req->mode));
        break;
    case OP_CHOWN:
        r = sys(chown(req->path, req->uid, req->gid));
        break;
    case OP_FCHOWN:
        r = sys(fchown(req->fd, req->uid, req->gid));
        break;
    case OP_UTIME:
        memcpy(ts, req->times, sizeof ts);
        r = sys(utimensat(AT_FDCWD, req->path, req->flags ? NULL : ts, 0));
        break;
    case OP_FUTIME:
        memcpy(ts, req->times, sizeof ts);
        r = sys(futimens(req->fd, req->flags ? NULL : ts));
        break;
    }
    req->result = r;
    return 0;
}

/* ---------------------------------------------------- on the loop */

static void finish(lull_fs *req, int64_t result) {
    req->result = result;
    req->cb(req, result);
}

/* A listing's end, whichever way: its state goes before cb runs, so cb may
 * reuse the request at once. */
static void scandir_finish(lull_fs *req, int64_t result) {
    dir_state *st = req->dir;
    if (st->d) closedir(st->d);
    free(st);
    req->dir = NULL;
    finish(req, result);
}

static void scandir_done(lull_fs *req, int status) {
    dir_state *st = req->dir;
    if (status < 0) {
        scandir_finish(req, status);
        return;
    }
    /* Cancelled while this trip was off the loop (lull_fs_cancel): its
     * batch is not handed over. */
    if (req->stop) {
        scandir_finish(req, -ECANCELED);
        return;
    }
    if (st->n) {
        size_t n = st->n;
        st->n = 0;
        st->count += n;
        st->in_cb = true;
        bool more = req->dir_cb(req, st->ents, n);
        st->in_cb = false;
        if (req->stop) {
            scandir_finish(req, -ECANCELED);
            return;
        }
        if (!more) {
            scandir_finish(req, (int64_t)st->count);
            return;
        }
    }
    if (st->err || st->end) {
        scandir_finish(req, st->err ? st->err : (int64_t)st->count);
        return;
    }
    int rc = lull__work_submit_again(req->work.loop, st->pool, &req->work);
    if (rc < 0) scandir_finish(req, rc);
}

static void fs_done(lull_work *work, int status) {
    lull_fs *req = LULL_CONTAINER_OF(work, lull_fs, work);
    if (req->op == OP_SCANDIR)
        scandir_done(req, status);
    else
        finish(req, status < 0 ? status : req->result);
}

/* Whether req is in flight: submitted, or a listing between its trips.
 * A request has no init of its own (uv_fs_t neither), so one never used
 * holds whatever its memory held: only a request submitted here has
 * fs_run in its work, and garbage that reads as in flight would refuse
 * (-EBUSY) every call on it, for ever. */
static bool fs_in_flight(const lull_fs *req) {
    return req->work.fn == fs_run && (lull_work_busy(&req->work) || req->dir);
}

/* The request must not be in flight when its fields are rewritten. */
static int fs_check(lull_loop *loop, lull_pool *pool, lull_fs *req,
                    lull_fs_fn cb) {
    if (!loop || !pool || !req || !cb) return -EINVAL;
    if (fs_in_flight(req)) return -EBUSY;
    lull_work_init(&req->work, fs_run, fs_done);
    req->iov = NULL;
    req->iovcnt = 0;
    return 0;
}

/* A path the kernel would refuse as too long is refused before any thread
 * sees it; an empty one is the kernel's to refuse (-ENOENT). */
static int path_ok(const char *path) {
    return path && strnlen(path, PATH_MAX) < PATH_MAX;
}

static int fs_submit(lull_loop *loop, lull_pool *pool, lull_fs *req, int op,
                     lull_fs_fn cb) {
    req->op = op;
    req->cb = cb;
    req->result = 0;
    return lull_work_submit(loop, pool, &req->work);
}

/* Every submit function starts here: nothing of a request in flight is
 * touched before the check has said it is free. */
#define CHECK_REQ()                                                            \
    do {                                                                       \
        int rc_ = fs_check(loop, pool, req, cb);                               \
        if (rc_) return rc_;                                                   \
    } while (0)

static int fs_path(lull_loop *loop, lull_pool *pool, lull_fs *req, int op,
                   const char *path, const char *path2, lull_fs_fn cb) {
    bool two = op == OP_RENAME || op == OP_LINK || op == OP_SYMLINK;
    if (!path_ok(path) || (two && !path_ok(path2))) return -EINVAL;
    req->path = path;
    req->path2 = path2;
    return fs_submit(loop, pool, req, op, cb);
}

static int fs_fd(lull_loop *loop, lull_pool *pool, lull_fs *req, int op, int fd,
                 lull_fs_fn cb) {
    if (fd < 0) return -EBADF;
    req->fd = fd;
    return fs_submit(loop, pool, req, op, cb);
}

int lull_fs_open(lull_loop *loop, lull_pool *pool, lull_fs *req,
                 const char *path, int flags, unsigned mode, lull_fs_fn cb) {
    CHECK_REQ();
    req->flags = flags;
    req->mode = mode;
    return fs_path(loop, pool, req, OP_OPEN, path, NULL, cb);
}

int lull_fs_close(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                  lull_fs_fn cb) {
    CHECK_REQ();
    return fs_fd(loop, pool, req, OP_CLOSE, fd, cb);
}

/* An off_t, or the fd's own position. */
static bool offset_ok(uint64_t offset) {
    return offset <= INT64_MAX || offset == LULL_FS_CURRENT;
}

static int fs_rw(lull_loop *loop, lull_pool *pool, lull_fs *req, int op, int fd,
                 void *buf, size_t len, uint64_t offset, lull_fs_fn cb) {
    CHECK_REQ();
    if (fd < 0) return -EBADF;
    if ((!buf && len) || len > SSIZE_MAX || !offset_ok(offset)) return -EINVAL;
    req->fd = fd;
    req->buf = buf;
    req->len = len;
    req->offset = offset;
    return fs_submit(loop, pool, req, op, cb);
}

int lull_fs_read(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                 void *buf, size_t len, uint64_t offset, lull_fs_fn cb) {
    return fs_rw(loop, pool, req, OP_READ, fd, buf, len, offset, cb);
}

int lull_fs_write(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                  const void *buf, size_t len, uint64_t offset, lull_fs_fn cb) {
    return fs_rw(loop, pool, req, OP_WRITE, fd, (void *)buf, len, offset, cb);
}

static int fs_vec(lull_loop *loop, lull_pool *pool, lull_fs *req, int op,
                  int fd, const struct iovec *iov, int iovcnt, uint64_t offset,
                  lull_fs_fn cb) {
    CHECK_REQ();
    if (fd < 0) return -EBADF;
    if (!iov || iovcnt < 1 || iovcnt > IOV_MAX || !offset_ok(offset))
        return -EINVAL;
    size_t total = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (!iov[i].iov_base && iov[i].iov_len) return -EINVAL;
        if (iov[i].iov_len > SSIZE_MAX - total) return -EINVAL;
        total += iov[i].iov_len;
    }
    req->fd = fd;
    req->iov = iov;
    req->iovcnt = iovcnt;
    req->offset = offset;
    return fs_submit(loop, pool, req, op, cb);
}

int lull_fs_readv(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                  const struct iovec *iov, int iovcnt, uint64_t offset,
                  lull_fs_fn cb) {
    return fs_vec(loop, pool, req, OP_READV, fd, iov, iovcnt, offset, cb);
}

int lull_fs_writev(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                   const struct iovec *iov, int iovcnt, uint64_t offset,
                   lull_fs_fn cb) {
    return fs_vec(loop, pool, req, OP_WRITEV, fd, iov, iovcnt, offset, cb);
}

int lull_fs_stat(lull_loop *loop, lull_pool *pool, lull_fs *req,
                 const char *path, lull_stat *out, lull_fs_fn cb) {
    CHECK_REQ();
    if (!out) return -EINVAL;
    req->buf = out;
    return fs_path(loop, pool, req, OP_STAT, path, NULL, cb);
}

int lull_fs_lstat(lull_loop *loop, lull_pool *pool, lull_fs *req,
                  const char *path, lull_stat *out, lull_fs_fn cb) {
    CHECK_REQ();
    if (!out) return -EINVAL;
    req->buf = out;
    return fs_path(loop, pool, req, OP_LSTAT, path, NULL, cb);
}

int lull_fs_fstat(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                  lull_stat *out, lull_fs_fn cb) {
    CHECK_REQ();
    if (!out) return -EINVAL;
    req->buf = out;
    return fs_fd(loop, pool, req, OP_FSTAT, fd, cb);
}

int lull_fs_rename(lull_loop *loop, lull_pool *pool, lull_fs *req,
                   const char *from, const char *to, lull_fs_fn cb) {
    CHECK_REQ();
    return fs_path(loop, pool, req, OP_RENAME, from, to, cb);
}

int lull_fs_unlink(lull_loop *loop, lull_pool *pool, lull_fs *req,
                   const char *path, lull_fs_fn cb) {
    CHECK_REQ();
    return fs_path(loop, pool, req, OP_UNLINK, path, NULL, cb);
}

int lull_fs_mkdir(lull_loop *loop, lull_pool *pool, lull_fs *req,
                  const char *path, unsigned mode, lull_fs_fn cb) {
    CHECK_REQ();
    req->mode = mode;
    return fs_path(loop, pool, req, OP_MKDIR, path, NULL, cb);
}

int lull_fs_rmdir(lull_loop *loop, lull_pool *pool, lull_fs *req,
                  const char *path, lull_fs_fn cb) {
    CHECK_REQ();
    return fs_path(loop, pool, req, OP_RMDIR, path, NULL, cb);
}

int lull_fs_mkdtemp(lull_loop *loop, lull_pool *pool, lull_fs *req, char *tmpl,
                    lull_fs_fn cb) {
    CHECK_REQ();
    req->buf = tmpl;
    return fs_path(loop, pool, req, OP_MKDTEMP, tmpl, NULL, cb);
}

int lull_fs_link(lull_loop *loop, lull_pool *pool, lull_fs *req,
                 const char *from, const char *to, lull_fs_fn cb) {
    CHECK_REQ();
    return fs_path(loop, pool, req, OP_LINK, from, to, cb);
}

int lull_fs_symlink(lull_loop *loop, lull_pool *pool, lull_fs *req,
                    const char *target, const char *linkpath, lull_fs_fn cb) {
    CHECK_REQ();
    return fs_path(loop, pool, req, OP_SYMLINK, target, linkpath, cb);
}

static int fs_name(lull_loop *loop, lull_pool *pool, lull_fs *req, int op,
                   const char *path, char *buf, size_t size, lull_fs_fn cb) {
    CHECK_REQ();
    if (!buf || !size || size > SSIZE_MAX) return -EINVAL;
    req->buf = buf;
    req->len = size;
    return fs_path(loop, pool, req, op, path, NULL, cb);
}

int lull_fs_readlink(lull_loop *loop, lull_pool *pool, lull_fs *req,
                     const char *path, char *buf, size_t size, lull_fs_fn cb) {
    return fs_name(loop, pool, req, OP_READLINK, path, buf, size, cb);
}

int lull_fs_realpath(lull_loop *loop, lull_pool *pool, lull_fs *req,
                     const char *path, char *buf, size_t size, lull_fs_fn cb) {
    return fs_name(loop, pool, req, OP_REALPATH, path, buf, size, cb);
}

int lull_fs_scandir(lull_loop *loop, lull_pool *pool, lull_fs *req,
                    const char *path, lull_fs_dir_fn dir_cb, lull_fs_fn cb) {
    CHECK_REQ();
    if (!path_ok(path) || !dir_cb) return -EINVAL;
    dir_state *st = calloc(1, sizeof *st);
    if (!st) return -ENOMEM;
    st->pool = pool;
    req->path = path;
    req->dir_cb = dir_cb;
    req->stop = false;
    req->dir = st;
    int rc = fs_submit(loop, pool, req, OP_SCANDIR, cb);
    if (rc < 0) {
        free(st);
        req->dir = NULL;
    }
    return rc;
}

int lull_fs_fsync(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                  lull_fs_fn cb) {
    CHECK_REQ();
    return fs_fd(loop, pool, req, OP_FSYNC, fd, cb);
}

int lull_fs_fdatasync(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                      lull_fs_fn cb) {
    CHECK_REQ();
    return fs_fd(loop, pool, req, OP_FDATASYNC, fd, cb);
}

int lull_fs_ftruncate(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                      uint64_t len, lull_fs_fn cb) {
    CHECK_REQ();
    if (len > INT64_MAX) return -EINVAL;
    req->offset = len;
    return fs_fd(loop, pool, req, OP_FTRUNCATE, fd, cb);
}

static int fs_copy(lull_loop *loop, lull_pool *pool, lull_fs *req, int op,
                   int fd_out, uint64_t off_out, int fd_in, uint64_t off_in,
                   size_t len, lull_fs_fn cb) {
    CHECK_REQ();
    if (fd_out < 0 || fd_in < 0) return -EBADF;
    if (len > SSIZE_MAX || off_in > INT64_MAX || off_out > INT64_MAX)
        return -EINVAL;
    req->fd = fd_in;
    req->fd2 = fd_out;
    req->offset = off_in;
    req->offset2 = off_out;
    req->len = len;
    return fs_submit(loop, pool, req, op, cb);
}

int lull_fs_copy_range(lull_loop *loop, lull_pool *pool, lull_fs *req,
                       int fd_out, uint64_t off_out, int fd_in, uint64_t off_in,
                       size_t len, lull_fs_fn cb) {
    return fs_copy(loop, pool, req, OP_COPY, fd_out, off_out, fd_in, off_in,
                   len, cb);
}

int lull_fs_sendfile(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd_out,
                     int fd_in, uint64_t off_in, size_t len, lull_fs_fn cb) {
    return fs_copy(loop, pool, req, OP_SENDFILE, fd_out, 0, fd_in, off_in, len,
                   cb);
}

int lull_fs_chmod(lull_loop *loop, lull_pool *pool, lull_fs *req,
                  const char *path, unsigned mode, lull_fs_fn cb) {
    CHECK_REQ();
    req->mode = mode;
    return fs_path(loop, pool, req, OP_CHMOD, path, NULL, cb);
}

int lull_fs_fchmod(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                   unsigned mode, lull_fs_fn cb) {
    CHECK_REQ();
    req->mode = mode;
    return fs_fd(loop, pool, req, OP_FCHMOD, fd, cb);
}

int lull_fs_chown(lull_loop *loop, lull_pool *pool, lull_fs *req,
                  const char *path, uint32_t uid, uint32_t gid, lull_fs_fn cb) {
    CHECK_REQ();
    req->uid = uid;
    req->gid = gid;
    return fs_path(loop, pool, req, OP_CHOWN, path, NULL, cb);
}

int lull_fs_fchown(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                   uint32_t uid, uint32_t gid, lull_fs_fn cb) {
    CHECK_REQ();
    req->uid = uid;
    req->gid = gid;
    return fs_fd(loop, pool, req, OP_FCHOWN, fd, cb);
}

/* Copies the two times into the request; flags 1 stands for NULL (now). */
static void set_times(lull_fs *req, const struct timespec *ts) {
    _Static_assert(2 * sizeof *ts <= sizeof req->times, "lull_fs.times");
    req->flags = ts == NULL;
    if (ts) memcpy(req->times, ts, 2 * sizeof *ts);
}

int lull_fs_utime(lull_loop *loop, lull_pool *pool, lull_fs *req,
                  const char *path, const struct timespec *ts, lull_fs_fn cb) {
    CHECK_REQ();
    set_times(req, ts);
    return fs_path(loop, pool, req, OP_UTIME, path, NULL, cb);
}

int lull_fs_futime(lull_loop *loop, lull_pool *pool, lull_fs *req, int fd,
                   const struct timespec *ts, lull_fs_fn cb) {
    CHECK_REQ();
    set_times(req, ts);
    return fs_fd(loop, pool, req, OP_FUTIME, fd, cb);
}

int lull_fs_cancel(lull_fs *req) {
    /* Never submitted (fs_in_flight): its fields are not to be followed. */
    if (!req || req->work.fn != fs_run) return -EINVAL;
    dir_state *st = req->dir;
    if (st && st->in_cb) {
        if (req->stop) return -EBUSY; /* the end is on its way already */
        req->stop = true; /* scandir_done ends the listing after dir_cb */
        return 0;
    }
    int rc = lull_work_cancel(&req->work);
    if (!st) return rc;
    /* A listing's trip a thread took, or that is back and not yet
     * delivered: a one-shot request is then past cancelling, but a listing
     * has more trips to go, and -EBUSY left it running to its end with no
     * way to know when a cancel would take (whether a trip is off the
     * loop cannot be seen from it). It ends when that trip is back. A
     * second cancel is -EBUSY: the end is on its way. */
    if (rc == -EBUSY && !req->stop) rc = 0;
    if (rc == 0) req->stop = true;
    return rc;
}
