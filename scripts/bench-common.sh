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
