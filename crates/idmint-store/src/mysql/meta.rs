//! The MySQL / MariaDB backend's [`TagMetaStore`](crate::TagMetaStore), written in
//! `sql/meta.rs`, and its table: InnoDB, `utf8mb4_bin`, so tags and names compare byte for byte;
//! values are compared as bytes (`CAST(… AS BINARY)`: `utf8mb4_bin` pads with spaces, so `'a'`
//! would equal `'a '`).

use idmint_core::limits::TAG_LEN_MAX;

use super::MySqlStore;
use crate::TAG_META_TABLE;
use crate::meta::{META_NAME_LEN_MAX, META_VALUE_LEN_MAX};

crate::sql::tag_meta_store!(MySqlStore);

/// The metadata table.
pub(crate) fn meta_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {TAG_META_TABLE} (\
         tag varchar({TAG_LEN_MAX}) NOT NULL, \
         name varchar({META_NAME_LEN_MAX}) NOT NULL, \
         value varchar({META_VALUE_LEN_MAX}) NOT NULL, \
         PRIMARY KEY (tag, name)\
         ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    )
}
