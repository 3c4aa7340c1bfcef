#!/usr/bin/env bash
# scripts/plot-sweep: usage errors exit 2, a missing gnuplot exits 1 naming the package, and with
# gnuplot present a sweep's data becomes a PNG and an SVG.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
plot=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/sweep.dat" <<'DATA'
# rekindle simulate t.jsonl --sweep snapshot_every=1,10,100
# x: snapshot_every (seconds, bytes or a count); then the effective-training-time ratio of in-place restart-all; then the value as given
1 0.91 0.95 "1"
10 0.98 0.95 "10"
100 0.97 0.95 "100"
DATA
echo "not sweep data" >"$dir/other.dat"

expect_exit() {
  local want=$1
  shift
  local got=0
  out=$("$@" 2>&1) || got=$?
  [ "$got" -eq "$want" ] || { echo "'$*' exited $got, not $want: $out"; exit 1; }
}

# Usage errors come first, with gnuplot on the PATH or not (a PATH of the few tools the script
# needs besides it).
mkdir "$dir/bin"
for tool in bash sed awk grep; do
  ln -s "$(command -v "$tool")" "$dir/bin/$tool"
done
for path in "$PATH" "$dir/bin"; do
  expect_exit 2 env PATH="$path" bash "$plot"
  expect_exit 2 env PATH="$path" bash "$plot" "$dir/absent.dat" "$dir/x.png"
  grep -q "cannot read" <<<"$out" || { echo "unexpected message: $out"; exit 1; }
  expect_exit 2 env PATH="$path" bash "$plot" "$dir/sweep.dat" "$dir/x.gif"
  expect_exit 2 env PATH="$path" bash "$plot" "$dir/other.dat" "$dir/x.png"
  grep -q "is not sweep data" <<<"$out" || { echo "unexpected message: $out"; exit 1; }
done

# Without gnuplot on the PATH: a clear message naming the package.
expect_exit 1 env PATH="$dir/bin" bash "$plot" "$dir/sweep.dat" "$dir/x.png"
grep -q "gnuplot-nox" <<<"$out" || { echo "the message does not name gnuplot-nox: $out"; exit 1; }

require_tool gnuplot gnuplot-nox "scripts/setup-deps --bench"
for ext in png svg; do
  expect_exit 0 "$plot" "$dir/sweep.dat" "$dir/sweep.$ext"
  [ -s "$dir/sweep.$ext" ] || { echo "no $ext written"; exit 1; }
done
head -c 8 "$dir/sweep.png" | grep -q "PNG" || { echo "sweep.png is not a PNG"; exit 1; }
grep -q "<svg" "$dir/sweep.svg" || { echo "sweep.svg is not an SVG"; exit 1; }
grep -q "snapshot_every" "$dir/sweep.svg" || { echo "the SVG lacks the axis label"; exit 1; }
echo "plot-sweep: ok"
