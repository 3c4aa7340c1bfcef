#!/usr/bin/env bash
# scripts/check-test-tools must fail on a test that runs a program outside scripts/setup-deps'
# default set without skipping, and pass once the test guards it or setup-deps installs it.
set -euo pipefail
check=$1
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/scripts" "$tree/tests/scripts" "$tree/tests/unit/x"
echo 'packages=(base-pkg)' >"$tree/scripts/setup-deps"
echo 'add_test(NAME s COMMAND tests/scripts/plot_test.sh scripts/plotter)' >"$tree/tests/CMakeLists.txt"
printf 'frobplot frob-pkg\nfrobtool frob-pkg\nfrobbase base-pkg\n' >"$tree/map"
export CHECK_TEST_TOOLS_MAP="$tree/map"

printf '#!/usr/bin/env bash\nset -e\n"$1" data.dat out.png\n' >"$tree/tests/scripts/plot_test.sh"
printf '#!/usr/bin/env bash\necho "frobplot draws it" >&2\nfrobbase --check\nfrobplot <<EOF\nplot x\nEOF\n' >"$tree/scripts/plotter"
if out=$("$check" "$tree" 2>&1); then
  echo "a script a test runs that calls frobplot unguarded was accepted"; exit 1
fi
grep -q "scripts/plotter: runs 'frobplot' (Debian package frob-pkg)" <<<"$out" || { echo "unexpected report: $out"; exit 1; }
grep -q "frobbase" <<<"$out" && { echo "a program setup-deps installs was reported: $out"; exit 1; }

printf '#!/usr/bin/env bash\nset -e\n. lib.sh\nrequire_tool frobplot frob-pkg\n"$1" data.dat out.png\n' >"$tree/tests/scripts/plot_test.sh"
"$check" "$tree" >/dev/null || { echo "a test that skips without frobplot was rejected"; exit 1; }

cat >"$tree/tests/unit/x/x_test.cpp" <<'CPP'
TEST(x, y) {
  auto r = testing::run_process({"frobtool", "--version"});
  auto s = testing::run_process({"frobbase", "--version"});
}
CPP
if out=$("$check" "$tree" 2>&1); then
  echo "a C++ test running frobtool unguarded was accepted"; exit 1
fi
grep -q "x_test.cpp: runs 'frobtool'" <<<"$out" || { echo "unexpected report: $out"; exit 1; }
sed -i 's|^TEST(x, y) {|TEST(x, y) {\n  if (auto why = testing::missing_tool("frobtool", "frob-pkg")) GTEST_SKIP() << *why;|' "$tree/tests/unit/x/x_test.cpp"
"$check" "$tree" >/dev/null || { echo "a C++ test that skips without frobtool was rejected"; exit 1; }

# A heredoc body is text, not commands, also when the command goes on after it.
printf '#!/usr/bin/env bash\nset -e\nfrobbase - <<\x27PY\x27 || echo failed\nfrobtool --in-a-heredoc\nPY\nx=$(frobbase <<<"frobtool")\n' \
  >"$tree/tests/scripts/heredoc_test.sh"
echo 'add_test(NAME h COMMAND tests/scripts/heredoc_test.sh)' >>"$tree/tests/CMakeLists.txt"
out=$("$check" "$tree" 2>&1) || { echo "a heredoc's body was taken for commands: $out"; exit 1; }

echo 'packages=(base-pkg frob-pkg)' >"$tree/scripts/setup-deps"
sed -i '/require_tool/d' "$tree/tests/scripts/plot_test.sh"
"$check" "$tree" >/dev/null || { echo "a program that setup-deps installs was rejected"; exit 1; }
echo "check-test-tools fails on unguarded programs: ok"
