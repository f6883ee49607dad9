// SPDX-License-Identifier: Apache-2.0
// OrderOutbox writes orders and their outbox rows from Java with plain JDBC, as
// docs/sql-recipes.md shows (the part between the recipe markers is the doc's code). The
// test in internal/brokersuite runs it against MariaDB and checks what the relay delivers.
//
// Run: java -cp 'lib/*' OrderOutbox.java   (settings from RECIPE_* environment variables)

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.UUID;

public class OrderOutbox {
    // recipe:start
    static void createOrder(Connection conn, String topic, String orderNo, BigDecimal amount,
                            Runnable restOfTransaction) throws SQLException {
        conn.setAutoCommit(false);
        try (PreparedStatement order = conn.prepareStatement(
                 "INSERT INTO orders (order_no, amount) VALUES (?, ?)");
             PreparedStatement outbox = conn.prepareStatement(
                 "INSERT INTO local_message (msg_id, topic, tag, content, msg_keys) VALUES (?, ?, ?, ?, ?)")) {
            order.setString(1, orderNo);
            order.setBigDecimal(2, amount);
            order.executeUpdate();

            outbox.setString(1, UUID.randomUUID().toString());
            outbox.setString(2, topic);
            outbox.setString(3, "created"); // the event: tag + keys identify it
            outbox.setString(4, "{\"orderNo\":\"" + orderNo + "\",\"amount\":\"" + amount + "\"}");
            outbox.setString(5, orderNo); // consumers dedupe on the order number
            outbox.executeUpdate();

            restOfTransaction.run(); // may throw: then neither row exists
            conn.commit();
        } catch (SQLException | RuntimeException e) {
            conn.rollback();
            throw e;
        }
    }
    // recipe:end

    public static void main(String[] args) throws Exception {
        String url = "jdbc:mariadb://" + System.getenv("RECIPE_MYSQL_HOST") + ":" + System.getenv("RECIPE_MYSQL_PORT")
            + "/" + System.getenv("RECIPE_MYSQL_DATABASE");
        String topic = System.getenv("RECIPE_TOPIC");
        String prefix = System.getenv("RECIPE_ORDER_PREFIX");
        int orders = Integer.parseInt(System.getenv("RECIPE_ORDERS"));
        int rollbackEvery = Integer.parseInt(System.getenv("RECIPE_ROLLBACK_EVERY"));
        try (Connection conn = DriverManager.getConnection(url, System.getenv("RECIPE_MYSQL_USER"), System.getenv("RECIPE_MYSQL_PASSWORD"))) {
            for (int i = 0; i < orders; i++) {
                String orderNo = prefix + i;
                boolean fail = i % rollbackEvery == rollbackEvery - 1;
                try {
                    createOrder(conn, topic, orderNo, new BigDecimal(i + ".50"), () -> {
                        if (fail) throw new IllegalStateException("payment declined for " + orderNo);
                    });
                } catch (IllegalStateException e) {
                    // rolled back on purpose
                }
            }
        }
    }
}
