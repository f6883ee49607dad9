// SPDX-License-Identifier: Apache-2.0

package testenv

import (
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Replicated is a primary MariaDB server and its replica, both private to one test (started
// by StartReplicated, stopped at cleanup), with a database "outbox" and an account "relay"
// that may do anything in it but write on a read-only server (no SUPER, no READ_ONLY ADMIN).
type Replicated struct {
	// Primary and Replica are the servers' host:port on loopback.
	Primary, Replica string
	old, standby     *sql.DB // root over each server's socket
}

// DSN returns the relay account's DSN of database outbox at addr (a server's, or a proxy's).
func (r *Replicated) DSN(addr string) string {
	return "relay:relay@tcp(" + addr + ")/outbox?interpolateParams=true"
}

// StartReplicated starts two MariaDB servers with their data under a new directory of /tmp,
// the second replicating the first. Without mariadbd the test is Unavailable (it fails
// under CI=true).
func StartReplicated(tb testing.TB) *Replicated {
	tb.Helper()
	dir, err := os.MkdirTemp("/tmp", "outbox-mariadb-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the servers' account must reach their data
		tb.Fatal(err)
	}
	oldRoot, oldPort := startMariaDB(tb, filepath.Join(dir, "primary"), 1)
	newRoot, newPort := startMariaDB(tb, filepath.Join(dir, "replica"), 2)
	r := &Replicated{Primary: fmt.Sprintf("127.0.0.1:%d", oldPort), Replica: fmt.Sprintf("127.0.0.1:%d", newPort), old: oldRoot, standby: newRoot}
	rootExec(tb, oldRoot, "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl'",
		"GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'")
	rootExec(tb, newRoot, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_USE_GTID=current_pos", oldPort),
		"START SLAVE")
	rootExec(tb, oldRoot, "CREATE DATABASE outbox CHARACTER SET utf8mb4",
		"CREATE USER 'relay'@'127.0.0.1' IDENTIFIED BY 'relay'",
		"GRANT ALL PRIVILEGES ON outbox.* TO 'relay'@'127.0.0.1'")
	return r
}

// Failover makes the primary read-only (it stays up, its connections open), waits until the
// replica has applied everything, and promotes the replica: it stops replicating and accepts
// writes. Moving the clients is the caller's (a proxy's SetTarget, say).
func (r *Replicated) Failover(tb testing.TB) {
	tb.Helper()
	rootExec(tb, r.old, "SET GLOBAL read_only = 1")
	var pos string
	if err := r.old.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		tb.Fatal(err)
	}
	var caught int
	if err := r.standby.QueryRow("SELECT MASTER_GTID_WAIT(?, 20)", pos).Scan(&caught); err != nil || caught != 0 {
		tb.Fatalf("the replica did not catch up with %s: %v (%d)", pos, err, caught)
	}
	rootExec(tb, r.standby, "STOP SLAVE", "RESET SLAVE ALL")
}

// startMariaDB starts a MariaDB server with its data under dir, on a free loopback port, and
// returns its root pool (over the socket) and port; it stops the server at cleanup.
func startMariaDB(tb testing.TB, dir string, serverID int) (*sql.DB, int) {
	tb.Helper()
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			Unavailable(tb, "mariadbd (a private MariaDB server)", err)
		}
	}
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		Unavailable(tb, "mariadb-install-db", err)
	}
	var userArgs []string
	if os.Geteuid() == 0 { // mariadbd refuses to run as root: its files belong to mysql
		userArgs = []string{"--user=mysql"}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if u, err := user.Lookup("mysql"); err == nil && len(userArgs) > 0 {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		_ = os.Chown(dir, uid, gid)
	}
	data := filepath.Join(dir, "db")
	out, err := exec.Command(install, append(userArgs, "--datadir="+data,
		"--auth-root-authentication-method=normal", "--skip-test-db")...).CombinedOutput()
	if err != nil {
		tb.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	sock := filepath.Join(dir, "mariadbd.sock")
	args := append(append([]string{"--no-defaults"}, userArgs...), "--datadir="+data, "--socket="+sock,
		"--pid-file="+filepath.Join(dir, "mariadbd.pid"), "--bind-address=127.0.0.1", "--port="+strconv.Itoa(port),
		"--server-id="+strconv.Itoa(serverID), "--log-bin=mariadb-bin", "--binlog-format=ROW",
		"--innodb-buffer-pool-size=32M", "--innodb-log-file-size=16M",
		"--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci")
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(dir, "mariadbd.log"))
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start mariadbd: %v", err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
	})
	root, err := sql.Open("mysql", "root@unix("+sock+")/")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { root.Close() })
	Eventually(tb, 60*time.Second, "the private MariaDB answering", func() bool { return root.Ping() == nil })
	return root, port
}

func rootExec(tb testing.TB, db *sql.DB, stmts ...string) {
	tb.Helper()
	for _, s := range stmts {
		if _, err := db.Exec(s); err != nil {
			tb.Fatalf("%s: %v", s, err)
		}
	}
}
