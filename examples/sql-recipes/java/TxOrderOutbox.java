// SPDX-License-Identifier: Apache-2.0
// TxOrderOutbox writes orders on RocketMQ transactional messages from Java with the official
// client's TransactionMQProducer, in outbox-relay's "handed" mode: the outbox row is inserted
// with status 4 (the broker delivers it; the relay never sends it on its own) and the relay
// answers the broker's check-backs when every instance of the service is down
// (docs/transactional.md; docs/sql-recipes.md shows the part between the recipe markers). The
// test in internal/brokersuite runs it against Apache RocketMQ, halting the JVM between a
// commit and its END_TRANSACTION.
//
// Run: java -cp 'lib/*' TxOrderOutbox.java   (settings from RECIPE_* environment variables;
// RECIPE_ORDERS lists order:mode pairs, mode commit, rollback or halt; with RECIPE_AWAIT_GO set it
// prints "producer started" and waits for a line on its input before the first order)

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.HexFormat;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.Callable;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.impl.producer.DefaultMQProducerImpl;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class TxOrderOutbox {
    // recipe:start
    /** The producer: its group is one of the relay's rocketmq.transaction_check_groups. */
    static TransactionMQProducer newProducer(String checkGroup, String nameServer, String secret,
                                             Callable<Connection> checkConnections, List<String> topics)
            throws MQClientException, InterruptedException {
        TransactionMQProducer producer = new TransactionMQProducer(checkGroup);
        producer.setNamesrvAddr(nameServer);
        producer.setRetryTimesWhenSendFailed(0); // a retried half leaves an orphan the check would commit
        producer.setTransactionListener(new OutboxListener(checkConnections, secret));
        producer.start();
        if (!warm(producer, topics, 30_000)) {
            System.err.println("producer not warmed: the first half-send fetches its route itself");
        }
        return producer;
    }

    /**
     * Warms a started producer before it serves writes: fetches the topics' routes and connects
     * to their brokers (a heartbeat), which the client otherwise does on the first half-send,
     * within its 3 s send timeout, right after a deploy, when the machine is busiest. Tries for
     * at most maxMillis. Not setTopics(): start() then fails for good if the name server is late.
     */
    @SuppressWarnings("deprecation") // getDefaultMQProducerImpl: 5.x's only handle on the route table
    static boolean warm(TransactionMQProducer producer, List<String> topics, long maxMillis) throws InterruptedException {
        DefaultMQProducerImpl impl = producer.getDefaultMQProducerImpl();
        for (long end = System.currentTimeMillis() + maxMillis; System.currentTimeMillis() < end; Thread.sleep(200)) {
            try {
                for (String topic : topics) {
                    if (impl.isPublishTopicNeedUpdate(topic)) {
                        impl.getMqClientFactory().updateTopicRouteInfoFromNameServer(topic);
                    }
                }
                if (topics.stream().noneMatch(impl::isPublishTopicNeedUpdate)
                        && impl.getMqClientFactory().sendHeartbeatToAllBrokerWithLock()) {
                    return true; // else the client's own heartbeat held the lock: again
                }
            } catch (IllegalStateException e) {
                // the name server did not answer in time: ask again
            }
        }
        return false;
    }

    /** The business transaction after the half: the rest of it, then the commit. */
    static final class LocalTx {
        final Connection conn;
        final Runnable restOfTransaction;
        RuntimeException failure;
        boolean ended; // committed, rolled back, or its commit's outcome unknown

        LocalTx(Connection conn, Runnable restOfTransaction) {
            this.conn = conn;
            this.restOfTransaction = restOfTransaction;
        }

        LocalTransactionState run() {
            try {
                restOfTransaction.run(); // may throw: then neither row exists
                conn.commit();
                ended = true;
                return LocalTransactionState.COMMIT_MESSAGE;
            } catch (RuntimeException e) {
                failure = e;
            } catch (SQLException e) {
                failure = new IllegalStateException(e);
                if (e.getSQLState() == null || !e.getSQLState().startsWith("40")) {
                    ended = true;
                    return LocalTransactionState.UNKNOW; // the commit's outcome is unknown: the check decides
                }
            }
            try {
                conn.rollback();
            } catch (SQLException ignored) {
                // the connection is gone: so is the transaction
            }
            ended = true;
            return LocalTransactionState.ROLLBACK_MESSAGE;
        }
    }

    static final class OutboxListener implements TransactionListener {
        /** The END grace: the relay's default handed_end_grace, RocketMQ's transactionTimeOut. */
        static final long END_GRACE_MILLIS = 6_000;
        final Callable<Connection> checkConnections;
        final String secret;

        OutboxListener(Callable<Connection> checkConnections, String secret) {
            this.checkConnections = checkConnections;
            this.secret = secret;
        }

        @Override
        public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
            return ((LocalTx) arg).run();
        }

        /** A check-back: the decision table of docs/sql-recipes.md for handed rows. */
        @Override
        public LocalTransactionState checkLocalTransaction(MessageExt msg) {
            String msgId = msg.getUserProperty("OUTBOX_MSG_ID"), sig = msg.getUserProperty("OUTBOX_SIG");
            if (msgId == null || sig == null || !MessageDigest.isEqual(sig.getBytes(StandardCharsets.UTF_8),
                    sign(secret, "local_message", msgId, msg.getTopic()).getBytes(StandardCharsets.UTF_8))) {
                return LocalTransactionState.UNKNOW; // not a half this service signed: any producer can send one
            }
            try (Connection c = checkConnections.call();
                 PreparedStatement probe = c.prepareStatement(
                     "SELECT status, is_deleted, sent_time, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
                         + " FROM local_message WHERE msg_id = ? FOR UPDATE NOWAIT")) {
                c.setAutoCommit(true); // the probe's lock lasts for the statement only
                probe.setString(1, msgId);
                try (ResultSet row = probe.executeQuery()) {
                    if (row.next() && row.getInt(1) == 4 && row.getInt(2) == 0) {
                        // Committed, handed: deliver, but only an END grace after a check first found
                        // it committed (sent_time, stamped by the database's clock as the relay does):
                        // the writer's END may still be on its way, and both would store two copies.
                        long seen = row.getLong(3), now = row.getLong(4);
                        if (seen == 0) {
                            try (PreparedStatement stamp = c.prepareStatement(
                                    "UPDATE local_message SET sent_time = ? WHERE msg_id = ? AND status = 4 AND sent_time = 0")) {
                                stamp.setLong(1, now);
                                stamp.setString(2, msgId);
                                stamp.executeUpdate();
                            }
                            return LocalTransactionState.UNKNOW;
                        }
                        return now - seen < END_GRACE_MILLIS ? LocalTransactionState.UNKNOW : LocalTransactionState.COMMIT_MESSAGE;
                    }
                    // No row and no lock: rolled back (the row precedes the half). Status 2:
                    // delivered already; 0 or 1: the relay's; 3 or deleted: the operator's.
                    return LocalTransactionState.ROLLBACK_MESSAGE;
                }
            } catch (Exception e) {
                return LocalTransactionState.UNKNOW; // a lock conflict: the writer's transaction is open
            }
        }
    }

    /**
     * The half's signature (OUTBOX_SIG): hex HMAC-SHA256 under the secret shared with the
     * relays (rocketmq.transaction_check_secrets) of "outbox-half-v1", table, msg_id and
     * topic, each followed by a NUL byte. The relay acts only on halves signed so.
     */
    static String sign(String secret, String table, String msgId, String topic) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
            for (String part : new String[] {"outbox-half-v1", table, msgId, topic}) {
                mac.update(part.getBytes(StandardCharsets.UTF_8));
                mac.update((byte) 0);
            }
            return HexFormat.of().formatHex(mac.doFinal());
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(e);
        }
    }

    static void createOrder(TransactionMQProducer producer, String secret, Connection conn, String topic,
                            String orderNo, BigDecimal amount, Runnable restOfTransaction) throws SQLException {
        String msgId = UUID.randomUUID().toString();
        String body = "{\"orderNo\":\"" + orderNo + "\",\"amount\":\"" + amount + "\"}";
        conn.setAutoCommit(false);
        try (PreparedStatement order = conn.prepareStatement(
                 "INSERT INTO orders (order_no, amount) VALUES (?, ?)");
             PreparedStatement outbox = conn.prepareStatement(
                 "INSERT INTO local_message (msg_id, topic, tag, content, msg_keys, status, next_retry_time)"
                 + " VALUES (?, ?, ?, ?, ?, 4, ?)")) {
            order.setString(1, orderNo);
            order.setBigDecimal(2, amount);
            order.executeUpdate();
            // The row before the half, status 4 (handed): until the commit the transaction
            // holds its lock, which is how a check tells an open transaction from a rolled-back one.
            // next_retry_time is when it was handed: the purge finds old handed rows by it.
            outbox.setString(1, msgId);
            outbox.setString(2, topic);
            outbox.setString(3, "created");
            outbox.setString(4, body);
            outbox.setString(5, orderNo);
            outbox.setLong(6, System.currentTimeMillis());
            outbox.executeUpdate();
        } catch (SQLException | RuntimeException e) {
            conn.rollback();
            throw e;
        }
        Message msg = new Message(topic, "created", orderNo, body.getBytes(StandardCharsets.UTF_8));
        msg.putUserProperty("OUTBOX_MSG_ID", msgId);
        msg.putUserProperty("OUTBOX_TABLE", "local_message");
        msg.putUserProperty("OUTBOX_TX", "h"); // a handed row, inserted before its half
        msg.putUserProperty("OUTBOX_SIG", sign(secret, "local_message", msgId, topic)); // keys: msg_keys
        LocalTx tx = new LocalTx(conn, restOfTransaction);
        TransactionSendResult sent = null;
        String notStored = null;
        try {
            sent = producer.sendMessageInTransaction(msg, tx); // the half, then tx.run(), then END (one-way)
            notStored = sent.getSendStatus() == SendStatus.SEND_OK ? null : sent.getSendStatus().toString();
        } catch (MQClientException e) {
            notStored = e.getCause() == null ? e.getMessage() : e.getCause().toString(); // no half: handled below
        }
        if (notStored != null) {
            // The half was not stored (or not safely): the row becomes the relay's, status 0.
            System.err.println("order " + orderNo + ": half not stored, the relay will send the row: " + notStored);
            try (PreparedStatement relay = conn.prepareStatement("UPDATE local_message SET status = 0 WHERE msg_id = ?")) {
                relay.setString(1, msgId);
                relay.executeUpdate();
            }
            tx.run();
        }
        if (!tx.ended) { // an Error escaped the rest of the transaction: end it here
            conn.rollback();
            throw new IllegalStateException("order " + orderNo + ": the local transaction did not end");
        }
        if (tx.failure != null) {
            throw tx.failure;
        }
    }
    // recipe:end

    public static void main(String[] args) throws Exception {
        var env = System.getenv();
        String url = "jdbc:mariadb://" + env.get("RECIPE_MYSQL_HOST") + ":" + env.get("RECIPE_MYSQL_PORT") + "/"
            + env.get("RECIPE_MYSQL_DATABASE");
        String user = env.get("RECIPE_MYSQL_USER"), password = env.get("RECIPE_MYSQL_PASSWORD");
        TransactionMQProducer producer = newProducer(env.get("RECIPE_GROUP"), env.get("RECIPE_NAMESRV"), env.get("RECIPE_SECRET"),
            () -> DriverManager.getConnection(url, user, password), List.of(env.get("RECIPE_TOPIC")));
        if (env.get("RECIPE_AWAIT_GO") != null) { // the test looks at the broker before the first order
            System.out.println("producer started");
            System.out.flush();
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
        }
        // The test's fault: halt the JVM right after the commit, before the client sends END.
        TransactionListener recipe = producer.getTransactionListener();
        String[] halting = {null};
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                LocalTransactionState s = recipe.executeLocalTransaction(msg, arg);
                if (msg.getKeys().equals(halting[0]) && s == LocalTransactionState.COMMIT_MESSAGE) {
                    System.out.println("halting after the commit of " + msg.getKeys());
                    System.out.flush();
                    Runtime.getRuntime().halt(3);
                }
                return s;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                return recipe.checkLocalTransaction(msg);
            }
        });
        try (Connection conn = DriverManager.getConnection(url, user, password)) {
            for (String item : env.get("RECIPE_ORDERS").split(",")) {
                String orderNo = item.split(":")[0], mode = item.split(":")[1];
                halting[0] = mode.equals("halt") ? orderNo : null;
                try {
                    createOrder(producer, env.get("RECIPE_SECRET"), conn, env.get("RECIPE_TOPIC"), orderNo, new BigDecimal("7.50"), () -> {
                        if (mode.equals("rollback")) throw new IllegalStateException("payment declined for " + orderNo);
                    });
                    System.out.println("committed " + orderNo);
                } catch (IllegalStateException e) {
                    System.out.println("rolled back " + orderNo);
                }
            }
        }
        producer.shutdown();
        System.out.println("done");
    }
}
