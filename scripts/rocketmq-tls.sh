#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# scripts/rocketmq-tls.sh start|stop|env: an Apache RocketMQ name server and broker that
# serve TLS only (tls.server.mode=enforcing) with a certificate for rocketmq.test signed by a
# CA made here, for TestApacheRocketMQVerifiedTLS (internal/tlsbridge). They run beside the
# shared test servers, never on them: their own ports (below the ephemeral range), data under
# $OUTBOX_SERVICES_DIR/rocketmq-tls, and the jars scripts/rocketmq.sh fetched.
#
#   bash scripts/rocketmq.sh start          # fetches the jars once (and starts broker-a)
#   bash scripts/rocketmq-tls.sh start      # ~30 s; prints the test's environment
#   eval "$(bash scripts/rocketmq-tls.sh env)"
#   go test -count=1 -run TestApacheRocketMQVerifiedTLS ./internal/tlsbridge/
#   bash scripts/rocketmq-tls.sh stop
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'rocketmq-tls: %s\n' "$*" >&2; exit 1; }
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

VERSION=$(sed -n 's:.*<rocketmq.version>\(.*\)</rocketmq.version>.*:\1:p' build/rocketmq/pom.xml)
LIB=${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}/rocketmq/lib-$VERSION
# scripts/rocketmq.sh's LoopbackHAService (the broker's HA listener on 127.0.0.1; RocketMQ
# has no setting for its address), compiled when it starts a broker.
EXT=${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}/rocketmq/loopback-$VERSION
DIR=${OUTBOX_SERVICES_DIR:-/tmp/outbox-relay-services}/rocketmq-tls
NS_PORT=${OUTBOX_SERVICES_ROCKETMQ_TLS_NAMESRV_PORT:-27876}
BROKER_PORT=${OUTBOX_SERVICES_ROCKETMQ_TLS_BROKER_PORT:-27911}
JAVA=(java --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/java.lang=ALL-UNNAMED
	--add-opens java.base/sun.nio.ch=ALL-UNNAMED --add-exports java.base/sun.nio.ch=ALL-UNNAMED
	-XX:+UseSerialGC -XX:-UsePerfData -Djava.net.preferIPv4Stack=true
	-Dtls.config.file="$DIR/none.properties" -Dtls.enable=true -Dtls.test.mode.enable=false)
SERVER_TLS=(-Dtls.server.mode=enforcing -Dtls.server.need.client.auth=none
	-Dtls.server.certPath="$DIR/server.pem" -Dtls.server.keyPath="$DIR/server.key")

certs() {
	[ -f "$DIR/server.pem" ] && return 0
	command -v openssl >/dev/null || die "openssl is needed to make the test certificates"
	mkdir -p "$DIR"
	(
		cd "$DIR"
		openssl ecparam -name prime256v1 -genkey -noout -out ca.key
		openssl req -x509 -new -key ca.key -subj /CN=outbox-relay-test-ca -days 30 -out ca.pem
		openssl genrsa -out server.rsa 2048
		openssl pkcs8 -topk8 -nocrypt -in server.rsa -out server.key # Netty reads PKCS#8
		openssl req -new -key server.key -subj /CN=rocketmq.test -out server.csr
		printf 'subjectAltName=DNS:rocketmq.test\nextendedKeyUsage=serverAuth,clientAuth\n' >ext.cnf
		openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -extfile ext.cnf -out server.pem
	) >/dev/null 2>&1 || die "could not make the certificates in $DIR"
}

# run NAME HEAP MAIN ARGS...: a JVM in the background, its log and pid under $DIR/NAME.
run() {
	local name=$1 heap=$2 main=$3; shift 3
	mkdir -p "$DIR/$name"
	ROCKETMQ_HOME=$DIR/$name setsid "${JAVA[@]}" $heap "${SERVER_TLS[@]}" -Duser.home="$DIR/$name" \
		-Drocketmq.home.dir="$DIR/$name" -cp "$EXT:$LIB/*" "$main" "$@" >"$DIR/$name/out.log" 2>&1 </dev/null &
	echo $! >"$DIR/$name/pid"
}

wait_boot() {
	local i
	for ((i = 0; i < 240; i++)); do
		grep -q 'boot success' "$DIR/$1/out.log" 2>/dev/null && return 0
		alive "$DIR/$1/pid" || break
		sleep 0.25
	done
	tail -20 "$DIR/$1/out.log" >&2 || true
	die "$1 did not start (log: $DIR/$1/out.log)"
}

start() {
	[ -d "$LIB" ] || die "no RocketMQ jars in $LIB: run scripts/rocketmq.sh start once"
	[ -f "$EXT/.complete" ] || die "no loopback HA listener in $EXT: run scripts/rocketmq.sh start once"
	certs
	if ! alive "$DIR/namesrv/pid"; then
		mkdir -p "$DIR/namesrv"
		printf 'listenPort=%s\nbindAddress=127.0.0.1\n' "$NS_PORT" >"$DIR/namesrv/namesrv.conf"
		run namesrv "-Xms64m -Xmx160m" org.apache.rocketmq.namesrv.NamesrvStartup -c "$DIR/namesrv/namesrv.conf"
		wait_boot namesrv
	fi
	if ! alive "$DIR/broker/pid"; then
		mkdir -p "$DIR/broker/store"
		cat >"$DIR/broker/broker.conf" <<-EOC
			brokerClusterName=TlsCluster
			brokerName=broker-tls
			brokerId=0
			brokerRole=ASYNC_MASTER
			flushDiskType=ASYNC_FLUSH
			namesrvAddr=127.0.0.1:$NS_PORT
			brokerIP1=127.0.0.1
			bindAddress=127.0.0.1
			listenPort=$BROKER_PORT
			haListenPort=$((BROKER_PORT + 1))
			storePathRootDir=$DIR/broker/store
			storePathCommitLog=$DIR/broker/store/commitlog
			autoCreateTopicEnable=false
			mappedFileSizeCommitLog=67108864
			mappedFileSizeConsumeQueue=60000
			timerWheelEnable=false
		EOC
		run broker "-Xms128m -Xmx320m -XX:MaxDirectMemorySize=256m" org.apache.rocketmq.broker.BrokerStartup -c "$DIR/broker/broker.conf"
		wait_boot broker
	fi
	local i
	for ((i = 0; i < 10; i++)); do # the broker takes a few seconds to accept admin requests
		"${JAVA[@]}" -Xmx128m -Duser.home="$DIR/admin" -Drocketmq.home.dir="$DIR/admin" -cp "$LIB/*" \
			org.apache.rocketmq.tools.command.MQAdminStartup updateTopic -b "127.0.0.1:$BROKER_PORT" \
			-t TlsOrders -r 4 -w 4 -n "127.0.0.1:$NS_PORT" 2>&1 | grep -q 'success' && break
		sleep 1
	done
	[ "$i" -lt 10 ] || die "could not create topic TlsOrders"
	env_lines
}

env_lines() {
	printf "export OUTBOX_TEST_ROCKETMQ_TLS_NAMESRV=127.0.0.1:%s OUTBOX_TEST_ROCKETMQ_TLS_CA=%s\n" "$NS_PORT" "$DIR/ca.pem"
}

stop() {
	local name
	for name in broker namesrv; do
		if alive "$DIR/$name/pid"; then
			kill "$(cat "$DIR/$name/pid")"
			while alive "$DIR/$name/pid"; do sleep 0.2; done
		fi
		rm -f "$DIR/$name/pid"
	done
}

case "${1:-}" in
start) start ;;
stop) stop ;;
env) env_lines ;;
*) die "usage: $0 start|stop|env" ;;
esac
