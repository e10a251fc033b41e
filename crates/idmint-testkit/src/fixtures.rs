//! The peers' own database contents, as they ship them: what a Leaf or Tinyid shop's
//! database holds when idmint first meets it. Tests and the docs run load them into a fresh
//! database ([`crate::mysql::fresh_database_with`]), so each is written once.

/// Meituan Leaf's segment table (`leaf_alloc`, the DDL of Leaf's README) and the sample row
/// its README inserts: `leaf-segment-test`, `max_id` 1, `step` 2000.
pub const LEAF_DB_SQL: &str = r"
CREATE TABLE `leaf_alloc` (
  `biz_tag` varchar(128) NOT NULL DEFAULT '',
  `max_id` bigint(20) NOT NULL DEFAULT '1',
  `step` int(11) NOT NULL,
  `description` varchar(256) DEFAULT NULL,
  `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
  PRIMARY KEY (`biz_tag`)
) ENGINE=InnoDB;

INSERT INTO leaf_alloc(biz_tag, max_id, step, description)
VALUES ('leaf-segment-test', 1, 2000, 'Test leaf Segment Mode Get Id');
";

/// Didi Tinyid's `tinyid-server/db.sql`: its two tables and its sample rows, as Tinyid ships
/// them.
pub const TINYID_DB_SQL: &str = r"
CREATE TABLE `tiny_id_info` (
  `id` bigint(20) unsigned NOT NULL AUTO_INCREMENT,
  `biz_type` varchar(63) NOT NULL DEFAULT '',
  `begin_id` bigint(20) NOT NULL DEFAULT '0',
  `max_id` bigint(20) NOT NULL DEFAULT '0',
  `step` int(11) DEFAULT '0',
  `delta` int(11) NOT NULL DEFAULT '1',
  `remainder` int(11) NOT NULL DEFAULT '0',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  `version` bigint(20) NOT NULL DEFAULT '0',
  PRIMARY KEY (`id`),
  UNIQUE KEY `uniq_biz_type` (`biz_type`)
) ENGINE=InnoDB AUTO_INCREMENT=1 DEFAULT CHARSET=utf8;

CREATE TABLE `tiny_id_token` (
  `id` int(11) unsigned NOT NULL AUTO_INCREMENT,
  `token` varchar(255) NOT NULL DEFAULT '',
  `biz_type` varchar(63) NOT NULL DEFAULT '',
  `remark` varchar(255) NOT NULL DEFAULT '',
  `create_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  `update_time` timestamp NOT NULL DEFAULT '2010-01-01 00:00:00',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB AUTO_INCREMENT=1 DEFAULT CHARSET=utf8;

INSERT INTO `tiny_id_info` (`id`, `biz_type`, `begin_id`, `max_id`, `step`, `delta`, `remainder`, `create_time`, `update_time`, `version`)
VALUES (1, 'test', 1, 1, 100000, 1, 0, '2018-07-21 23:52:58', '2018-07-22 23:19:27', 1);
INSERT INTO `tiny_id_info` (`id`, `biz_type`, `begin_id`, `max_id`, `step`, `delta`, `remainder`, `create_time`, `update_time`, `version`)
VALUES (2, 'test_odd', 1, 1, 100000, 2, 1, '2018-07-21 23:52:58', '2018-07-23 00:39:24', 3);
INSERT INTO `tiny_id_token` (`id`, `token`, `biz_type`, `remark`, `create_time`, `update_time`)
VALUES (1, '0f673adf80504e2eaa552f5d791b644c', 'test', '1', '2017-12-14 16:36:46', '2017-12-14 16:36:48');
INSERT INTO `tiny_id_token` (`id`, `token`, `biz_type`, `remark`, `create_time`, `update_time`)
VALUES (2, '0f673adf80504e2eaa552f5d791b644c', 'test_odd', '1', '2017-12-14 16:36:46', '2017-12-14 16:36:48');
";
