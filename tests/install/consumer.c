/* A program built against an installed lull by the install test, once with
 * `pkg-config --cflags --libs lull` and once with find_package(lull): it
 * needs lull.h from the include directory and the library from libdir. */
#include <lull.h>
#include <stdio.h>

static int ran;

static void on_task(lull_task *task) {
    (void)task;
    ran++;
}

int main(void) {
    lull_loop *loop;
    if (lull_loop_new(&loop, NULL) != 0) return 1;
    lull_task task;
    lull_task_init(&task, on_task);
    lull_task_post(loop, &task);
    if (lull_loop_run(loop, LULL_RUN_DEFAULT) != 0 || ran != 1) return 1;
    if (lull_loop_free(loop) != 0) return 1;
    puts("consumer: ok");
    return 0;
}
