/* blob.h: the bytes of a large string value, counted by reference. A
 * string of KV_BLOB_MIN bytes or more is always one (store.c keeps that),
 * so its holders can be told apart by its length alone: the store's
 * value, a GET's reply in flight (conn.c sends the bytes where they are,
 * no copy), and a request's argument received straight into its blob
 * (conn.c), which SET keeps as the value, no copy either. Bytes a reply
 * holds are never written: a write to a blob held twice copies it first
 * (store_put, kobj_str_resize). One thread (the loop's). */
#ifndef LULL_KV_BLOB_H
#define LULL_KV_BLOB_H

#include <stddef.h>
#include <stdlib.h>

/* 64 KiB: conn.c's REPLY_HANDOVER, the size from which a reply is sent
 * from its own buffer rather than gathered with others; below it the
 * blob's extra frame and allocation would cost more than the copy. */
#define KV_BLOB_MIN ((size_t)64 << 10)

typedef struct kv_blob {
    size_t refs;  /* its holders; freed when the last goes */
    char bytes[]; /* what a value's kobj.val points at */
} kv_blob;

static inline kv_blob *kv_blob_of(const char *bytes) {
    return (kv_blob *)(void *)(bytes - offsetof(kv_blob, bytes));
}

/* A blob of cap bytes (their contents undefined), held once; its bytes,
 * or NULL when out of memory. */
static inline char *kv_blob_new(size_t cap) {
    if (cap > (size_t)-1 - sizeof(kv_blob)) return NULL;
    kv_blob *b = malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->refs = 1;
    return b->bytes;
}

/* A blob held once only, grown (or shrunk) to cap bytes, the first kept:
 * its new bytes, or NULL (it stays as it was). */
static inline char *kv_blob_resize(char *bytes, size_t cap) {
    if (cap > (size_t)-1 - sizeof(kv_blob)) return NULL;
    kv_blob *b = realloc(kv_blob_of(bytes), sizeof *b + cap);
    return b ? b->bytes : NULL;
}

static inline void kv_blob_ref(const char *bytes) {
    kv_blob_of(bytes)->refs++;
}

static inline void kv_blob_unref(const char *bytes) {
    kv_blob *b = kv_blob_of(bytes);
    if (--b->refs == 0) free(b);
}

/* Whether someone besides the store holds it (a reply in flight). */
static inline int kv_blob_shared(const char *bytes) {
    return kv_blob_of(bytes)->refs > 1;
}

#endif
