#!/bin/bash
# supervisor with its stdout read by `head -1`: once head has gone, the
# supervisor must stop its workers and exit 0 (every child reaped, loop
# freed), not die of SIGPIPE (exit 141) and leave them running in process
# groups of their own, reparented and out of ^C's reach.
# Run by CTest as examples.supervisor_stdout_closed_stops_workers.
#   bash stdout_closed.sh <supervisor>
prog=$1
"$prog" 2 2>/dev/null | head -1
rc=${PIPESTATUS[0]}
echo "supervisor exited $rc once its reader had gone"
[ "$rc" = 0 ]
