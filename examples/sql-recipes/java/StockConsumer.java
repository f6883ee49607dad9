// SPDX-License-Identifier: Apache-2.0
// StockConsumer applies each outbox event exactly once from Java: a RocketMQ push consumer
// whose effect and dedupe row commit in one JDBC transaction, in the same dedupe table and
// with the same identity as the Go idempotency.SQLGuard (docs/sql-recipes.md shows the part
// between the recipe markers). The test in internal/brokersuite runs it against Apache
// RocketMQ beside the Python and Go consumers of the same group.
//
// Run: java -cp 'lib/*' StockConsumer.java   (settings from RECIPE_* environment variables)

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.concurrent.CountDownLatch;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public class StockConsumer {
    // recipe:start
    /** The event's identity, as outbox-relay's Go consumers compute it: "topic:tag:keys". */
    static String identity(MessageExt msg) {
        String keys = msg.getKeys() == null ? "" : String.join(" ", msg.getKeys().trim().split("\\s+"));
        if (keys.isEmpty()) {
            throw new IllegalArgumentException("message " + msg.getMsgId() + " has no keys");
        }
        String tag = msg.getTags() == null ? "" : msg.getTags(); // an empty tag arrives as null
        String id = msg.getTopic() + ":" + tag.replace("\\", "\\\\").replace(":", "\\:") + ":" + keys;
        byte[] b = id.getBytes(StandardCharsets.UTF_8);
        if (b.length <= 255) {
            return id;
        }
        try { // longer identities are stored as "h:" + SHA-256 in hex
            StringBuilder h = new StringBuilder("h:");
            for (byte x : MessageDigest.getInstance("SHA-256").digest(b)) {
                h.append(String.format("%02x", x));
            }
            return h.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    interface Effect { void apply(Connection tx) throws SQLException; }

    /** Applies effect once per event and consumer group; false when it was applied before. */
    static boolean applyOnce(Connection conn, String group, MessageExt msg, Effect effect) throws SQLException {
        conn.setAutoCommit(false);
        try (PreparedStatement dedupe = conn.prepareStatement(
                 "INSERT INTO stock_dedupe (consumer_group, dedupe_key) VALUES (?, ?)")) {
            dedupe.setBytes(1, group.getBytes(StandardCharsets.UTF_8));
            dedupe.setBytes(2, identity(msg).getBytes(StandardCharsets.UTF_8));
            try {
                dedupe.executeUpdate(); // waits while another consumer's transaction holds the row
            } catch (SQLException e) {
                if (e.getErrorCode() != 1062) { // ER_DUP_ENTRY: applied before, skip it
                    throw e;
                }
                conn.rollback();
                return false;
            }
            effect.apply(conn);
            conn.commit();
            return true;
        } catch (SQLException | RuntimeException e) {
            conn.rollback(); // the broker redelivers: RECONSUME_LATER
            throw e;
        }
    }
    // recipe:end

    public static void main(String[] args) throws Exception {
        var env = System.getenv();
        String group = env.get("RECIPE_GROUP");
        String url = "jdbc:mariadb://" + env.get("RECIPE_MYSQL_HOST") + ":" + env.get("RECIPE_MYSQL_PORT") + "/"
            + env.get("RECIPE_MYSQL_DATABASE");
        Connection conn = DriverManager.getConnection(url, env.get("RECIPE_MYSQL_USER"), env.get("RECIPE_MYSQL_PASSWORD"));

        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(env.get("RECIPE_NAMESRV"));
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeThreadMin(1);
        consumer.setConsumeThreadMax(1); // one JDBC connection: one message at a time
        consumer.setConsumeMessageBatchMaxSize(1);
        consumer.subscribe(env.get("RECIPE_TOPIC"), "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt msg : msgs) {
                try {
                    String id = identity(msg);
                    boolean applied = applyOnce(conn, group, msg, tx -> {
                        try (PreparedStatement effect = tx.prepareStatement(
                                 "INSERT INTO stock_applied (identity, consumer) VALUES (?, 'java')")) {
                            effect.setString(1, id);
                            effect.executeUpdate();
                        }
                    });
                    System.out.println((applied ? "applied " : "duplicate ") + id);
                } catch (Exception e) {
                    System.out.println("failed " + msg.getMsgId() + ": " + e);
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        System.out.println("started");
        CountDownLatch stop = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> { consumer.shutdown(); stop.countDown(); }));
        stop.await();
    }
}
