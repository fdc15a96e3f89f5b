#!/usr/bin/env bash
# The end-to-end suite (e2e/, build tag e2e) in three shards that run at the same time, as `make
# e2e` does. Why: much of the suite waits (QEMU guests under TCG, daemons in network namespaces,
# dnf), so shards side by side finish far sooner on two cores than one test after the other (23
# minutes here). Each shard is its own process, so the namespaces and labs tests name after
# their PID never meet.
#
# Two shards are named below: the QEMU tests, split so that each shard takes about as long.
# Every other test goes to the third, so a new test is never left out. Tests that compare boot
# times (TestBaselineDnsmasq, TestBootd) share a process: the comparison prints at its end.
#
# Usage: scripts/e2e.sh [timeout]   (root; the timeout is per shard, default 35m)
set -uo pipefail
cd "$(dirname "$0")/.."
timeout=${1:-35m}
declare -A shards=(
	[boot]='TestBootd TestBaselineDnsmasq TestRealDracutNetworkManager TestHardening'
	[root]='TestRealDracutLiveRoot TestNodeBoot TestPower'
)

bin=$(mktemp -d /tmp/e2e-shards.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go test -tags e2e -c -o "$bin/e2e.test" ./e2e/ || exit 1

all=$("$bin/e2e.test" -test.list '.*' | grep '^Test') || { echo "e2e: listing the tests failed"; exit 1; }
named=" ${shards[*]} "
rest=()
for t in $all; do
	[[ "$named" == *" $t "* ]] || rest+=("$t")
done
for t in ${shards[*]}; do
	grep -qx "$t" <<<"$all" || { echo "e2e: $0 names $t, which e2e/ does not have"; exit 1; }
done
shards[rest]="${rest[*]}"

# run NAME TESTS...: one shard, its lines prefixed with its name as they come.
run() {
	local name=$1; shift
	local re="^($(IFS='|'; echo "$*"))\$"
	(cd e2e && "$bin/e2e.test" -test.run "$re" -test.v -test.count 1 -test.timeout "$timeout" 2>&1) |
		sed -u "s/^/[$name] /" | tee "$bin/$name.log"
	return "${PIPESTATUS[0]}"
}

start=$SECONDS
declare -A pids
for name in "${!shards[@]}"; do
	# shellcheck disable=SC2086 # a shard is a list of test names
	run "$name" ${shards[$name]} &
	pids[$name]=$!
done
failed=()
for name in "${!pids[@]}"; do
	wait "${pids[$name]}" || failed+=("$name")
done

echo
echo "e2e: $((SECONDS - start)) s for the ${#shards[@]} shards side by side; top-level results:"
grep -hE '^\[[a-z]+\] --- (PASS|FAIL)' "$bin"/*.log | sort -t'(' -k2 -rn
if ((${#failed[@]})); then
	echo "e2e: FAIL (shards: ${failed[*]})"
	exit 1
fi
echo "e2e: ok"
