CREATE TABLE IF NOT EXISTS {{TABLE}} (
  `consumer_group` varbinary(128) NOT NULL COMMENT 'consumer group: groups sharing the table never see each other''s keys',
  `dedupe_key` varbinary(255) NOT NULL COMMENT 'idempotency key, usually the order number; compared byte for byte',
  `created_at` datetime(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) COMMENT 'when the effect committed; for purging',
  `fingerprint` varbinary(64) NULL COMMENT 'digest of the first delivery''s body, to tell a distinct event sharing the key from a redelivery; NULL when the writer kept none',
  PRIMARY KEY (`consumer_group`, `dedupe_key`),
  KEY `idx_created_at` (`created_at`)
) ENGINE=InnoDB COMMENT='outbox-relay consumer dedupe table: one row per message applied'
