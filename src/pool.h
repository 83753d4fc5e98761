/* What the pool (src/pool.c) tells the per-core set (src/percore.c). */
#ifndef LULL_POOL_H
#define LULL_POOL_H

#include <stdbool.h>

/* True on a pool's own thread (one running lull_work functions): a call
 * that waits for loops to go idle must not block it, since a loop's work
 * in flight may need this very thread (lull_percore_stop: -EDEADLK). */
bool lull__pool_thread(void);

#endif
