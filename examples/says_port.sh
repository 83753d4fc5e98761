#!/bin/bash
# A server example says where it listens at once, also with its stdout a
# file (prefork's line sat in stdio's buffer until it exited). Run by
# CTest as examples.<name>_says_port_when_piped.
#   bash says_port.sh <program>
prog=$1
. "$(dirname "$0")/start_server.sh"
start_server 1024 "$prog"
cat "$log"
