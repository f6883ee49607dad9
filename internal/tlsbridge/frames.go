// SPDX-License-Identifier: Apache-2.0

package tlsbridge

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Request codes whose answers name brokers by address.
const (
	codeGetRouteInfoByTopic  = 105
	codeGetBrokerClusterInfo = 106
)

// maxPending bounds the requests of one connection to a name server awaiting their answer.
const maxPending = 1024

// maxHeader bounds a frame's header (a name server's headers are a few hundred bytes).
const maxHeader = 64 << 10

var errFrame = errors.New("tlsbridge: malformed frame")

// framer forwards the frames of one connection to a name server: requests as they are,
// recording which asked for a route or the broker table, and answers as they are except
// those, whose brokers' addresses are rewritten to the bridge's.
type framer struct {
	maxFrame int
	local    func(upstream string) (string, error)

	mu      sync.Mutex
	pending map[int32]int16 // opaque -> request code, for the codes rewritten
}

func newFramer(maxFrame int, local func(string) (string, error)) *framer {
	return &framer{maxFrame: maxFrame, local: local, pending: map[int32]int16{}}
}

// frameHead is the start of a frame: its length, its header bytes and the fields of the
// header the bridge reads.
type frameHead struct {
	length int // of the frame after its length field
	prefix []byte
	code   int16
	opaque int32
	flag   int32
}

// bodyLen is the length of the body that follows the header.
func (h *frameHead) bodyLen() int { return h.length - (len(h.prefix) - 4) }

// readHead reads a frame's length and header; the body is left to read.
func readHead(r *bufio.Reader, maxFrame int) (*frameHead, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	length := int(binary.BigEndian.Uint32(n[:4]))
	mark := binary.BigEndian.Uint32(n[4:])
	hlen := int(mark & 0xFFFFFF)
	if length < 4 || hlen > maxHeader || 4+hlen > length {
		return nil, fmt.Errorf("%w: length %d, header %d", errFrame, length, hlen)
	}
	h := &frameHead{length: length, prefix: make([]byte, 8+hlen)}
	copy(h.prefix, n[:])
	if _, err := io.ReadFull(r, h.prefix[8:]); err != nil {
		return nil, err
	}
	if err := h.parse(byte(mark>>24), h.prefix[8:]); err != nil {
		return nil, err
	}
	return h, nil
}

// parse reads the code, opaque and flag of a header in either of RocketMQ's codecs.
func (h *frameHead) parse(codec byte, hb []byte) error {
	switch codec {
	case 0: // JSON
		var v struct {
			Code   int16 `json:"code"`
			Opaque int32 `json:"opaque"`
			Flag   int32 `json:"flag"`
		}
		if err := json.Unmarshal(hb, &v); err != nil {
			return fmt.Errorf("%w: header: %w", errFrame, err)
		}
		h.code, h.opaque, h.flag = v.Code, v.Opaque, v.Flag
	case 1: // RocketMQ's binary header: code, language, version, opaque, flag, ...
		if len(hb) < 13 {
			return fmt.Errorf("%w: binary header of %d bytes", errFrame, len(hb))
		}
		h.code = int16(binary.BigEndian.Uint16(hb[0:]))
		h.opaque = int32(binary.BigEndian.Uint32(hb[5:]))
		h.flag = int32(binary.BigEndian.Uint32(hb[9:]))
	default:
		return fmt.Errorf("%w: header codec %d", errFrame, codec)
	}
	return nil
}

const (
	flagResponse = 1
	flagOneway   = 2
)

// requests forwards the client's frames to the name server, noting the requests whose
// answers are rewritten.
func (f *framer) requests(client io.Reader, up io.Writer) error {
	r := bufio.NewReaderSize(client, 32<<10)
	for {
		h, err := readHead(r, f.maxFrame)
		if err != nil {
			return err
		}
		if h.flag&flagResponse == 0 && h.flag&flagOneway == 0 && (h.code == codeGetRouteInfoByTopic || h.code == codeGetBrokerClusterInfo) {
			f.mu.Lock()
			full := len(f.pending) >= maxPending
			f.pending[h.opaque] = h.code
			f.mu.Unlock()
			if full {
				return fmt.Errorf("tlsbridge: more than %d requests unanswered", maxPending)
			}
		}
		if err := h.pass(r, up); err != nil {
			return err
		}
	}
}

// pass writes the frame of h to w as it is: its head, then its body streamed from r.
func (h *frameHead) pass(r io.Reader, w io.Writer) error {
	if _, err := w.Write(h.prefix); err != nil {
		return err
	}
	_, err := io.CopyN(w, r, int64(h.bodyLen()))
	return err
}

// responses forwards the name server's frames to the client, with the brokers' addresses
// of routes and broker tables rewritten to the bridge's listeners.
func (f *framer) responses(up io.Reader, client io.Writer) error {
	r := bufio.NewReaderSize(up, 32<<10)
	for {
		h, err := readHead(r, f.maxFrame)
		if err != nil {
			return err
		}
		var code int16
		if h.flag&flagResponse != 0 {
			f.mu.Lock()
			code = f.pending[h.opaque]
			delete(f.pending, h.opaque)
			f.mu.Unlock()
		}
		if code == 0 || h.code != 0 {
			err = h.pass(r, client)
		} else {
			err = f.rewrite(h, r, client)
		}
		if err != nil {
			return err
		}
	}
}

// rewrite reads the body of h (at most maxFrame), rewrites its brokers' addresses and
// writes the frame with its length recomputed.
func (f *framer) rewrite(h *frameHead, r io.Reader, client io.Writer) error {
	if h.length > f.maxFrame {
		return fmt.Errorf("%w: an answer naming brokers of %d bytes (at most %d)", errFrame, h.length, f.maxFrame)
	}
	body := make([]byte, h.bodyLen())
	if _, err := io.ReadFull(r, body); err != nil {
		return err
	}
	body, err := rewriteBrokers(body, f.local)
	if err != nil {
		return err
	}
	binary.BigEndian.PutUint32(h.prefix, uint32(len(h.prefix)-4+len(body)))
	if _, err := client.Write(append(h.prefix, body...)); err != nil {
		return err
	}
	return nil
}
