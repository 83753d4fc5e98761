#!/bin/bash
# A server example given a port another server holds must say so, exit 1
# and free what it made on the way out (prefork and port_echo_from_libuv
# returned without lull_loop_free: ASan's leak check reported the loop).
# Run by CTest as examples.<name>_port_in_use_fails_cleanly.
#   bash port_in_use.sh <program> <the echo example>
prog=$1 holder=$2
. "$(dirname "$0")/start_server.sh"
start_server 1024 "$holder"
out=$("$prog" "$port" 2>&1)
rc=$?
echo "$out"
echo "$(basename "$prog") on the port echo holds ($port): exit $rc"
[ "$rc" = 1 ] && echo "$out" | grep -q "Address already in use" &&
    ! echo "$out" | grep -q "Sanitizer"
