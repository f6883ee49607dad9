// SPDX-License-Identifier: Apache-2.0

//go:build linux

package tlsbridge

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

func checkSupported() error {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		return fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return nil
}

// fromThisProcess returns nil when the peer of the accepted connection c is a socket this
// process holds open: the kernel's table of TCP sockets gives the inode of the socket whose
// local end is c's remote address and whose remote end is c's local address, and that inode
// must be one of this process's files.
func fromThisProcess(c net.Conn) error {
	peer, ok1 := c.RemoteAddr().(*net.TCPAddr)
	self, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 {
		return errors.New("not a TCP connection")
	}
	inode, err := socketInode(peer, self)
	if err != nil {
		return err
	}
	ours, err := ownsSocket(inode)
	if err != nil {
		return err
	}
	if !ours {
		return fmt.Errorf("the peer socket (inode %s) belongs to another process", inode)
	}
	return nil
}

// socketInode returns the inode of the TCP socket from local to remote.
func socketInode(local, remote *net.TCPAddr) (string, error) {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		inode, err := findSocket(table, procAddr(local), procAddr(remote))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		if inode != "" {
			return inode, nil
		}
	}
	return "", fmt.Errorf("no socket from %s to %s in /proc/net/tcp", local, remote)
}

// findSocket scans a /proc/net/tcp table for the line from local to remote (in the table's
// hex form) and returns its inode.
func findSocket(table, local, remote string) (string, error) {
	f, err := os.Open(table)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 10 {
			continue
		}
		if strings.EqualFold(fields[1], local) && strings.EqualFold(fields[2], remote) && fields[9] != "0" {
			return fields[9], nil
		}
	}
	return "", s.Err()
}

// procAddr writes a as /proc/net/tcp does: the address as 32-bit words in host order
// (little-endian here), hex, then ':' and the port in hex.
func procAddr(a *net.TCPAddr) string {
	ip := a.IP.To4()
	if ip == nil {
		ip = a.IP.To16()
	}
	words := make([]byte, len(ip))
	for i := 0; i+4 <= len(ip); i += 4 {
		binary.LittleEndian.PutUint32(words[i:], binary.BigEndian.Uint32(ip[i:]))
	}
	return fmt.Sprintf("%s:%04X", strings.ToUpper(hex.EncodeToString(words)), a.Port)
}

// ownsSocket reports whether one of this process's file descriptors is the socket inode.
func ownsSocket(inode string) (bool, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false, err
	}
	want := "socket:[" + inode + "]"
	for _, e := range ents {
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && link == want {
			return true, nil
		}
	}
	return false, nil
}
