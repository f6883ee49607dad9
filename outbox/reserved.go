// SPDX-License-Identifier: Apache-2.0

package outbox

import "strings"

// brokerProperties are the property names Apache RocketMQ 5.3.3 defines for itself (every
// PROPERTY_* constant of its MessageConst, which the Java client refuses as user properties):
// the broker acts on them, e.g. TIMER_DELIVER_MS or DELAY change when a message is delivered
// and INNER_MULTI_DISPATCH where it is dispatched. TestReservedPropertiesMatchTheBroker keeps
// the list equal to the broker's.
var brokerProperties = []string{
	"1ST_POP_TIME", "ARRIVE_TIME", "BORN_TIMESTAMP", "BUYER_ID",
	"CHECK_IMMUNITY_TIME_IN_SECONDS", "CLUSTER", "CONSUME_START_TIME", "CORRECTION_FLAG",
	"CORRELATION_ID", "DELAY", "DLQ_ORIGIN_MESSAGE_ID", "DLQ_ORIGIN_TOPIC", "DUP_INFO",
	"EXTEND_UNIQ_INFO", "INNER_BASE", "INNER_MULTI_DISPATCH", "INNER_MULTI_QUEUE_OFFSET",
	"INNER_NUM", "INSTANCE_ID", "KEYS", "MAX_OFFSET", "MAX_RECONSUME_TIMES", "MIN_OFFSET",
	"MQ2_FLAG", "MSG_REGION", "MSG_TYPE", "ORIGIN_MESSAGE_ID", "PGROUP", "POP_CK",
	"POP_CK_OFFSET", "PROPERTY_FORWARD_QUEUE_ID", "PUSH_REPLY_TIME", "REAL_QID", "REAL_TOPIC",
	"RECONSUME_TIME", "REDIRECT", "REPLY_TO_CLIENT", "RETRY_TOPIC", "TAGS", "TIMER_DELAY_LEVEL",
	"TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_DEL_UNIQKEY",
	"TIMER_DEQUEUE_MS", "TIMER_ENQUEUE_MS", "TIMER_OUT_MS", "TIMER_ROLL_TIMES", "TRACE_CONTEXT",
	"TRACE_ON", "TRANSACTION_CHECK_TIMES", "TRANSFER_FLAG", "TRAN_MSG",
	"TRAN_PREPARED_QUEUE_OFFSET", "TTL", "UNIQ_KEY", "WAIT", "__BORNHOST", "__CRC32#",
	"__RMQ.TRANSIENT.", "__RMQ.TRANSIENT.GROUP_SYS_FLAG", "__RMQ.TRANSIENT.TOPIC_SYS_FLAG",
	"__SHARDINGKEY", "__transactionId__",
}

// clientProperties are property names the Go and older Java clients set themselves, beyond
// the broker's list.
var clientProperties = []string{
	"SHARDING_KEY", "__STARTDELIVERTIME",
}

// reservedPrefixes are families the broker reserves as a whole: its transient properties and
// its timer properties, so that a name a later broker version adds to them is refused too.
var reservedPrefixes = []string{"__RMQ.TRANSIENT.", "TIMER_"}

// reservedProperties holds every name of brokerProperties and clientProperties and the
// relay's own properties, the one list the writer and the relay check.
var reservedProperties = func() map[string]bool {
	m := map[string]bool{MsgIDProperty: true, TableProperty: true, WriterProperty: true, SignatureProperty: true, ReplayProperty: true}
	for _, list := range [][]string{brokerProperties, clientProperties} {
		for _, n := range list {
			m[n] = true
		}
	}
	return m
}()

// reservedProperty reports whether a user property named name would be read by the broker,
// the client or the relay instead of being carried to consumers: such names are refused.
func reservedProperty(name string) bool {
	if reservedProperties[name] {
		return true
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
