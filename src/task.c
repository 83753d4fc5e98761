/* Posted tasks and the ready queue (C2).
 *
 * Owns: posting and cancelling on the FIFO of ready nodes (tasks and
 * zero-delay timers share it, so they run in post order). The loop that
 * runs it, and the dispatch of one node, are inline in internal.h
 * (lull__run_queue), beside the loop iteration that calls them.
 * Invariants: a node is in at most one queue; next == NULL means "not
 * pending"; a task's aux is 0 or its wait-sample tag; a node is unlinked
 * before its callback runs, so the callback may re-post, free or hand the task
 * to another thread, and the loop does not touch it afterwards. Loop thread
 * only. */
#include <errno.h>

#include "internal.h"

int lull_task_init(lull_task *task, lull_task_fn fn) {
    /* Without a function the task would crash the loop that runs it (a
     * call through NULL, release builds): refused here, as lull_timer_init
     * and lull_io_init refuse theirs. */
    if (!task || !fn) return -EINVAL;
    task->node.next = NULL;
    task->node.prev = NULL;
    task->node.fn.task = fn;
    task->node.flags = 0;
    task->node.aux = 0;
    task->remote_next = NULL;
    task->loop = NULL;
    task->data = NULL;
    return 0;
}

LULL__HOT void lull_task_post(lull_loop *loop, lull_task *task) {
    if (LULL_UNLIKELY(!loop || !task)) return;
    LULL_ASSERT_LOOP_THREAD(loop);
    /* A task never set up (no function) is a programming error: debug
     * builds stop here. Release builds are not charged a load and a branch
     * on every post of the hot path for it (lull_task_post_remote, with
     * its atomics, does check). */
    LULL_ASSERT(task->node.fn.task, "lull: posting a task with no function");
    lull__post(loop, task);
}

LULL__HOT void lull_task_cancel(lull_task *task) {
    if (!task || !lull__node_queued(&task->node)) return;
    /* A queued task knows its loop (a post, or lull__at_flush, wrote it):
     * an unlink from another thread races that loop's runner. */
    LULL_ASSERT_LOOP_THREAD(task->loop);
    lull__queue_remove(&task->node);
    task->node.aux = 0; /* a wait sample dies with the post */
}

bool lull_task_pending(const lull_task *task) {
    return task && lull__node_queued(&task->node);
}
