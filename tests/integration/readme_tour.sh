#!/usr/bin/env bash
# Runs the README's tour as written: every ```sh block under "## A tour of the command line", in
# order, as one bash script with -euo pipefail, in a fresh folder that holds a copy of data/ and
# examples/, with the slipway under test first on the PATH. The tour's ports 8080 and 8081 become
# free loopback ports. The first command that fails ends the run; the trace names each command
# by its line in README.md.
#
# Usage: readme_tour.sh SOURCE_DIR SLIPWAY_BINARY [KEEP_DIR]   (KEEP_DIR: run there, emptied first, and keep it)
set -euo pipefail
source_dir=$(cd "$1" && pwd)
binary=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
keep=${3:-}
work=${keep:-$(mktemp -d "${TMPDIR:-/tmp}/slipway-tour.XXXXXX")}
mkdir -p "$work"
[ -z "$keep" ] || find "$work" -mindepth 1 -delete

# The script keeps README.md's line numbers (every other line blank), so the trace names them.
# Its first line sets PS4 (bash run as root ignores PS4 from the environment) and makes an HTTP
# error fail curl (printing the answer), as a user would see it fail.
script="$work/tour.sh"
awk '
  /^## A tour of the command line/ { in_tour = 1 }
  in_tour && /^## / && !/^## A tour/ { in_tour = 0 }
  in_tour && /^```sh$/ { in_block = 1; print ""; next }
  in_block && /^```$/ { in_block = 0 }
  NR == 1 { print "PS4='"'"'+ README.md:${LINENO}: '"'"'; curl() { command curl --fail-with-body \"$@\"; }"; next }
  { print (in_block ? $0 : "") }
' "$source_dir/README.md" > "$script.body"
if ! grep -q '[^[:space:]]' "$script.body"; then
  echo "readme_tour: no \`\`\`sh block under '## A tour of the command line' in README.md" >&2
  exit 1
fi

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
llm_port=$(free_port)
while [ "$llm_port" = "$port" ]; do llm_port=$(free_port); done
sed -e "s/8080/$port/g" -e "s/8081/$llm_port/g" "$script.body" > "$script"
rm "$script.body"

cp -r "$source_dir/data" "$source_dir/examples" "$work/"
mkdir -p "$work/bin"
ln -s "$binary" "$work/bin/slipway"

# The tour starts servers in the background and stops them; whatever it leaves (a failed run
# between start and stop) is stopped here. It runs in its own session so the whole group can be.
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
  if [ -n "${tour_pid:-}" ]; then kill -TERM -- "-$tour_pid" 2> /dev/null || true; fi
  [ -n "$keep" ] || rm -rf "$work"
}
trap cleanup EXIT

cd "$work"
env -u SLIPWAY_HOME PATH="$work/bin:$PATH" setsid --wait bash -euo pipefail -x "$script" &
tour_pid=$!
status=0
wait "$tour_pid" || status=$?
if [ "$status" != 0 ]; then
  echo "readme_tour: the tour failed (exit $status); the line that failed is the last traced above" >&2
fi
exit "$status"
