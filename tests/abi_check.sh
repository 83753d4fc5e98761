#!/bin/sh
# The ABI check (ctest: abi.check; make abi-check): the library just built
# against the committed baseline abi/lull.abi. Every handle is a struct in
# the caller's memory, so sizes and field offsets are ABI as much as the
# functions are. A change the baseline does not have fails here until it
# is said out loud: regenerate the baseline (make abi-baseline) and list
# the change in NEWS.md; a change that breaks the ABI (a size, an offset, a
# removed or changed function) also needs a new major version.
#   tests/abi_check.sh <liblull.so> <source dir> <scratch dir>
# Exit 77 (a skip for ctest) when libabigail's tools are missing.
lib=$1 src=$2 work=$3
if ! command -v abidw >/dev/null 2>&1 || ! command -v abidiff >/dev/null 2>&1; then
    echo "abi check: abidw/abidiff not installed (Debian: abigail-tools), skipped"
    exit 77
fi
mkdir -p "$work" || exit 1
# One set of flags for the baseline and for every check, so the two XML
# files differ only where the library does.
abidw --no-corpus-path --no-comp-dir-path --no-show-locs --drop-private-types \
    --headers-dir "$src/include" --out-file "$work/current.abi" "$lib" || exit 1
if [ "$ABI_WRITE_BASELINE" = 1 ]; then
    cp "$work/current.abi" "$src/abi/lull.abi" && echo "abi: wrote abi/lull.abi"
    exit $?
fi
abidiff "$src/abi/lull.abi" "$work/current.abi" >"$work/abidiff.txt" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
    echo "abi check: the library's ABI is the baseline's (abi/lull.abi)"
    exit 0
fi
cat "$work/abidiff.txt"
if [ $((rc & 8)) -ne 0 ]; then
    echo "abi check: INCOMPATIBLE change against abi/lull.abi: a new major version"
elif [ $((rc & 4)) -ne 0 ]; then
    # abidiff counts a struct's new size as a change, not as incompatible;
    # for lull, whose structs live in callers' memory, it is.
    echo "abi check: the ABI changed (above). Added functions only: a minor"
    echo "version, said in NEWS.md. A struct's size or a field's offset changed:"
    echo "programs built against the old header break: a new major version."
else
    echo "abi check: abidiff failed ($rc)"
fi
echo "then run 'make abi-baseline' and commit abi/lull.abi with the change"
exit 1
