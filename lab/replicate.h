/* What lab/replicate.c shares with lab/replicate_write.c: the figures of
 * the write-cost and ping-pong sections, which the scenario prints after
 * the catch-up tables. */
#ifndef LAB_REPLICATE_H
#define LAB_REPLICATE_H

#include "lab.h"

/* 500-byte records written to a Unix socket whose other end a reader
 * thread drains: CPU per record of the writing thread, per way of writing.
 * Prints its table; writes "write_cost" into json when not NULL. */
int replicate_write_cost(const lab_options *opts, lab_json *json,
                         int record_size);

/* 64-byte ping-pong over a Unix socketpair, both threads pinned to one CPU:
 * blocking read/write (the floor) against two lull loops with streams.
 * Prints its table; writes "pingpong" into json when not NULL. */
int replicate_pingpong(const lab_options *opts, lab_json *json);

#endif
