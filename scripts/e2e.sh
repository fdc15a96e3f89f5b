#!/usr/bin/env bash
# The end-to-end suite (e2e/, build tag e2e) in two shards that run at the same time, as `make e2e`
# does. Why shards: about half of the suite is QEMU (one busy core per guest under TCG), the other
# half network namespaces with real daemons and the builder's dnf, which mostly wait; run one after
# the other they took 23 minutes here, side by side about 15. Each shard is its own process, so
# the namespaces and labs the tests name after their PID never meet.
#
# The QEMU shard is named below; every other test goes to the second shard, so a new test is
# never left out. Tests that compare boot times (TestBaselineDnsmasq, TestBootd) share a process,
# since the comparison is printed at its end.
#
# Usage: scripts/e2e.sh [timeout]   (root; the timeout is per shard, default 35m)
set -uo pipefail
cd "$(dirname "$0")/.."
timeout=${1:-35m}
qemu_shard='TestBootd TestBaselineDnsmasq TestNodeBoot TestRealDracutLiveRoot TestRealDracutNetworkManager TestHardening TestPower'

bin=$(mktemp -d /tmp/e2e-shards.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go test -tags e2e -c -o "$bin/e2e.test" ./e2e/ || exit 1

all=$("$bin/e2e.test" -test.list '.*' | grep '^Test') || { echo "e2e: listing the tests failed"; exit 1; }
rest=()
for t in $all; do
	[[ " $qemu_shard " == *" $t "* ]] || rest+=("$t")
done
for t in $qemu_shard; do
	grep -qx "$t" <<<"$all" || { echo "e2e: $0 names $t, which e2e/ does not have"; exit 1; }
done

# run NAME TESTS...: one shard, its lines prefixed with its name as they come.
run() {
	local name=$1; shift
	local re="^($(IFS='|'; echo "$*"))\$"
	(cd e2e && "$bin/e2e.test" -test.run "$re" -test.v -test.count 1 -test.timeout "$timeout" 2>&1) |
		sed -u "s/^/[$name] /" | tee "$bin/$name.log"
	return "${PIPESTATUS[0]}"
}

start=$SECONDS
run qemu $qemu_shard &
q=$!
run netns "${rest[@]}" &
n=$!
wait "$q"; qrc=$?
wait "$n"; nrc=$?

echo
echo "e2e: $((SECONDS - start)) s for both shards; top-level results:"
grep -hE '^\[[a-z]+\] --- (PASS|FAIL)' "$bin"/*.log | sort -t'(' -k2 -rn
if ((qrc != 0 || nrc != 0)); then
	echo "e2e: FAIL (qemu shard exit $qrc, netns shard exit $nrc)"
	exit 1
fi
echo "e2e: ok"
