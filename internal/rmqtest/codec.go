// SPDX-License-Identifier: Apache-2.0

package rmqtest

import (
	"bufio"

	"github.com/outbox-relay/outbox-relay/internal/remoting/frame"
)

// Frames are read and written by internal/remoting/frame, the relay's own codec: requests
// are read with JSON and RocketMQ binary headers alike; everything written (answers
// included) uses the server's own serialization, Options.BinaryHeaders, as Apache RocketMQ
// 5.3.3 answers in its configured serialization whatever the request's.
const (
	flagResponse = frame.FlagResponse
	flagOneway   = frame.FlagOneway

	// maxFrame bounds what we accept from a peer: the broker's message limit plus headroom.
	maxFrame = 64 << 20

	// serverVersion is what we report as our version in responses (RocketMQ 4.9.x).
	serverVersion int16 = 399
	// serverLanguage is the language we report, as a Java broker does.
	serverLanguage = "JAVA"
)

// Request codes we serve (see RocketMQ's RequestCode).
const (
	reqSendMessage             int16 = 10
	reqPullMessage             int16 = 11
	reqQueryMessage            int16 = 12
	reqQueryConsumerOffset     int16 = 14
	reqUpdateConsumerOffset    int16 = 15
	reqSearchOffsetByTimestamp int16 = 29
	reqGetMaxOffset            int16 = 30
	reqGetMinOffset            int16 = 31
	reqGetEarliestMsgStoreTime int16 = 32
	reqViewMessageByID         int16 = 33
	reqHeartBeat               int16 = 34
	reqUnregisterClient        int16 = 35
	reqConsumerSendMsgBack     int16 = 36
	reqGetConsumerListByGroup  int16 = 38
	reqNotifyConsumerIdsChange int16 = 40
	reqLockBatchMQ             int16 = 41
	reqUnlockBatchMQ           int16 = 42
	reqGetRouteInfoByTopic     int16 = 105
	reqGetBrokerClusterInfo    int16 = 106
	reqSendMessageV2           int16 = 310
	reqSendBatchMessage        int16 = 320
)

// Response codes we answer with (see RocketMQ's ResponseCode).
const (
	resSuccess                 int16 = 0
	resSystemError             int16 = 1
	resSlaveNotAvailable       int16 = 11
	resRequestCodeNotSupported int16 = 3
	resMessageIllegal          int16 = 13
	resTopicNotExist           int16 = 17
	resPullNotFound            int16 = 19
	resPullOffsetMoved         int16 = 21
	resQueryNotFound           int16 = 22
)

// command is one remoting command, request or response.
type command = frame.Command

// newResponse makes the response to req with the given code and remark.
func newResponse(req *command, code int16, remark string) *command {
	return &command{
		Code:     code,
		Language: serverLanguage,
		Version:  serverVersion,
		Opaque:   req.Opaque,
		Flag:     flagResponse,
		Remark:   remark,
		Ext:      map[string]string{},
	}
}

// readCommand reads one framed command.
func readCommand(r *bufio.Reader) (*command, error) { return frame.Read(r, maxFrame) }

// encodeCommand returns the whole frame, length prefix included, in the command's
// header serialization.
func encodeCommand(c *command) ([]byte, error) { return frame.Encode(c) }
