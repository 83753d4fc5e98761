#!/bin/sh
# The loop's per-iteration functions in the shared library make no
# __tls_get_addr call (ctest: lib.hot_paths_no_tls_call). A _Thread_local
# of a shared library's own takes the general-dynamic model by default: a
# call into ld.so on each access, some 11 instructions, where the static
# library (and an executable) reads %fs directly. Variables such a path
# reads take the initial-exec model (src/timer.c's due_loop).
#   tests/hot_tls_check.sh <liblull.so>
# Exit 77 (a skip for ctest) without objdump.
lib=$1
if ! command -v objdump >/dev/null 2>&1; then
    echo "hot-path TLS check: objdump not installed, skipped"
    exit 77
fi
hot="lull_loop_run lull__timers_run_due lull__timers_expire lull_task_post
lull_timer_start lull_timer_stop lull_endpoint_send"
objdump -dr --no-show-raw-insn "$lib" >"${TMPDIR:-/tmp}/hot_tls.$$" || exit 1
found=$(awk -v hot=" $(echo $hot) " '
    /^[0-9a-f]+ <[^>]*>:$/ { fn = substr($2, 2, length($2) - 3); next }
    /__tls_get_addr/ && index(hot, " " fn " ") { print fn }
' "${TMPDIR:-/tmp}/hot_tls.$$" | sort -u)
rm -f "${TMPDIR:-/tmp}/hot_tls.$$"
if [ -n "$found" ]; then
    echo "these per-iteration functions call __tls_get_addr:" $found
    exit 1
fi
echo "hot-path TLS check: no __tls_get_addr call in" $hot
