# Sourced by the benchmark session scripts (bench-session.sh,
# bench-replay-rounds.sh): the services, the output folder
# tmp/<name>/<start time>/ ($out), and dlq-bench and bench-limits built once
# into it, so every run of a session measures the same binaries.
#
#   bench_prepare <name>
bench_prepare() {
	cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
	root=$PWD
	out=$root/tmp/$1/$(date -u +%Y%m%dT%H%M%S)
	mkdir -p "$out"
	limits_dir=${BENCH_LIMITS_DIR:-../shared/bench-limits}
	if [ -z "${BENCH_LIMITS_DIR:-}" ] && [ ! -d "$limits_dir" ]; then
		# In a linked worktree, the shared folder is beside the main one.
		limits_dir=$(dirname "$(git rev-parse --path-format=absolute --git-common-dir)")/../shared/bench-limits
	fi
	pg=${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/bench?sslmode=disable}
	amqp=${BENCH_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
	scripts/services.sh --database bench >/dev/null
	go build -o "$out/dlq-bench" ./cmd/dlq-bench || exit 1
	(cd "$limits_dir" && go build -o "$out/bench-limits" .) || exit 1
}

# stamp marks the start of a run in the session log, with the load average.
stamp() { echo "=== $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg) $*"; }

# settle waits until the machine is quiet before a timed run: less than a
# quarter of its CPU time busy, three one-second samples of /proc/stat in a
# row, or 120 s passed. A run leaves RabbitMQ and PostgreSQL busy for a
# while after it ends (its queue's deletion, its tables' writes), and the
# next run paid for it (docs/BENCHMARKS.md, "Whoever runs first after the
# raw pipeline pays for it").
settle() {
	local quiet=0 waited=0 busy=0 total idle i
	local -a a b
	read -r -a a < /proc/stat
	while [ "$quiet" -lt 3 ] && [ "$waited" -lt 120 ]; do
		sleep 1
		waited=$((waited + 1))
		read -r -a b < /proc/stat
		total=0
		for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
		idle=$((b[4] - a[4] + b[5] - a[5]))
		busy=$((total > 0 ? 100 * (total - idle) / total : 0))
		if [ "$busy" -lt 25 ]; then quiet=$((quiet + 1)); else quiet=0; fi
		a=("${b[@]}")
	done
	echo "=== settled after ${waited}s (${busy}% busy in the last second)"
}
