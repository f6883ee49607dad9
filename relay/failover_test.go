// SPDX-License-Identifier: Apache-2.0

package relay_test

import (
	"context"
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

	"github.com/outbox-relay/outbox-relay/internal/rmqtest"
	"github.com/outbox-relay/outbox-relay/internal/tcpproxy"
	"github.com/outbox-relay/outbox-relay/internal/testenv"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/schema"
)

// mariadb is a MariaDB server of one test's own: its root pool (over the socket) and port.
type mariadb struct {
	root *sql.DB
	port int
}

// startMariaDB starts a private MariaDB server with its data under dir, on a free loopback
// port, and stops it at cleanup. Without mariadbd the test is Unavailable (it fails under
// CI=true).
func startMariaDB(t *testing.T, dir string, serverID int) *mariadb {
	t.Helper()
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			testenv.Unavailable(t, "mariadbd (a private MariaDB server)", err)
		}
	}
	install, err := exec.LookPath("mariadb-install-db")
	if err != nil {
		testenv.Unavailable(t, "mariadb-install-db", err)
	}
	var userArgs []string
	if os.Geteuid() == 0 { // mariadbd refuses to run as root: its files belong to mysql
		userArgs = []string{"--user=mysql"}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if len(userArgs) > 0 {
		if u, err := user.Lookup("mysql"); err == nil {
			uid, _ := strconv.Atoi(u.Uid)
			gid, _ := strconv.Atoi(u.Gid)
			_ = os.Chown(dir, uid, gid)
		}
	}
	out, err := exec.Command(install, append(userArgs, "--datadir="+filepath.Join(dir, "db"),
		"--auth-root-authentication-method=normal", "--skip-test-db")...).CombinedOutput()
	if err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	sock := filepath.Join(dir, "mariadbd.sock")
	cmd := exec.Command(bin, append([]string{"--no-defaults"}, append(userArgs,
		"--datadir="+filepath.Join(dir, "db"), "--socket="+sock, "--pid-file="+filepath.Join(dir, "mariadbd.pid"),
		"--bind-address=127.0.0.1", "--port="+strconv.Itoa(port), "--server-id="+strconv.Itoa(serverID),
		"--log-bin=mariadb-bin", "--binlog-format=ROW", "--innodb-buffer-pool-size=32M",
		"--innodb-log-file-size=16M", "--character-set-server=utf8mb4", "--collation-server=utf8mb4_general_ci")...)...)
	logf, err := os.Create(filepath.Join(dir, "mariadbd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("start mariadbd: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		logf.Close()
	})
	root, err := sql.Open("mysql", "root@unix("+sock+")/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	testenv.Eventually(t, 60*time.Second, "the private MariaDB answering", func() bool { return root.Ping() == nil })
	return &mariadb{root: root, port: port}
}

func (m *mariadb) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := m.root.Exec(s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

// TestFailoverToANewPrimaryWithTheOldOneReadOnly: a MySQL failover that leaves the old primary
// running read-only (Aurora's failover, an orchestrator or MHA switchover) once stopped the
// table until a restart: the pool kept its connections to the old server, every write-back
// was refused, and an idle leader only read there. Two MariaDB servers, the second a replica
// of the first, behind a proxy that moves new connections at the switch and leaves the old
// ones open: every row committed on the new primary after the switch is sent within 30 s,
// by the same relay, which still stops at once when asked.
func TestFailoverToANewPrimaryWithTheOldOneReadOnly(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("/tmp", "dbmoves-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the servers' account must reach their data
		t.Fatal(err)
	}
	old := startMariaDB(t, filepath.Join(dir, "old"), 1)
	standby := startMariaDB(t, filepath.Join(dir, "new"), 2)
	old.exec(t, "CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl'",
		"GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1'")
	standby.exec(t, fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='repl', MASTER_PASSWORD='repl', MASTER_USE_GTID=current_pos", old.port),
		"START SLAVE")
	// The relay's account may not write on a read-only server (no SUPER, no READ_ONLY ADMIN).
	old.exec(t, "CREATE DATABASE outbox CHARACTER SET utf8mb4",
		"CREATE USER 'relay'@'127.0.0.1' IDENTIFIED BY 'relay'",
		"GRANT ALL PRIVILEGES ON outbox.* TO 'relay'@'127.0.0.1'")
	dsn := func(addr string) string { return "relay:relay@tcp(" + addr + ")/outbox?interpolateParams=true" }
	oldAddr, newAddr := fmt.Sprintf("127.0.0.1:%d", old.port), fmt.Sprintf("127.0.0.1:%d", standby.port)
	direct, err := sql.Open("mysql", dsn(oldAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if err := schema.Migrate(context.Background(), direct, "local_message"); err != nil {
		t.Fatal(err)
	}

	proxy, err := tcpproxy.Start(oldAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	// A pool as an application opens it: no connection lifetime of its own.
	pool, err := sql.Open("mysql", dsn(proxy.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Close() })
	rdb, prefix := testenv.Redis(t)
	broker, err := rmqtest.Start(rmqtest.Options{Logf: func(string, ...any) {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	pub, err := relay.NewRocketMQPublisher(relay.RocketMQConfig{NameServers: []string{broker.NameServerAddr()}, SendTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pub.Close() })
	w, err := outbox.NewWriter(outbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(pool, rdb, pub, relay.Config{PollInterval: 50 * time.Millisecond, LockKey: prefix + "lock", LockTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	insert := func(db *sql.DB, prefix string, n int) {
		var msgs []outbox.Message
		for i := 0; i < n; i++ {
			msgs = append(msgs, outbox.Message{MsgID: fmt.Sprintf("%s-%02d", prefix, i), Topic: "orders", Body: []byte("o")})
		}
		if err := w.InsertNoTx(context.Background(), db, msgs); err != nil {
			t.Fatal(err)
		}
	}
	sentOn := func(db *sql.DB, prefix string) int {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM local_message WHERE msg_id LIKE ? AND status = 2", prefix+"-%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	insert(direct, "before", 10)
	testenv.Eventually(t, 30*time.Second, "the rows written before the failover sent", func() bool { return sentOn(direct, "before") == 10 })

	// The switch: the old primary goes read-only and stays up, the replica catches up and
	// is promoted, and the proxy sends new connections to it; the relay's stay on the old.
	old.exec(t, "SET GLOBAL read_only = 1")
	var pos string
	if err := old.root.QueryRow("SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	var caught int
	if err := standby.root.QueryRow("SELECT MASTER_GTID_WAIT(?, 20)", pos).Scan(&caught); err != nil || caught != 0 {
		t.Fatalf("the replica did not catch up with %s: %v (%d)", pos, err, caught)
	}
	standby.exec(t, "STOP SLAVE", "RESET SLAVE ALL")
	proxy.SetTarget(newAddr)
	switched := time.Now()

	primary, err := sql.Open("mysql", dsn(newAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	insert(primary, "after", 20)
	testenv.Eventually(t, 30*time.Second-time.Since(switched), "the 20 rows committed after the failover sent", func() bool {
		return sentOn(primary, "after") == 20
	})
	t.Logf("20 rows written after the failover sent %.1fs after it", time.Since(switched).Seconds())
	if n := broker.Count("orders"); n < 30 {
		t.Fatalf("the broker holds %d messages, want the 30 rows", n)
	}

	cancel() // SIGTERM
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not stop within 10 s of its shutdown")
	}
}
