// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package tlsbridge

import "net"

func checkSupported() error { return ErrUnsupported }

func fromThisProcess(net.Conn) error { return ErrUnsupported }
