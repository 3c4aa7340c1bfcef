# Helpers for the shell tests; source it: . "$(dirname "$0")/lib.sh"

# require_tool PROGRAM PACKAGE [WHO]: exits 77 (CTest's skip code for these tests), saying why,
# when PROGRAM is not installed. For programs that scripts/setup-deps does not install by default
# (scripts/check-test-tools checks that every such program is guarded by this).
require_tool() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "skipped: $1 is not installed (Debian package $2${3:+; $3 installs it})"
    exit 77
  fi
}
