// SPDX-License-Identifier: Apache-2.0

package tlsbridge

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/remoting"
)

// rewriteBrokers returns body (a topic's route or the cluster's broker table, in fastjson's
// shape) with every string that is a broker's address (a value of a "brokerAddrs" object)
// replaced by local's address for it. Everything else is left byte for byte.
func rewriteBrokers(body []byte, local func(upstream string) (string, error)) ([]byte, error) {
	var v struct {
		BrokerDatas []struct {
			BrokerAddrs map[string]string `json:"brokerAddrs"`
		} `json:"brokerDatas"`
		BrokerAddrTable map[string]struct {
			BrokerAddrs map[string]string `json:"brokerAddrs"`
		} `json:"brokerAddrTable"`
	}
	if err := json.Unmarshal(remoting.QuoteNumberKeys(body), &v); err != nil {
		return nil, fmt.Errorf("tlsbridge: an answer naming brokers: %w", err)
	}
	to := map[string]string{}
	add := func(addrs map[string]string) error {
		for _, a := range addrs {
			if _, done := to[a]; done {
				continue
			}
			l, err := local(a)
			if err != nil {
				return err
			}
			to[a] = l
		}
		return nil
	}
	for _, bd := range v.BrokerDatas {
		if err := add(bd.BrokerAddrs); err != nil {
			return nil, err
		}
	}
	for _, bd := range v.BrokerAddrTable {
		if err := add(bd.BrokerAddrs); err != nil {
			return nil, err
		}
	}
	return replaceStrings(body, to), nil
}

// replaceStrings returns b with every JSON string whose raw content is a key of to
// replaced by its value. Escaped strings are left alone (an address has no escapes).
func replaceStrings(b []byte, to map[string]string) []byte {
	if len(to) == 0 {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b) + 32*len(to))
	for i := 0; i < len(b); i++ {
		if b[i] != '"' {
			out.WriteByte(b[i])
			continue
		}
		end, escaped := i+1, false
		for end < len(b) && b[end] != '"' {
			if b[end] == '\\' {
				escaped = true
				end++
			}
			end++
		}
		if end >= len(b) {
			out.Write(b[i:])
			break
		}
		if repl, ok := to[string(b[i+1:end])]; ok && !escaped {
			out.WriteByte('"')
			out.WriteString(repl)
			out.WriteByte('"')
		} else {
			out.Write(b[i : end+1])
		}
		i = end
	}
	return out.Bytes()
}
