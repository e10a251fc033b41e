//! The PostgreSQL backend's [`TagMetaStore`](crate::TagMetaStore), written in `sql/meta.rs`,
//! and its table, created under an advisory lock so nodes starting together do not race.
//! `varchar` compares exactly under PostgreSQL's deterministic collations (equal only when the
//! bytes are).

use idmint_core::limits::TAG_LEN_MAX;

use super::PgStore;
use crate::TAG_META_TABLE;
use crate::meta::{META_NAME_LEN_MAX, META_VALUE_LEN_MAX};

crate::sql::tag_meta_store!(PgStore);

/// The metadata table.
pub(crate) fn meta_ddl() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {TAG_META_TABLE} (
            tag   varchar({TAG_LEN_MAX}) NOT NULL,
            name  varchar({META_NAME_LEN_MAX}) NOT NULL,
            value varchar({META_VALUE_LEN_MAX}) NOT NULL,
            PRIMARY KEY (tag, name)
        )"
    )
}
