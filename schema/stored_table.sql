CREATE TABLE IF NOT EXISTS {{TABLE}} (
  `seq` bigint NOT NULL AUTO_INCREMENT COMMENT 'order of appending',
  `settled_time` bigint NOT NULL COMMENT 'epoch ms (database clock) of the write-back that marked these rows sent: their next_retry_time then',
  `first_id` bigint NOT NULL COMMENT 'lowest outbox row id of the entry',
  `last_id` bigint NOT NULL COMMENT 'highest outbox row id of the entry',
  `row_count` int NOT NULL COMMENT 'rows in positions',
  `positions` mediumblob NOT NULL COMMENT 'where the broker stored each row (outbox-relay storedlog format)',
  `audited_time` bigint NOT NULL DEFAULT 0 COMMENT 'epoch ms the broker audit finished this entry; 0: not yet',
  PRIMARY KEY (`seq`),
  KEY `idx_audit` (`audited_time`, `settled_time`),
  KEY `idx_settled` (`settled_time`)
) ENGINE=InnoDB COMMENT='outbox-relay stored-position journal: where the broker stored each sent row, for the broker audit'
