/* What the pool (src/pool.c) tells the per-core set (src/percore.c). */
#ifndef LULL_POOL_H
#define LULL_POOL_H

#include <stdbool.h>

#include "lull.h"

/* True on a pool's own thread (one running lull_work functions): a call
 * that waits for loops to go idle must not block it, since a loop's work
 * in flight may need this very thread (lull_percore_stop: -EDEADLK). */
bool lull__pool_thread(void);

/* True while w waits in pool's queue or runs on one of its threads, up to
 * the post of its completion (the loop's remote stack has it from then
 * on). By address: w may be anything before its first submit. */
bool lull__pool_holds(lull_pool *pool, const lull_work *w);

/* lull_work_submit for the next trip of an operation the pool accepted
 * once (a listing's next batch, src/fsops.c): not refused for a full
 * queue, since it takes the place its last trip left (a refusal cut the
 * accepted operation short); a journal's next batch (src/fs.c) too.
 * -ESHUTDOWN, -ECHILD as lull_work_submit. */
int lull__work_submit_again(lull_loop *loop, lull_pool *pool, lull_work *work);

/* Lets go of w while it runs on one of the pool's threads (a lookup its
 * dial no longer waits for, src/dial.c): the loop is released at once (the
 * reference lull_work_submit took: w no longer keeps lull_loop_run going
 * nor lull_loop_free from freeing the loop), and when fn returns, its
 * thread calls drop(w, status) there instead of posting the completion.
 * drop frees what w holds and touches no loop; it runs under the pool's
 * lock, so it takes none of lull's locks (free and freeaddrinfo only). 0, or
 * -EBUSY where w is not running on a thread (waiting: cancel it; done and its
 * completion posted: that completion runs as usual). The loop's thread. */
int lull__work_let_go(lull_work *w, lull_work_done_fn drop);

#endif
