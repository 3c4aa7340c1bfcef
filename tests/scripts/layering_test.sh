#!/usr/bin/env bash
# The layering check must fail on a planted bad include, and pass once it is gone.
set -euo pipefail
check=$1
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/common" "$tree/config" "$tree/transport"
echo '#include "common/status.hpp"' > "$tree/config/spec.hpp"
echo '#include <string>' > "$tree/common/status.hpp"
"$check" "$tree" >/dev/null || { echo "a clean tree was rejected"; exit 1; }

echo '#include "config/spec.hpp"' > "$tree/common/bad.hpp"
if out=$("$check" "$tree" 2>&1); then
  echo "a folder reaching up was accepted"; exit 1
fi
grep -q "common/bad.hpp:1: 'common/' may not include 'config/spec.hpp'" <<<"$out" || { echo "unexpected report: $out"; exit 1; }
rm "$tree/common/bad.hpp"

echo '#include <rocksdb/db.h>' > "$tree/transport/store.cpp"
if out=$("$check" "$tree" 2>&1); then
  echo "RocksDB outside storage/ was accepted"; exit 1
fi
grep -q "transport/store.cpp:1: 'transport/' may not include 'rocksdb/db.h'" <<<"$out" || { echo "unexpected report: $out"; exit 1; }
rm "$tree/transport/store.cpp"

mkdir -p "$tree/training"
echo '#include "transport/communicator.hpp"' > "$tree/training/step.cpp"
"$check" "$tree" >/dev/null || { echo "training/ using the communicator interface was rejected"; exit 1; }
echo '#include "transport/ucx_ring.hpp"' > "$tree/training/ring.cpp"
if out=$("$check" "$tree" 2>&1); then
  echo "training/ including a transport implementation was accepted"; exit 1
fi
grep -q "training/ring.cpp:1: 'training/' may include only 'transport/communicator.hpp'" <<<"$out" || { echo "unexpected report: $out"; exit 1; }
echo "layering check fails on planted includes: ok"
