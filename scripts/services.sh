#!/usr/bin/env bash
# services.sh — make sure RabbitMQ and PostgreSQL are up for dlq (`make run`, `make test`).
#
# Idempotent: when both services answer, pg_hba lets `postgres` in from 127.0.0.1 and the
# databases exist, it changes nothing and only says so.
#
# Endpoints come from DLQ_AMQP_URL, DLQ_TEST_AMQP_URL, DLQ_DATABASE_URL and TEST_DATABASE_URL
# (defaults: amqp 127.0.0.1:5672, postgres 127.0.0.1:5432). A non-local host is only waited
# for: we never install or start anything for a server we do not own.
#
# A local service that does not answer on its port is brought up by, in order:
#   1. docker compose (only when `docker info` succeeds), using ./docker-compose.yml;
#   2. the native Debian package: started without systemd (none runs here);
#   3. apt-get install of that package first, when it is missing (root only).
# "Running" is always decided by probing the port, never by asking an init system.
# It also installs Chromium (Debian's chromium) for the web console's browser tests when
# it is missing (root only; elsewhere those tests are skipped, saying why).
#
# Also, optionally: promtool and amtool, which the deploy tests use to check the Prometheus
# rules and the Alertmanager configuration (they skip those checks without them). When
# missing they are installed from the Debian packages prometheus and
# prometheus-alertmanager (root only); their daemons are not started. A package that
# cannot be installed is only a note, never a failure.
#
# Usage: scripts/services.sh [--database NAME]...   (extra databases to create)
# Environment:
#   DLQ_SERVICES_MODE     auto (default) | native (never docker) | docker (docker only)
#   DLQ_SERVICES_TIMEOUT  seconds to wait for each service to come up (default 120)
set -euo pipefail

# rabbitmq-* live in /usr/sbin, which a non-root PATH often lacks.
PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MODE=${DLQ_SERVICES_MODE:-auto}
TIMEOUT=${DLQ_SERVICES_TIMEOUT:-120}
HBA_MARK="# added by dlq scripts/services.sh"

log() { printf 'services: %s\n' "$*"; }
warn() { printf 'services: WARNING: %s\n' "$*" >&2; }
die() { printf 'services: ERROR: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

case $MODE in auto | native | docker) ;; *) die "DLQ_SERVICES_MODE must be auto, native or docker, not '$MODE'" ;; esac
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "DLQ_SERVICES_TIMEOUT must be a number of seconds, not '$TIMEOUT'"

EXTRA_DBS=()
while [ $# -gt 0 ]; do
	case $1 in
	--database) [ $# -ge 2 ] || die "--database needs a name"; EXTRA_DBS+=("$2"); shift 2 ;;
	--database=*) EXTRA_DBS+=("${1#*=}"); shift ;;
	-h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (usage: scripts/services.sh [--database NAME]...)" ;;
	esac
done

# Output of commands we do not want on the terminal unless they fail. Daemon starts are
# always redirected to a file: a daemon that inherits a pipe (`make services | tee`, or
# $(...)) would keep it open and hang the caller.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dlq-services.XXXXXX")
OUT=$WORK/out
show_out() { if [ -s "$OUT" ]; then sed 's/^/    | /' "$OUT" | tail -n 25 >&2; fi; }

# Serialise concurrent runs (two `make test` at once) so they do not both start a server.
# A directory, not flock on a descriptor: the daemons we start would inherit the
# descriptor (epmd even from a plain rabbitmqctl) and hold the lock for their lifetime.
LOCK=${TMPDIR:-/tmp}/dlq-services.$(id -u).lock
LOCKED=""
POLICY_RC=/usr/sbin/policy-rc.d
OUR_POLICY_RC=""
cleanup() {
	rm -rf "$WORK"
	if [ -n "$OUR_POLICY_RC" ]; then rm -f "$POLICY_RC"; fi
	if [ -n "$LOCKED" ]; then rm -rf "$LOCK"; fi
}
trap cleanup EXIT
lock_deadline=$((SECONDS + TIMEOUT)) lock_said=""
until mkdir "$LOCK" 2>/dev/null; do
	holder=$(cat "$LOCK/pid" 2>/dev/null || true)
	if [ -n "$holder" ] && [ ! -d "/proc/$holder" ]; then
		rm -rf "$LOCK" # its owner died without cleaning up
		continue
	fi
	if [ -z "$holder" ] && [ -n "$(find "$LOCK" -maxdepth 0 -mmin +1 2>/dev/null)" ]; then
		rm -rf "$LOCK" # created but never filled in for a minute: a run killed at birth
		continue
	fi
	[ -n "$lock_said" ] || { log "waiting for another scripts/services.sh (pid ${holder:-?}) to finish"; lock_said=1; }
	[ $SECONDS -lt $lock_deadline ] || die "another scripts/services.sh (pid ${holder:-?}) still runs after ${TIMEOUT}s; if it is gone, remove $LOCK"
	sleep 1
done
LOCKED=1
echo $$ >"$LOCK/pid"

# ---------------------------------------------------------------------------------------
# Endpoints

# parse_url URL DEFAULT_PORT -> sets U_HOST U_PORT U_DB. Understands URLs
# (scheme://user:pass@host:port/db?...) and libpq keyword DSNs (host=... port=... dbname=...).
parse_url() {
	local url=$1 rest
	U_HOST="" U_PORT="" U_DB=""
	if [[ $url == *://* ]]; then
		rest=${url#*://}
		U_DB=${rest#*/}
		[ "$U_DB" = "$rest" ] && U_DB=""
		U_DB=${U_DB%%\?*}
		rest=${rest%%[/?]*}
		rest=${rest##*@}
		if [[ $rest == \[* ]]; then
			U_HOST=${rest%%]*} U_HOST=${U_HOST#[}
			U_PORT=${rest##*]} U_PORT=${U_PORT#:}
		else
			U_HOST=${rest%%:*}
			[[ $rest == *:* ]] && U_PORT=${rest##*:}
		fi
	else
		local kv
		for kv in $url; do
			case $kv in
			host=*) U_HOST=${kv#host=} ;;
			port=*) U_PORT=${kv#port=} ;;
			dbname=*) U_DB=${kv#dbname=} ;;
			esac
		done
	fi
	U_HOST=${U_HOST:-127.0.0.1}
	U_PORT=${U_PORT:-$2}
	# A socket directory (/var/run/postgresql, or %2F-encoded) is this machine; so are
	# names for it, which we probe as 127.0.0.1 (where the local servers listen).
	[[ $U_HOST == /* || $U_HOST == %2[Ff]* ]] && U_HOST=127.0.0.1
	case $U_HOST in localhost | 0.0.0.0 | "$(hostname 2>/dev/null || echo localhost)") U_HOST=127.0.0.1 ;; esac
	[[ $U_PORT =~ ^[0-9]+$ ]] || die "cannot read a port from '$url'"
}

is_local() {
	case $1 in localhost | 127.* | ::1 | 0.0.0.0 | "$(hostname 2>/dev/null || echo localhost)") return 0 ;; esac
	return 1
}

# Collect "host port var" lines, de-duplicated, with the variable that named each one.
AMQP_EPS=() PG_EPS=() LOCAL_DBS=()
add_ep() { # array host port var
	local -n arr=$1
	local e
	for e in "${arr[@]}"; do [[ $e == "$2 $3 "* ]] && return 0; done
	arr+=("$2 $3 $4")
}
for var in DLQ_AMQP_URL DLQ_TEST_AMQP_URL; do
	[ -n "${!var:-}" ] || continue
	port=5672
	[[ ${!var} == amqps://* ]] && port=5671
	parse_url "${!var}" "$port"
	add_ep AMQP_EPS "$U_HOST" "$U_PORT" "$var"
done
[ ${#AMQP_EPS[@]} -gt 0 ] || AMQP_EPS=("127.0.0.1 5672 default")
for var in DLQ_DATABASE_URL TEST_DATABASE_URL; do
	[ -n "${!var:-}" ] || continue
	parse_url "${!var}" 5432
	add_ep PG_EPS "$U_HOST" "$U_PORT" "$var"
	if is_local "$U_HOST" && [ -n "$U_DB" ]; then LOCAL_DBS+=("$U_DB"); fi
done
[ ${#PG_EPS[@]} -gt 0 ] || PG_EPS=("127.0.0.1 5432 default")

# ---------------------------------------------------------------------------------------
# Probes and waiting

# shellcheck disable=SC2016 # $1 and $2 are the inner bash's arguments
port_open() { timeout 3 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null; }

wait_port() { # host port seconds
	local deadline=$((SECONDS + $3))
	until port_open "$1" "$2"; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 1
	done
}

pg_ready() { # host port
	port_open "$1" "$2" || return 1
	have pg_isready || return 0
	pg_isready -q -h "$1" -p "$2" -t 3 >/dev/null 2>&1
}

wait_pg() { # host port seconds
	local deadline=$((SECONDS + $3))
	until pg_ready "$1" "$2"; do
		[ $SECONDS -lt $deadline ] || return 1
		sleep 1
	done
}

# ---------------------------------------------------------------------------------------
# Docker

DOCKER_STATE=""
docker_ok() {
	[ "$MODE" != native ] || return 1
	if [ -z "$DOCKER_STATE" ]; then
		DOCKER_STATE=no
		if have docker && timeout 15 docker info >/dev/null 2>&1; then DOCKER_STATE=yes; fi
	fi
	[ "$DOCKER_STATE" = yes ]
}

compose() {
	# docker-compose.yml requires DLQ_ADMIN_TOKEN for the dlq service, and compose checks
	# that for the whole file even when only rabbitmq and postgres are started.
	local -x DLQ_ADMIN_TOKEN=${DLQ_ADMIN_TOKEN:-not-used-by-services-sh}
	if docker compose version >/dev/null 2>&1; then
		(cd "$ROOT" && docker compose "$@")
	elif have docker-compose; then
		(cd "$ROOT" && docker-compose "$@")
	else
		die "a Docker engine answers but neither 'docker compose' nor 'docker-compose' is installed"
	fi
}

COMPOSE_STARTED=()
compose_up() { # service
	log "starting $1 with docker compose (docker compose up -d $1)"
	compose up -d "$1" >"$OUT" 2>&1 || { show_out; die "docker compose up -d $1 failed (see above)"; }
	COMPOSE_STARTED+=("$1")
}

compose_running() { [[ " ${COMPOSE_STARTED[*]} " == *" $1 "* ]]; }

no_docker_in_docker_mode() {
	[ "$MODE" = docker ] && die "DLQ_SERVICES_MODE=docker but no Docker engine answers ('docker info' failed): start Docker, or unset DLQ_SERVICES_MODE"
	return 0
}

# ---------------------------------------------------------------------------------------
# Debian packages

APT_UPDATED=""
apt_install() { # package
	if ! is_root; then
		die "$1 is not installed and this is not root: run 'sudo apt-get install -y $1' (or 'sudo scripts/services.sh'), or start a Docker engine so docker compose can run it"
	fi
	have apt-get || die "$1 is not installed and there is no apt-get here: install $1 yourself, or start a Docker engine so docker compose can run it"
	if [ -z "$APT_UPDATED" ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >"$OUT" 2>&1 || { show_out; die "apt-get update failed (see above)"; }
		APT_UPDATED=1
	fi
	log "installing $1 (apt-get install -y $1)"
	DEBIAN_FRONTEND=noninteractive apt-get install -y "$1" </dev/null >"$OUT" 2>&1 || { show_out; die "apt-get install -y $1 failed (see above)"; }
}

# ---------------------------------------------------------------------------------------
# RabbitMQ

can_run_rabbitmqctl() { is_root || [ "$(id -un)" = rabbitmq ]; }

rabbitmq_node_up() { timeout 30 rabbitmq-diagnostics -q ping >/dev/null 2>&1; }

start_rabbitmq_native() { # host port
	have rabbitmq-server || apt_install rabbitmq-server
	if port_open "$1" "$2"; then return 0; fi # the package's own scripts may have started it
	can_run_rabbitmqctl || die "rabbitmq is installed but not answering on $1:$2, and only root or the rabbitmq user can start it: run 'sudo rabbitmq-server -detached' (or 'sudo scripts/services.sh')"
	if rabbitmq_node_up; then
		log "rabbitmq node is up but $1:$2 is not answering yet; waiting for it to finish booting"
	else
		log "starting rabbitmq (rabbitmq-server -detached)"
		rabbitmq-server -detached </dev/null >"$OUT" 2>&1 || { show_out; die "rabbitmq-server -detached failed (see above, and /var/log/rabbitmq/)"; }
	fi
	# await_startup fails at once while the new node has not registered with epmd yet,
	# so retry it until the deadline.
	local deadline=$((SECONDS + TIMEOUT)) left
	while :; do
		left=$((deadline - SECONDS))
		[ $left -gt 0 ] || { show_out; die "rabbitmq did not finish starting within ${TIMEOUT}s (see /var/log/rabbitmq/; raise DLQ_SERVICES_TIMEOUT if the machine is slow)"; }
		if timeout $((left + 5)) rabbitmqctl -q -t "$left" await_startup </dev/null >"$OUT" 2>&1; then break; fi
		sleep 1
	done
	wait_port "$1" "$2" 30 || die "rabbitmq started but nothing answers on $1:$2: check listeners.tcp in /etc/rabbitmq/rabbitmq.conf"
}

ensure_rabbitmq_local() { # host port
	if port_open "$1" "$2"; then
		log "rabbitmq already running on $1:$2"
	elif docker_ok; then
		[ "$2" = 5672 ] || die "rabbitmq is not answering on $1:$2 and docker-compose.yml only publishes 5672"
		compose_up rabbitmq
		log "waiting for rabbitmq on $1:$2 (up to ${TIMEOUT}s)"
		wait_port "$1" "$2" "$TIMEOUT" || die "rabbitmq (docker compose) did not answer on $1:$2 within ${TIMEOUT}s: see 'docker compose logs rabbitmq'"
		log "rabbitmq running on $1:$2 (docker compose)"
	else
		no_docker_in_docker_mode
		start_rabbitmq_native "$1" "$2"
		log "rabbitmq running on $1:$2"
	fi
	ensure_management
}

# The management plugin gives operators the UI and HTTP API on 15672. Not needed by the
# tests, so a failure here is a warning, not an error.
ensure_management() {
	if port_open 127.0.0.1 15672; then
		log "rabbitmq management already listening on 127.0.0.1:15672"
		return 0
	fi
	if compose_running rabbitmq; then return 0; fi # the management image has it built in
	if ! have rabbitmq-plugins || ! can_run_rabbitmqctl; then
		log "rabbitmq management plugin not checked (needs root and rabbitmq-plugins)"
		return 0
	fi
	if ! rabbitmq_node_up; then
		log "rabbitmq management plugin not checked (the broker on this port is not the local node)"
		return 0
	fi
	if timeout 30 rabbitmq-plugins -q is_enabled rabbitmq_management --online </dev/null >/dev/null 2>&1; then
		log "rabbitmq management plugin enabled (nothing on 15672 yet)"
		return 0
	fi
	log "enabling rabbitmq management plugin (rabbitmq-plugins enable rabbitmq_management)"
	if ! timeout 120 rabbitmq-plugins -q enable rabbitmq_management </dev/null >"$OUT" 2>&1; then
		show_out
		warn "could not enable rabbitmq_management (see above); dlq and its tests do not need it"
		return 0
	fi
	if wait_port 127.0.0.1 15672 60; then
		log "rabbitmq management listening on 127.0.0.1:15672"
	else
		warn "rabbitmq_management enabled but 127.0.0.1:15672 does not answer after 60s"
	fi
}

# ---------------------------------------------------------------------------------------
# PostgreSQL

PG_VER="" PG_NAME=""
# find_cluster port -> sets PG_VER PG_NAME to the Debian cluster configured for that port.
find_cluster() {
	PG_VER="" PG_NAME=""
	have pg_lsclusters || return 1
	local ver name port rest
	while read -r ver name port rest; do
		if [ "$port" = "$1" ]; then PG_VER=$ver PG_NAME=$name; return 0; fi
	done < <(pg_lsclusters -h 2>/dev/null)
	return 1
}

postgres_installed() { have pg_ctlcluster && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; }

start_postgres_native() { # host port
	postgres_installed || apt_install postgresql
	if pg_ready "$1" "$2"; then return 0; fi # the package's own scripts may have started it
	if ! find_cluster "$2"; then
		if [ -n "$(pg_lsclusters -h 2>/dev/null)" ]; then
			die "no PostgreSQL cluster is configured for port $2 (pg_lsclusters shows: $(pg_lsclusters -h | awk '{printf "%s/%s:%s ", $1, $2, $3}')): point DLQ_DATABASE_URL/TEST_DATABASE_URL at one of them"
		fi
		is_root || die "PostgreSQL is installed but has no cluster; as root run: pg_createcluster <version> main --start"
		local ver
		ver=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)
		log "creating PostgreSQL cluster $ver/main on port $2 (pg_createcluster $ver main --port $2)"
		pg_createcluster "$ver" main --port "$2" </dev/null >"$OUT" 2>&1 || { show_out; die "pg_createcluster $ver main failed (see above)"; }
		find_cluster "$2" || die "pg_createcluster ran but pg_lsclusters shows no cluster on port $2"
	fi
	if ! is_root && [ "$(id -un)" != postgres ]; then
		die "PostgreSQL $PG_VER/$PG_NAME is not running, and only root or postgres can start it: run 'sudo pg_ctlcluster --skip-systemctl-redirect $PG_VER $PG_NAME start' (or 'sudo scripts/services.sh')"
	fi
	log "starting PostgreSQL $PG_VER/$PG_NAME (pg_ctlcluster --skip-systemctl-redirect $PG_VER $PG_NAME start)"
	# "already running" means it is up but not (yet) answering; waiting handles that.
	if ! pg_ctlcluster --skip-systemctl-redirect "$PG_VER" "$PG_NAME" start </dev/null >"$OUT" 2>&1; then
		grep -qi 'already running' "$OUT" || { show_out; die "could not start PostgreSQL $PG_VER/$PG_NAME (see above, and /var/log/postgresql/)"; }
	fi
	wait_pg "$1" "$2" "$TIMEOUT" || die "PostgreSQL $PG_VER/$PG_NAME started but $1:$2 does not accept connections within ${TIMEOUT}s: check listen_addresses in /etc/postgresql/$PG_VER/$PG_NAME/postgresql.conf and /var/log/postgresql/"
}

# psql_as_postgres host port db sql: run SQL as the postgres superuser over TCP, with no
# password (the way the tests connect). When the host has no psql but we started
# postgres with docker compose, run psql inside the container.
psql_as_postgres() {
	if have psql; then
		PGCONNECT_TIMEOUT=5 psql -w -X -q -v ON_ERROR_STOP=1 -h "$1" -p "$2" -U postgres -d "$3" -At -c "$4"
	elif compose_running postgres; then
		compose exec -T postgres psql -X -q -v ON_ERROR_STOP=1 -U postgres -d "$3" -At -c "$4"
	else
		echo "psql is not installed (apt-get install -y postgresql-client)"
		return 1
	fi
}

# Tests connect as postgres://postgres@127.0.0.1 without a password. A fresh Debian
# cluster answers that with scram/peer, so prepend trust lines for loopback to pg_hba.conf.
ensure_trust() { # host port
	if psql_as_postgres "$1" "$2" postgres 'SELECT 1' >"$OUT" 2>&1; then
		log "postgres user can connect to $1:$2 without a password"
		return 0
	fi
	if ! grep -qiE 'password|authentication|pg_hba|role .* does not exist' "$OUT"; then
		show_out
		die "cannot connect to PostgreSQL at $1:$2 as postgres (see above)"
	fi
	local why
	why=$(head -n 1 "$OUT")
	find_cluster "$2" || die "cannot connect as postgres to $1:$2 without a password ($why), and no local Debian cluster on that port to fix: allow it in that server's pg_hba.conf"
	local hba=/etc/postgresql/$PG_VER/$PG_NAME/pg_hba.conf
	is_root || die "cannot connect as postgres to $1:$2 without a password ($why). As root, add these lines at the top of $hba and reload: 'host all all 127.0.0.1/32 trust' and 'host all all ::1/128 trust' (or run 'sudo scripts/services.sh')"
	[ -f "$hba" ] || die "$hba not found; allow trust for 127.0.0.1/32 and ::1/128 in your pg_hba.conf"
	grep -qF "$HBA_MARK" "$hba" && die "$hba already has trust lines from this script, yet postgres cannot connect without a password ($why): check the file"
	local backup
	backup="$hba.before-dlq.$(date +%Y%m%d%H%M%S)"
	cp -p "$hba" "$backup"
	{
		printf '%s: trust loopback so tests can connect as postgres without a password\n' "$HBA_MARK"
		printf 'host    all    all    127.0.0.1/32    trust\n'
		printf 'host    all    all    ::1/128         trust\n'
		cat "$backup"
	} >"$hba" # overwrite in place so owner and mode stay as they were
	pg_ctlcluster --skip-systemctl-redirect "$PG_VER" "$PG_NAME" reload </dev/null >"$OUT" 2>&1 || { show_out; die "pg_ctlcluster $PG_VER $PG_NAME reload failed after editing $hba (backup: $backup)"; }
	cat >&2 <<-EOF
	services: ################################################################################
	services: CHANGED $hba: added at the top
	services:     host all all 127.0.0.1/32 trust
	services:     host all all ::1/128      trust
	services: so any local user can connect to PostgreSQL as any role WITHOUT A PASSWORD.
	services: Previous file kept as $backup; PostgreSQL $PG_VER/$PG_NAME reloaded.
	services: ################################################################################
	EOF
	local deadline=$((SECONDS + 15))
	until psql_as_postgres "$1" "$2" postgres 'SELECT 1' >"$OUT" 2>&1; do
		[ $SECONDS -lt $deadline ] || { show_out; die "still cannot connect as postgres to $1:$2 after the pg_hba.conf change"; }
		sleep 1
	done
}

ensure_database() { # host port name
	[[ $3 =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "refusing to create database '$3': use letters, digits and _ only"
	local exists
	exists=$(psql_as_postgres "$1" "$2" postgres "SELECT 1 FROM pg_database WHERE datname = '$3'" 2>"$OUT") || { show_out; die "cannot list databases on $1:$2"; }
	if [ "$exists" = 1 ]; then
		DBS_PRESENT+=("$3")
		return 0
	fi
	log "creating database $3 on $1:$2"
	if ! psql_as_postgres "$1" "$2" postgres "CREATE DATABASE \"$3\"" >"$OUT" 2>&1; then
		grep -q 'already exists' "$OUT" || { show_out; die "CREATE DATABASE $3 failed on $1:$2 (see above)"; }
	fi
}

ensure_postgres_local() { # host port
	if pg_ready "$1" "$2"; then
		log "postgresql already running on $1:$2"
	elif docker_ok; then
		[ "$2" = 5432 ] || die "PostgreSQL is not answering on $1:$2 and docker-compose.yml only publishes 5432"
		compose_up postgres
		log "waiting for postgresql on $1:$2 (up to ${TIMEOUT}s)"
		wait_pg "$1" "$2" "$TIMEOUT" || die "postgres (docker compose) did not accept connections on $1:$2 within ${TIMEOUT}s: see 'docker compose logs postgres'"
		log "postgresql running on $1:$2 (docker compose)"
	else
		no_docker_in_docker_mode
		start_postgres_native "$1" "$2"
		log "postgresql running on $1:$2"
	fi
	ensure_trust "$1" "$2"
	DBS_PRESENT=()
	local db seen=" "
	for db in dlq test "${LOCAL_DBS[@]}" "${EXTRA_DBS[@]}"; do
		[[ $seen == *" $db "* ]] && continue
		seen+="$db "
		ensure_database "$1" "$2" "$db"
	done
	[ ${#DBS_PRESENT[@]} -eq 0 ] || log "databases already present: ${DBS_PRESENT[*]}"
}

# ---------------------------------------------------------------------------------------

wait_remote() { # kind host port var
	if port_open "$2" "$3"; then
		log "$1 answering on $2:$3 ($4, not local: left alone)"
		return 0
	fi
	log "waiting for $1 on $2:$3 ($4, not local: not installing anything; up to ${TIMEOUT}s)"
	wait_port "$2" "$3" "$TIMEOUT" || die "$1 at $2:$3 (from $4) does not answer after ${TIMEOUT}s: start it, or unset $4 to use a local one"
	log "$1 answering on $2:$3"
}

for ep in "${AMQP_EPS[@]}"; do
	read -r host port var <<<"$ep"
	if is_local "$host"; then ensure_rabbitmq_local "$host" "$port"; else wait_remote rabbitmq "$host" "$port" "$var"; fi
done
for ep in "${PG_EPS[@]}"; do
	read -r host port var <<<"$ep"
	if is_local "$host"; then
		ensure_postgres_local "$host" "$port"
	else
		wait_remote postgresql "$host" "$port" "$var"
		[ ${#EXTRA_DBS[@]} -eq 0 ] || warn "not creating ${EXTRA_DBS[*]} on $host:$port: it is not local"
	fi
done
# ---------------------------------------------------------------------------------------
# Rule checkers (optional): promtool and amtool

# apt_try_install package: like apt_install, but never fatal (returns 1 instead), never
# pulls in recommended packages (prometheus recommends node-exporter, another daemon),
# and never starts the package's daemon: a policy-rc.d that forbids every start is put in
# place for the install when the machine has none (the mechanism invoke-rc.d and
# deb-systemd-invoke ask), and on a systemd machine the unit is disabled afterwards so it
# does not start at the next boot either.
apt_try_install() { # package unit
	is_root || return 1
	have apt-get || return 1
	if [ -z "$APT_UPDATED" ]; then
		log "apt-get update"
		if ! DEBIAN_FRONTEND=noninteractive apt-get update </dev/null >"$OUT" 2>&1; then
			show_out
			warn "apt-get update failed; not installing $1"
			return 1
		fi
		APT_UPDATED=1
	fi
	if ! apt-cache show "$1" >/dev/null 2>&1; then
		log "no package $1 in this machine's apt sources"
		return 1
	fi
	if [ ! -e "$POLICY_RC" ]; then
		printf '#!/bin/sh\n# written by dlq scripts/services.sh while it installs %s; removed when it ends\nexit 101\n' "$1" >"$POLICY_RC"
		chmod 755 "$POLICY_RC"
		OUR_POLICY_RC=1
	fi
	log "installing $1 without starting its daemon (apt-get install -y --no-install-recommends $1)"
	local ok=0
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$1" </dev/null >"$OUT" 2>&1 || ok=1
	if [ -n "$OUR_POLICY_RC" ]; then
		rm -f "$POLICY_RC"
		OUR_POLICY_RC=""
	fi
	if [ $ok -ne 0 ]; then
		show_out
		warn "apt-get install -y $1 failed (see above)"
		return 1
	fi
	if [ -d /run/systemd/system ] && have systemctl; then
		systemctl disable "$2" </dev/null >/dev/null 2>&1 || true
	fi
	return 0
}

ensure_checker() { # command package unit
	if have "$1"; then
		log "$1 already installed"
	elif apt_try_install "$2" "$3" && have "$1"; then
		log "$1 installed (package $2; its daemon $3 not started)"
	elif is_root; then
		log "$1 not installed: the deploy tests skip its checks"
	else
		log "$1 not installed (as root this script installs package $2): the deploy tests skip its checks"
	fi
}
ensure_checker promtool prometheus prometheus.service
ensure_checker amtool prometheus-alertmanager prometheus-alertmanager.service

# Chromium, for the web console's browser tests (package console); optional like the
# checkers: without it those tests are skipped, saying why.
if have chromium || have chromium-browser || have google-chrome; then
	log "chromium already installed"
elif apt_try_install chromium chromium.service && have chromium; then
	log "chromium installed"
else
	log "chromium not installed (as root this script installs package chromium): the console's browser tests are skipped"
fi

log "ready"
