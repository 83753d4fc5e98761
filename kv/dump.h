/* dump.h: a keyspace as text, for comparing two: every key in key order
 * with its type, value (sets and hashes sorted, lists and sorted sets in
 * their order) and expiry, one line each, each key, member, field and
 * value after its length. Two keyspaces are equal when their dumps are
 * (tests/test_kv.c, the simulator's replicas). */
#ifndef LULL_KV_DUMP_H
#define LULL_KV_DUMP_H

#include "buf.h"
#include "cmd.h"

/* Replaces d's contents with k's dump, NUL-terminated. */
void kv_dump(kv *k, buf *d);

#endif
