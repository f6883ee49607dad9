#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a real Apache RocketMQ name server and broker on loopback for the tests and the demo,
# without Docker: the jars come from Maven Central (build/rocketmq/pom.xml pins the version,
# the same as docker-compose.yml's image) and run with the local JDK.
#
#   scripts/rocketmq.sh start     fetch (once), start or reuse the name server and broker-a,
#                                 wait until the broker is registered, print
#                                 ROCKETMQ_NAMESRV=127.0.0.1:PORT and record
#                                 OUTBOX_TEST_ROCKETMQ_NAMESRV in bin/services.env
#   scripts/rocketmq.sh stop [--force]
#                                 stop every broker and the name server it started, unless
#                                 another checkout registered as their user still is
#                                 (scripts/users.sh; --force stops them anyway)
#   scripts/rocketmq.sh status    what runs, exit 1 if the name server or broker-a does not
#   scripts/rocketmq.sh broker-start NAME PORT
#                                 start (or restart after kill -9) another broker on the same
#                                 name server, its store under the cache; prints its pid.
#                                 The tests use it for faults that must not touch broker-a.
#   scripts/rocketmq.sh broker-stop NAME
#   scripts/rocketmq.sh broker-kill NAME
#                                 kill -9 that broker and wait until it is gone (a crash; its
#                                 store stays for broker-start)
#   scripts/rocketmq.sh broker-wipe NAME
#                                 remove a stopped or killed broker's store (its messages, offsets
#                                 and topics), so that broker-start brings it back empty: a
#                                 machine whose disk was lost
#   scripts/rocketmq.sh broker-store NAME save|restore
#                                 copy a stopped broker's store aside, or put that copy back in
#                                 place of its store: a replica that lacks what came after the
#                                 copy, under the same name and address
#   scripts/rocketmq.sh broker-freeze NAME / broker-thaw NAME
#                                 kill -STOP / -CONT that broker: it keeps its connections and
#                                 its route but answers nothing (sends time out) until thawed
#   scripts/rocketmq.sh topic NAME...
#                                 create topics (4 queues) on broker-a; `start` creates
#                                 `orders`, the demo's topic
#   scripts/rocketmq.sh admin ARGS...
#                                 RocketMQ's mqadmin (MQAdminStartup) against the name server,
#                                 e.g. `admin updateTopic -b 127.0.0.1:19911 -t T -w 4 -r 4`
#   scripts/rocketmq.sh deploy-start
#                                 fetch (once) and start or reuse the deployments users run
#                                 besides plain brokers, on a name server of their own so that
#                                 broker-a and its tests never see them: a 5.x proxy in cluster
#                                 mode (remoting and gRPC ports, bound to 127.0.0.1 by the classes
#                                 of build/rocketmq/loopback-proxy) in front of broker-proxied, and
#                                 broker-acl with ACL 2.0 (users `relay_publisher` allowed to
#                                 publish, `relay_nobody` allowed nothing; super user `rocketmq`). Prints and
#                                 records OUTBOX_TEST_ROCKETMQ_PROXY*, OUTBOX_TEST_ROCKETMQ_ACL_*
#                                 lines (bin/services.env). `make test` runs it lazily, from the
#                                 tests that need it.
#   scripts/rocketmq.sh deploy-stop
#                                 stop the proxy, broker-proxied, broker-acl and their name
#                                 server (their stores stay; broker-a is not touched)
#   scripts/rocketmq.sh deploy-admin ARGS...
#                                 mqadmin against the deployments' name server, as the ACL super
#                                 user, e.g. `deploy-admin updateTopic -b 127.0.0.1:19951 -t T
#                                 -a +message.type=FIFO`
#
# Settings: OUTBOX_SERVICES_DIR (default /tmp/outbox-relay-services; jars, stores and logs go
# under its rocketmq/ directory), OUTBOX_SERVICES_ROCKETMQ_NAMESRV_PORT (default 19876),
# OUTBOX_SERVICES_ROCKETMQ_BROKER_PORT (default 19911; the broker also listens on PORT-2 and PORT+1).
# Every broker runs with autoCreateTopicEnable=false, as production should: topics are
# created explicitly (tests use the admin API). The deployments take ports
# OUTBOX_SERVICES_ROCKETMQ_DEPLOY_PORT (default 19976, their name server), +5/+6 (the proxy's
# remoting and gRPC ports), 19951 and 19961 and their neighbours (broker-proxied, broker-acl;
# settable as OUTBOX_SERVICES_ROCKETMQ_PROXIED_PORT and OUTBOX_SERVICES_ROCKETMQ_ACL_PORT).
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf 'rocketmq: %s\n' "$*" >&2; }
die() { printf 'rocketmq: %s\n' "$*" >&2; exit 1; }
have() { command -v "$1" >/dev/null 2>&1; }
tcp_open() { (exec 3<>"/dev/tcp/$1/$2") >/dev/null 2>&1; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

VERSION=$(sed -n 's:.*<rocketmq.version>\(.*\)</rocketmq.version>.*:\1:p' build/rocketmq/pom.xml)
[ -n "$VERSION" ] || die "build/rocketmq/pom.xml has no <rocketmq.version>"
DIR=${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}/rocketmq
LIB=$DIR/lib-$VERSION
NS_PORT=${OUTBOX_SERVICES_ROCKETMQ_NAMESRV_PORT:-19876}
BROKER_PORT=${OUTBOX_SERVICES_ROCKETMQ_BROKER_PORT:-19911}
NS_ADDR=127.0.0.1:$NS_PORT
# The deployments (deploy-start): their own name server, proxy and brokers.
LIBD=$DIR/lib-deploy-$VERSION
D_NS_PORT=${OUTBOX_SERVICES_ROCKETMQ_DEPLOY_PORT:-19976}
D_NS_ADDR=127.0.0.1:$D_NS_PORT
PROXY_PORT=$((D_NS_PORT + 5))
PROXY_GRPC_PORT=$((D_NS_PORT + 6))
PROXIED_PORT=${OUTBOX_SERVICES_ROCKETMQ_PROXIED_PORT:-19951}
ACL_PORT=${OUTBOX_SERVICES_ROCKETMQ_ACL_PORT:-19961}
# ACL 2.0 users of broker-acl: the super user (admin), one allowed to publish, one allowed nothing.
ACL_ADMIN_USER=rocketmq ACL_ADMIN_PASS=outbox-admin-secret
ACL_PUB_USER=relay_publisher ACL_PUB_PASS=publisher-secret
ACL_NONE_USER=relay_nobody ACL_NONE_PASS=nobody-secret

# JVM flags: small heaps (several helpers share the machine) and the opens RocketMQ's
# mmap code needs on JDK 17.
JAVA_OPENS=(--add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED
	--add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-exports java.base/sun.nio.ch=ALL-UNNAMED
	-XX:+UseSerialGC -XX:-UsePerfData -Djava.net.preferIPv4Stack=true)

# apt_install installs Debian packages when running as root with apt-get.
apt_install() {
	[ "$(id -u)" = 0 ] && have apt-get || return 1
	log "installing $* from Debian's packages"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need_java() {
	have java || apt_install openjdk-17-jre-headless ||
		die "java not found and not installable here (needs root and apt-get): install a JRE 11+ (Debian: openjdk-17-jre-headless)"
}

# locked NAME: holds $DIR/.lock-NAME (flock) until this script exits. go test runs packages
# at once and several of them start the shared servers (start, deploy-start) or kill and
# restart their own brokers: without it, two callers start the same broker at once and one
# kills the other's as "still booting" while tests use it. Each lock takes a descriptor of
# its own (8, 9, ...), which java_main closes for the JVMs it starts: a JVM that kept one
# would hold the lock for its life.
LOCK_FD=8
locked() {
	case $1 in '' | */* | .*) die "locked: bad lock name '$1'" ;; esac
	have flock || die "flock not found: install util-linux"
	local fd=$LOCK_FD
	LOCK_FD=$((LOCK_FD + 1))
	eval "exec $fd>\"\$DIR/.lock-$1\""
	flock -w 900 "$fd" || die "waited 15 minutes for $DIR/.lock-$1: another $0 holds it"
}

# fetch copies the pinned jars from Maven Central into $LIB once; ~/.m2 caches the downloads.
fetch() {
	[ -f "$LIB/.complete" ] && return 0
	locked fetch
	[ -f "$LIB/.complete" ] && return 0
	need_java
	have mvn || apt_install maven ||
		die "mvn not found and not installable here (needs root and apt-get): install Maven to fetch RocketMQ $VERSION (Debian: maven)"
	log "fetching Apache RocketMQ $VERSION from Maven Central into $LIB (once, ~85 MB)"
	rm -rf "$LIB.tmp"
	if ! mvn -B -q -f build/rocketmq/pom.xml dependency:copy-dependencies \
		-DoutputDirectory="$LIB.tmp" -DincludeScope=runtime >"$DIR/mvn.log" 2>&1; then
		tail -5 "$DIR/mvn.log" >&2
		die "Maven could not fetch RocketMQ $VERSION (network or Maven Central unreachable?); full log: $DIR/mvn.log"
	fi
	touch "$LIB.tmp/.complete"
	rm -rf "$LIB" && mv "$LIB.tmp" "$LIB"
}

# build_loopback compiles build/rocketmq/loopback (the broker's HA listener on 127.0.0.1:
# RocketMQ has no setting for its address) into $EXT once per source and RocketMQ version.
EXT=$DIR/loopback-$VERSION
build_loopback() {
	local src=build/rocketmq/loopback/LoopbackHAService.java
	[ -f "$EXT/.complete" ] && cmp -s "$src" "$EXT/LoopbackHAService.java" && return 0
	locked loopback
	[ -f "$EXT/.complete" ] && cmp -s "$src" "$EXT/LoopbackHAService.java" && return 0
	have javac || apt_install openjdk-17-jdk-headless ||
		die "javac not found and not installable here (needs root and apt-get): install a JDK 11+ (Debian: openjdk-17-jdk-headless)"
	rm -rf "$EXT.tmp" && mkdir -p "$EXT.tmp/META-INF/service"
	javac -nowarn -d "$EXT.tmp" -cp "${JLIB:-$LIB}/*" "$src" >&2 || die "could not compile $src"
	echo outboxrelay.rocketmq.LoopbackHAService >"$EXT.tmp/META-INF/service/org.apache.rocketmq.store.ha.HAService"
	cp "$src" "$EXT.tmp/"
	touch "$EXT.tmp/.complete"
	rm -rf "$EXT" && mv "$EXT.tmp" "$EXT"
}

# build_loopback_proxy compiles build/rocketmq/loopback-proxy (the 5.x proxy's gRPC builder and
# remoting server settings, bound to 127.0.0.1: the proxy has no setting for its listen
# address) into $EXTP once per source and RocketMQ version, and refuses classes whose public
# and protected signatures differ from the jars' (a RocketMQ upgrade must revisit them).
EXTP=$DIR/loopback-proxy-$VERSION
build_loopback_proxy() {
	local src=build/rocketmq/loopback-proxy sum c
	sum=$(find "$src" -name '*.java' | sort | xargs cat | cksum)
	[ -f "$EXTP/.complete" ] && [ "$(cat "$EXTP/.complete")" = "$sum" ] && return 0
	have javac || apt_install openjdk-17-jdk-headless ||
		die "javac not found and not installable here (needs root and apt-get): install a JDK 11+ (Debian: openjdk-17-jdk-headless)"
	rm -rf "$EXTP.tmp" && mkdir -p "$EXTP.tmp"
	# shellcheck disable=SC2046
	javac -nowarn -d "$EXTP.tmp" -cp "$LIBD/*" $(find "$src" -name '*.java') >&2 || die "could not compile $src"
	for c in org.apache.rocketmq.proxy.grpc.GrpcServerBuilder org.apache.rocketmq.remoting.netty.NettyServerConfig; do
		cmp -s <(javap -protected -cp "$LIBD/*" "$c" | sort) <(javap -protected -cp "$EXTP.tmp" "$c" | sort) ||
			die "$src: $c no longer matches RocketMQ $VERSION's signatures (javap -protected both and compare)"
	done
	echo "$sum" >"$EXTP.tmp/.complete"
	rm -rf "$EXTP" && mv "$EXTP.tmp" "$EXTP"
}

# java_main NAME HEAP MAIN ARGS...: starts a JVM in the background, its home and logs under
# $DIR/NAME, writes $DIR/NAME/pid. JLIB (default $LIB) is its class path directory; JFIRST
# (default $EXT) comes before it, for our classes that replace RocketMQ's.
java_main() {
	local name=$1 heap=$2 main=$3; shift 3
	local home=$DIR/$name
	mkdir -p "$home"
	# setsid: the JVM outlives this script and the make or go test that ran it.
	(
		for ((fd = 8; fd < LOCK_FD; fd++)); do eval "exec $fd>&-"; done # the JVM holds no lock
		ROCKETMQ_HOME=$home exec setsid java $heap "${JAVA_OPENS[@]}" ${JAVA_EXTRA:-} -Duser.home="$home" \
			-Drocketmq.home.dir="$home" -cp "${JFIRST:-$EXT}:${JLIB:-$LIB}/*" "$main" "$@" \
			>"$home/out.log" 2>&1 </dev/null
	) &
	echo $! >"$home/pid"
}

# create_topics NAME...: creates topics of 4 queues on broker-a (RocketMQ's updateTopic).
create_topics() {
	local t out
	for t in "$@"; do
		out=$(admin updateTopic -b "127.0.0.1:$BROKER_PORT" -t "$t" -r 4 -w 4 2>&1) ||
			{ printf '%s\n' "$out" | tail -5 >&2; die "could not create topic $t"; }
		log "topic $t ready on broker-a"
	done
}

admin() {
	need_java
	fetch
	# The admin tool logs to ~/logs: keep it under the cache.
	java -Xmx128m "${JAVA_OPENS[@]}" -Duser.home="$DIR/admin" -Drocketmq.home.dir="$DIR/admin" \
		-cp "$LIB/*" org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$NS_ADDR"
}

# start_namesrv [NAME PORT]: starts a name server (default: namesrv on NS_PORT) unless it runs.
start_namesrv() {
	local name=${1:-namesrv} port=${2:-$NS_PORT}
	if alive "$DIR/$name/pid" && tcp_open 127.0.0.1 "$port"; then
		return 0
	fi
	tcp_open 127.0.0.1 "$port" && die "port $port is taken by another process: set OUTBOX_SERVICES_ROCKETMQ_NAMESRV_PORT (or _DEPLOY_PORT)"
	mkdir -p "$DIR/$name"
	printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$port" >"$DIR/$name/namesrv.conf"
	java_main "$name" "-Xms64m -Xmx192m" org.apache.rocketmq.namesrv.NamesrvStartup -c "$DIR/$name/namesrv.conf"
	local i
	for ((i = 0; i < 240; i++)); do
		grep -q 'boot success' "$DIR/$name/out.log" 2>/dev/null && tcp_open 127.0.0.1 "$port" && {
			log "name server 127.0.0.1:$port started (pid $(cat "$DIR/$name/pid"), log $DIR/$name/out.log)"
			return 0
		}
		alive "$DIR/$name/pid" || break
		sleep 0.25
	done
	tail -20 "$DIR/$name/out.log" >&2 || true
	die "the name server $name did not start (log: $DIR/$name/out.log)"
}

# start_broker NAME PORT: starts a broker of that name on PORT (PORT-2 and PORT+1 too) with
# its store under $DIR/NAME/store, unless it runs; waits for "boot success", which the broker
# prints after its first registration with the name server. B_NS (default NS_ADDR) is its
# name server, B_CLUSTER (default DefaultCluster) its cluster, B_EXTRA more broker.conf lines.
start_broker() {
	local name=$1 port=$2 home=$DIR/$1 i
	locked "$name"
	# Running and listening: reuse it. Running but not listening: give it 30 s (a connect
	# that failed under load), then it is a broker a killed script left booting or stuck.
	for ((i = 0; i < 120; i++)); do
		alive "$home/pid" || break
		tcp_open 127.0.0.1 "$port" && return 0
		sleep 0.25
	done
	if alive "$home/pid"; then
		log "broker $name (pid $(cat "$home/pid")) runs but does not listen on $port: restarting it"
		kill -9 "$(cat "$home/pid")" 2>/dev/null || true
		while alive "$home/pid"; do sleep 0.1; done
	fi
	local p
	for p in $((port - 2)) "$port" $((port + 1)); do
		tcp_open 127.0.0.1 "$p" && die "port $p is taken by another process: choose another broker port"
	done
	mkdir -p "$home/store"
	build_loopback
	# Generated on each start: updateBrokerConfig rewrites this file, and a fault a test set
	# (brokerPermission, maxMessageSize) must not survive into the next run.
	# timerWheelEnable=false spares a test broker the timer wheel's files and threads: the
	# relay's delay levels go through the schedule service, which stays on. Its known cost
	# on 5.3.3: `mqadmin deleteTopic` fails with a NullPointerException (the broker's topic
	# deletion reaches for the timer store, which is null without the wheel; the same root
	# as apache/rocketmq#6169). The tests use topics of their own and never delete them; to
	# delete one by hand, restart the broker with timerWheelEnable=true first.
	# transactionTimeOut/transactionCheckInterval of 1 s (defaults 6 s and 30 s) let the
	# transactional tests see check-backs within seconds; with no half stored a check round
	# costs the broker nothing. transactionOpBatchInterval of 200 ms (default 3 s) keeps the
	# broker's record that a half was ended ahead of that short timeout: the broker writes
	# those records in batches, and a check round that does not see one yet checks a half
	# already ended, where a COMMIT answer stores a second copy.
	cat >"$home/broker.conf" <<-EOF
		brokerClusterName=${B_CLUSTER:-DefaultCluster}
		brokerName=$name
		brokerId=0
		brokerRole=ASYNC_MASTER
		flushDiskType=ASYNC_FLUSH
		namesrvAddr=${B_NS:-$NS_ADDR}
		brokerIP1=127.0.0.1
		bindAddress=127.0.0.1
		listenPort=$port
		haListenPort=$((port + 1))
		storePathRootDir=$home/store
		storePathCommitLog=$home/store/commitlog
		autoCreateTopicEnable=false
		autoCreateSubscriptionGroup=true
		mappedFileSizeCommitLog=67108864
		mappedFileSizeConsumeQueue=60000
		maxIndexNum=100000
		maxHashSlotNum=25000
		timerWheelEnable=false
		maxMessageSize=4194304
		diskMaxUsedSpaceRatio=95
		transactionTimeOut=1000
		transactionCheckInterval=1000
		transactionOpBatchInterval=200
	EOF
	[ -z "${B_EXTRA:-}" ] || printf '%s\n' "$B_EXTRA" >>"$home/broker.conf"
	: >"$home/out.log.prev" && [ -f "$home/out.log" ] && mv "$home/out.log" "$home/out.log.prev"
	java_main "$name" "-Xms128m -Xmx384m -XX:MaxDirectMemorySize=256m" \
		org.apache.rocketmq.broker.BrokerStartup -c "$home/broker.conf"
	for ((i = 0; i < 480; i++)); do
		if grep -q 'boot success' "$home/out.log" 2>/dev/null; then
			log "broker $name 127.0.0.1:$port started (pid $(cat "$home/pid"), store $home/store)"
			return 0
		fi
		alive "$home/pid" || break
		sleep 0.25
	done
	tail -30 "$home/out.log" >&2 || true
	die "broker $name did not start (log: $home/out.log)"
}

# fetch_deploy copies the proxy's jars (build/rocketmq/deploy/pom.xml) into $LIBD once.
fetch_deploy() {
	[ -f "$LIBD/.complete" ] && return 0
	locked fetch-deploy
	[ -f "$LIBD/.complete" ] && return 0
	need_java
	have mvn || apt_install maven ||
		die "mvn not found and not installable here (needs root and apt-get): install Maven to fetch RocketMQ $VERSION (Debian: maven)"
	log "fetching Apache RocketMQ $VERSION's proxy from Maven Central into $LIBD (once, ~90 MB)"
	rm -rf "$LIBD.tmp"
	if ! mvn -B -q -f build/rocketmq/deploy/pom.xml dependency:copy-dependencies \
		-DoutputDirectory="$LIBD.tmp" -DincludeScope=runtime >"$DIR/mvn-deploy.log" 2>&1; then
		tail -5 "$DIR/mvn-deploy.log" >&2
		die "Maven could not fetch RocketMQ $VERSION's proxy; full log: $DIR/mvn-deploy.log"
	fi
	touch "$LIBD.tmp/.complete"
	rm -rf "$LIBD" && mv "$LIBD.tmp" "$LIBD"
}

# deploy_admin ARGS...: mqadmin against the deployments' name server, signed as broker-acl's
# super user (mqadmin reads the credentials from $ROCKETMQ_HOME/conf/tools.yml).
deploy_admin() {
	local home=$DIR/admin-deploy
	mkdir -p "$home/conf"
	printf 'accessKey: %s\nsecretKey: %s\n' "$ACL_ADMIN_USER" "$ACL_ADMIN_PASS" >"$home/conf/tools.yml"
	java -Xmx128m "${JAVA_OPENS[@]}" -Duser.home="$home" -Drocketmq.home.dir="$home" \
		-cp "$LIBD/*" org.apache.rocketmq.tools.command.MQAdminStartup "$@" -n "$D_NS_ADDR"
}

# start_proxy: the 5.x proxy in cluster mode in front of the cluster ProxiedCluster, with its
# remoting port (what rocketmq-client-go reaches as a name server) and its gRPC port.
start_proxy() {
	local home=$DIR/proxy
	if alive "$home/pid" && tcp_open 127.0.0.1 "$PROXY_PORT" && tcp_open 127.0.0.1 "$PROXY_GRPC_PORT"; then
		[ -f "$home/loopback" ] ||
			log "warning: the proxy (pid $(cat "$home/pid")) was started without build/rocketmq/loopback-proxy and listens on every interface: run $0 deploy-stop, then deploy-start"
		return 0
	fi
	if alive "$home/pid"; then
		kill -9 "$(cat "$home/pid")" 2>/dev/null || true
		while alive "$home/pid"; do sleep 0.1; done
	fi
	local p
	for p in "$PROXY_PORT" "$PROXY_GRPC_PORT"; do
		tcp_open 127.0.0.1 "$p" && die "port $p is taken by another process: set OUTBOX_SERVICES_ROCKETMQ_DEPLOY_PORT"
	done
	mkdir -p "$home"
	# Loopback only: localServeAddr is the address the proxy gives clients for itself in its
	# routes (default: the machine's first non-loopback address); the ports are bound to
	# 127.0.0.1 by build/rocketmq/loopback-proxy, which has no setting of its own.
	cat >"$home/rmq-proxy.json" <<-EOF
		{
		  "rocketMQClusterName": "ProxiedCluster",
		  "namesrvAddr": "$D_NS_ADDR",
		  "proxyMode": "cluster",
		  "localServeAddr": "127.0.0.1",
		  "remotingListenPort": $PROXY_PORT,
		  "grpcServerPort": $PROXY_GRPC_PORT,
		  "grpcWorkerLoopNum": 2,
		  "grpcThreadPoolNums": 8,
		  "enablePrintJstack": false
		}
	EOF
	# The proxy creates its system topic on every broker of ProxiedCluster as it starts, and
	# exits when the name server does not yet route the cluster: a broker prints "boot
	# success" before its registration is certain to have landed (on a loaded machine the
	# first one can time out and the next comes 30 s later). Wait for the route first; if
	# the proxy still exits on it, start it again (three attempts in all).
	build_loopback_proxy
	wait_cluster_route ProxiedCluster
	local attempt i
	for attempt in 1 2 3; do
		: >"$home/out.log.prev" && [ -f "$home/out.log" ] && mv "$home/out.log" "$home/out.log.prev"
		rm -f "$home/loopback"
		JFIRST=$EXTP JLIB=$LIBD java_main proxy "-Xms128m -Xmx320m -XX:MaxDirectMemorySize=256m" \
			org.apache.rocketmq.proxy.ProxyStartup -pc "$home/rmq-proxy.json" -pm cluster
		for ((i = 0; i < 480; i++)); do
			if tcp_open 127.0.0.1 "$PROXY_PORT" && tcp_open 127.0.0.1 "$PROXY_GRPC_PORT"; then
				touch "$home/loopback" # started with the loopback classes
				log "proxy (cluster mode) 127.0.0.1:$PROXY_PORT remoting, 127.0.0.1:$PROXY_GRPC_PORT gRPC started (pid $(cat "$home/pid"))"
				return 0
			fi
			alive "$home/pid" || break
			sleep 0.25
		done
		alive "$home/pid" && break # up but not listening after 2 minutes: not a start race
		grep -q 'create system broadcast topic' "$home/out.log" 2>/dev/null || break
		log "the proxy exited before the name server routed ProxiedCluster (attempt $attempt); waiting for the route"
		wait_cluster_route ProxiedCluster
	done
	tail -30 "$home/out.log" >&2 || true
	die "the proxy did not start (log: $home/out.log)"
}

# wait_cluster_route CLUSTER: waits (up to 90 s) until the deployments' name server has the
# route of the topic named after CLUSTER, which its brokers register and the proxy needs.
wait_cluster_route() {
	local deadline=$((SECONDS + 90))
	while ((SECONDS < deadline)); do
		deploy_admin topicRoute -t "$1" >/dev/null 2>&1 && return 0
		sleep 1
	done
	die "the name server $D_NS_ADDR has no route for cluster $1 after 90 s (broker logs: $DIR/broker-*/out.log)"
}

# deploy_acl_users creates broker-acl's users and grants, once per store.
deploy_acl_users() {
	local b=127.0.0.1:$ACL_PORT out
	[ -f "$DIR/broker-acl/store/.users-$ACL_PUB_USER" ] && return 0
	for cmd in \
		"createUser -b $b -u $ACL_PUB_USER -p $ACL_PUB_PASS -t Normal" \
		"createUser -b $b -u $ACL_NONE_USER -p $ACL_NONE_PASS -t Normal" \
		"createAcl -b $b -s User:$ACL_PUB_USER -r Topic:* -a Pub -d Allow"; do
		# shellcheck disable=SC2086
		out=$(deploy_admin $cmd 2>&1) || { printf '%s\n' "$out" | tail -5 >&2; die "mqadmin $cmd failed"; }
		case $out in *[Ee]xception* | *failed* | *error*) printf '%s\n' "$out" | tail -5 >&2; die "mqadmin $cmd failed" ;; esac
	done
	touch "$DIR/broker-acl/store/.users-$ACL_PUB_USER"
}

record_deploy_env() {
	mkdir -p bin
	touch bin/services.env
	grep -v '^OUTBOX_TEST_ROCKETMQ_PROXY\|^OUTBOX_TEST_ROCKETMQ_ACL_\|^OUTBOX_TEST_ROCKETMQ_DEPLOY_' bin/services.env >bin/services.env.tmp || true
	deploy_env >>bin/services.env.tmp
	mv bin/services.env.tmp bin/services.env
}

deploy_env() {
	cat <<-EOF
		OUTBOX_TEST_ROCKETMQ_DEPLOY_NAMESRV='$D_NS_ADDR'
		OUTBOX_TEST_ROCKETMQ_PROXY='127.0.0.1:$PROXY_PORT'
		OUTBOX_TEST_ROCKETMQ_PROXY_GRPC='127.0.0.1:$PROXY_GRPC_PORT'
		OUTBOX_TEST_ROCKETMQ_PROXY_BROKER='127.0.0.1:$PROXIED_PORT'
		OUTBOX_TEST_ROCKETMQ_ACL_BROKER='127.0.0.1:$ACL_PORT'
		OUTBOX_TEST_ROCKETMQ_ACL_USER='$ACL_PUB_USER:$ACL_PUB_PASS'
		OUTBOX_TEST_ROCKETMQ_ACL_NOPERM_USER='$ACL_NONE_USER:$ACL_NONE_PASS'
		OUTBOX_TEST_ROCKETMQ_ACL_ADMIN_USER='$ACL_ADMIN_USER:$ACL_ADMIN_PASS'
	EOF
}

deploy_start() {
	need_java
	fetch_deploy
	JLIB=$LIBD start_namesrv namesrv-deploy "$D_NS_PORT"
	JLIB=$LIBD B_NS=$D_NS_ADDR B_CLUSTER=ProxiedCluster start_broker broker-proxied "$PROXIED_PORT"
	# ACL 2.0: every request signed by a user the broker knows (authentication) and allowed
	# by an ACL (authorization); the super user is created on first start.
	JLIB=$LIBD B_NS=$D_NS_ADDR B_CLUSTER=AclCluster B_EXTRA="authenticationEnabled=true
authenticationProvider=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider
authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider
authorizationEnabled=true
authorizationProvider=org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider
authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider
initAuthenticationUser={\"username\":\"$ACL_ADMIN_USER\",\"password\":\"$ACL_ADMIN_PASS\"}
innerClientAuthenticationCredentials={\"accessKey\":\"$ACL_ADMIN_USER\",\"secretKey\":\"$ACL_ADMIN_PASS\"}" \
		start_broker broker-acl "$ACL_PORT"
	start_proxy
	deploy_acl_users
	record_deploy_env
	deploy_env
}

stop_pid() { # stop_pid PIDFILE: SIGTERM, then SIGKILL after 20 s
	local f=$1 i
	alive "$f" || { rm -f "$f"; return 0; }
	kill "$(cat "$f")" 2>/dev/null || true
	for ((i = 0; i < 80; i++)); do
		alive "$f" || { rm -f "$f"; return 0; }
		sleep 0.25
	done
	kill -9 "$(cat "$f")" 2>/dev/null || true
	rm -f "$f"
}

record_env() {
	mkdir -p bin
	touch bin/services.env
	grep -v '^OUTBOX_TEST_ROCKETMQ_NAMESRV=\|^OUTBOX_TEST_ROCKETMQ_BROKER=' bin/services.env >bin/services.env.tmp || true
	printf "OUTBOX_TEST_ROCKETMQ_NAMESRV='%s'\n" "$NS_ADDR" >>bin/services.env.tmp
	printf "OUTBOX_TEST_ROCKETMQ_BROKER='127.0.0.1:%s'\n" "$BROKER_PORT" >>bin/services.env.tmp
	mv bin/services.env.tmp bin/services.env
}

mkdir -p "$DIR"
USERS_DIR=${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}/users
# shellcheck source=scripts/users.sh
. scripts/users.sh
case "${1:-}" in
start)
	locked main
	users_register
	need_java
	fetch
	start_namesrv
	start_broker broker-a "$BROKER_PORT"
	# The demo's topic, once per store (autoCreateTopicEnable is off).
	if [ ! -f "$DIR/broker-a/store/.topics" ]; then
		create_topics orders
		touch "$DIR/broker-a/store/.topics"
	fi
	record_env
	echo "ROCKETMQ_NAMESRV=$NS_ADDR"
	;;
broker-start)
	[ $# -eq 3 ] || die "usage: $0 broker-start NAME PORT"
	need_java
	fetch
	alive "$DIR/namesrv/pid" || die "the name server is not running: run $0 start first"
	start_broker "$2" "$3"
	cat "$DIR/$2/pid"
	;;
broker-stop)
	[ $# -eq 2 ] || die "usage: $0 broker-stop NAME"
	locked "$2"
	stop_pid "$DIR/$2/pid"
	;;
broker-kill)
	[ $# -eq 2 ] || die "usage: $0 broker-kill NAME"
	locked "$2"
	if alive "$DIR/$2/pid"; then
		kill -9 "$(cat "$DIR/$2/pid")"
		while alive "$DIR/$2/pid"; do sleep 0.05; done
	fi
	;;
broker-wipe)
	[ $# -eq 2 ] || die "usage: $0 broker-wipe NAME"
	locked "$2"
	case $2 in broker-a | broker-proxied | broker-acl | namesrv* | proxy | admin* | lib* | '' | */* | .*) die "broker-wipe: refusing to wipe $2" ;; esac
	alive "$DIR/$2/pid" && die "broker $2 is running: broker-kill or broker-stop it first"
	rm -rf "${DIR:?}/$2/store"
	;;
broker-store)
	[ $# -eq 3 ] || die "usage: $0 broker-store NAME save|restore"
	locked "$2"
	case $2 in broker-a | broker-proxied | broker-acl | namesrv* | proxy | admin* | lib* | '' | */* | .*) die "broker-store: refusing to touch $2" ;; esac
	alive "$DIR/$2/pid" && die "broker $2 is running: broker-kill or broker-stop it first"
	case $3 in
	save) rm -rf "${DIR:?}/$2/store.copy" && cp -a "$DIR/$2/store" "$DIR/$2/store.copy" ;;
	restore)
		[ -d "$DIR/$2/store.copy" ] || die "broker $2 has no saved store"
		rm -rf "${DIR:?}/$2/store" && cp -a "$DIR/$2/store.copy" "$DIR/$2/store"
		;;
	*) die "usage: $0 broker-store NAME save|restore" ;;
	esac
	;;
broker-freeze | broker-thaw)
	[ $# -eq 2 ] || die "usage: $0 $1 NAME"
	locked "$2"
	alive "$DIR/$2/pid" || die "broker $2 is not running"
	if [ "$1" = broker-freeze ]; then kill -STOP "$(cat "$DIR/$2/pid")"; else kill -CONT "$(cat "$DIR/$2/pid")"; fi
	;;
stop)
	locked main
	locked deploy
	[ "${2:-}" = --force ] && FORCE=1
	users_may_stop || exit 0
	for f in "$DIR"/*/pid; do
		[ -f "$f" ] || continue
		case $f in "$DIR/namesrv/pid" | "$DIR/namesrv-deploy/pid") continue ;; esac
		stop_pid "$f" && log "stopped $(basename "$(dirname "$f")")"
	done
	stop_pid "$DIR/namesrv-deploy/pid"
	stop_pid "$DIR/namesrv/pid" && log "stopped the name servers"
	if [ -f bin/services.env ]; then
		grep -v '^OUTBOX_TEST_ROCKETMQ_' bin/services.env >bin/services.env.tmp || true
		mv bin/services.env.tmp bin/services.env
	fi
	;;
status)
	rc=0
	for f in "$DIR"/*/pid; do
		[ -f "$f" ] || continue
		n=$(basename "$(dirname "$f")")
		if alive "$f"; then echo "$n: running (pid $(cat "$f"))"; else echo "$n: stopped"; fi
	done
	alive "$DIR/namesrv/pid" && alive "$DIR/broker-a/pid" || rc=1
	[ $rc = 0 ] && echo "ROCKETMQ_NAMESRV=$NS_ADDR"
	exit $rc
	;;
topic)
	shift
	create_topics "$@"
	;;
admin)
	shift
	admin "$@"
	;;
deploy-start)
	locked deploy
	deploy_start
	;;
deploy-stop)
	locked deploy
	for n in proxy broker-proxied broker-acl namesrv-deploy; do
		alive "$DIR/$n/pid" && stop_pid "$DIR/$n/pid" && log "stopped $n"
		rm -f "$DIR/$n/pid"
	done
	;;
deploy-admin)
	shift
	fetch_deploy
	deploy_admin "$@"
	;;
*)
	die "usage: $0 start|stop|status|topic NAME...|broker-start NAME PORT|broker-stop NAME|broker-kill NAME|broker-wipe NAME|broker-store NAME save|restore|broker-freeze NAME|broker-thaw NAME|admin ARGS...|deploy-start|deploy-stop|deploy-admin ARGS..."
	;;
esac
