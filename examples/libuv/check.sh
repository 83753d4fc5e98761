#!/bin/sh
# Builds the libuv original of docs/MIGRATING.md's echo server
# (echo_libuv.c) and runs its self-test with the client the lull port is
# tested with, so that the side by side stays honest. Run by CTest as
# examples.port_echo_libuv_original; exits 77 (skipped) with one line when
# pkg-config or libuv is missing.
#   sh check.sh <cc> <source dir of this script> <scratch dir>
cc=$1 src=$2 work=$3
if ! command -v pkg-config >/dev/null 2>&1 || ! pkg-config --exists libuv; then
    echo "skipped: libuv not found by pkg-config (Debian: libuv1-dev)"
    exit 77
fi
mkdir -p "$work" || exit 1
# shellcheck disable=SC2046 # pkg-config's flags are separate words
"$cc" -std=c11 -Wall -Wextra -Werror -O2 -pthread -o "$work/echo_libuv" \
    "$src/echo_libuv.c" $(pkg-config --cflags --libs libuv) || exit 1
out=$("$work/echo_libuv" --self-test) || { echo "$out"; exit 1; }
echo "$out"
echo "$out" | grep -Eq "^echo_libuv: 2 connections, [0-9]+ bytes echoed, 1 closed by peer, 1 closed idle, 0 by error; reading paused [1-9][0-9]* times" || {
    echo "echo_libuv: unexpected summary"
    exit 1
}
