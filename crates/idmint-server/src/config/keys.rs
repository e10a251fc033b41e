//! Every plain key of the configuration, described once.
//!
//! A key is one line of a [`keys!`] table below: its doc comment, its name, its type, its
//! default and, for the top-level keys, its command-line flag. From that line come the field
//! of the file section (`FileConfig`, `SegmentSection`, …: what the file may hold), its
//! environment variable ([`env_var`](super::env_var) of the dotted name), its flag (a field of
//! [`Overrides`]), its origin and its line in the printed effective configuration (the section
//! is printed as serde writes it, each key with the origin [`Layers`] recorded), and its
//! resolved value with that origin (a field of a `…Keys` struct). What a value
//! means and how it is checked is the section's resolver's business (`sections.rs`), which
//! reads it from that struct.
//!
//! The keys of a `[format.TAG]` section are here too, in the form for tables under a name:
//! file keys only (no variable, no flag), each with a default or, without one, an origin only
//! when set; `format.rs` resolves them. The keys of `[auth]` are not: the admin token has a
//! variable of its own (`IDMINT_ADMIN_TOKEN`) and a client's token the variable its file
//! names, so `auth.rs` declares and resolves them.

use std::collections::BTreeMap;

use idmint::format::limits::TEMPLATE_DEFAULT;
use idmint::snowflake::limits::{
    CACHED_MAX_AGE_MS_DEFAULT, CACHED_MAX_LEAD_MS_DEFAULT, CACHED_RING_CAPACITY_DEFAULT,
    LEASE_MARGIN_MS_DEFAULT, LEASE_TTL_MS_DEFAULT, TIME_WINDOW_MS_DEFAULT, TOLERANCE_MS_DEFAULT,
};
use idmint::snowflake::{Layout, TimeUnit, UtcMs};
use idmint::tinyid::{BATCH_SIZE_MAX_DEFAULT, TOKEN_REFRESH_MS_DEFAULT};
use idmint_core::limits::{
    BATCH_COUNT_MAX, REFILL_WAIT_MS_DEFAULT, SEGMENT_DURATION_S_DEFAULT,
    STORE_CALL_TIMEOUT_MS_DEFAULT, TAG_REFRESH_MS_DEFAULT,
};
use idmint_store::DEFAULT_STORE_URL;
use serde::{Deserialize, Serialize};

use super::auth::AuthSection;
use super::origins::{FileSource, Layers, Origin, Sourced, flag};
use super::secret::{Secret, SecretUrl};
use crate::limits::HttpLimits;

/// The address `idmint serve` listens on by default: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// `ready_engines` by default: the engines the configuration uses explicitly.
pub const READY_ENGINES_AUTO: &str = "auto";

/// The node's own directory by default: the SQLite store's file (by default) and the
/// high-water marks of the store-regression guard.
pub const DEFAULT_DATA_DIR: &str = "./idmint-data";

/// Declares a table of keys: the file section (every key an `Option`, unknown keys refused),
/// and for each group of its keys the struct of resolved keys (each a [`Sourced`] value)
/// and the method that resolves them in the order written (flag > variable > file >
/// default) and fills the section with the result, so the effective configuration holds
/// every key. A default may use the keys above it (`connections_max.value`). A section is
/// one group unless its keys are resolved at different points of [`Settings::resolve`]
/// (`[limits]`: the batch bound early, the HTTP limits late), which fixes the order in
/// which problems are reported.
///
/// The top-level form also declares the flags' struct ([`Overrides`]), one field per key
/// with a `flag`, and the file's fields that are not keys (sections, the source). The form
/// `under a name` declares the table of each `[format.NAME]`: file keys only, resolved under
/// the name given to its method.
///
/// [`Settings::resolve`]: super::Settings::resolve
macro_rules! keys {
    (
        $(#[$meta:meta])*
        pub struct $section:ident => $keys:ident {
            $(
                $(#[doc = $doc:literal])*
                $field:ident: $ty:ty = $default:expr $(, flag $flag:literal)?;
            )*
        }
        $(#[$ometa:meta])*
        pub struct $overrides:ident for the flags above;
        sections {
            $(
                $(#[$smeta:meta])*
                $svis:vis $sfield:ident: $sty:ty,
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default, Clone, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        pub struct $section {
            $( $(#[doc = $doc])* pub $field: Option<$ty>, )*
            $( $(#[$smeta])* $svis $sfield: $sty, )*
        }

        $(#[$ometa])*
        #[derive(Debug, Default, Clone)]
        pub struct $overrides {
            $( $( #[doc = concat!("`", $flag, "`.")] pub $field: Option<String>, )? )*
        }

        keys!(@resolved $section => $keys $( $field: $ty )*);

        impl $section {
            /// The keys of the table, as written in a file.
            pub(super) const KEYS: &'static [&'static str] = &[$( stringify!($field), )*];

            /// The keys that have a flag, and their flags.
            pub(super) const FLAGS: &'static [(&'static str, &'static str)] =
                &[$( $( (stringify!($field), $flag), )? )*];

            /// Resolves every key of the table (flag > variable > file > default), in the
            /// order written, and sets each to its value, so the table holds every key.
            pub(super) fn layer(&mut self, l: &mut Layers<'_>, flags: &$overrides) -> $keys {
                $(
                    let $field = l.layer(
                        stringify!($field),
                        keys!(@flag flags, $field $(, $flag)?),
                        &mut self.$field,
                        $default,
                    );
                )*
                $keys { $( $field, )* }
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $section:ident in $prefix:literal {
            $(
                $(#[$gmeta:meta])*
                keys $keys:ident by $layer:ident {
                    $(
                        $(#[doc = $doc:literal])*
                        $field:ident: $ty:ty = $default:expr;
                    )*
                }
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default, Clone, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        pub struct $section {
            $( $( $(#[doc = $doc])* pub $field: Option<$ty>, )* )*
        }

        $( keys!(@resolved $section => $keys $( $field: $ty )*); )*

        impl $section {
            /// The keys of the section, dotted (`segment.refill_wait_ms`).
            pub(super) const KEYS: &'static [&'static str] =
                &[$( $( concat!($prefix, ".", stringify!($field)), )* )*];

            $(
                $(#[$gmeta])*
                ///
                /// Resolves these keys (variable > file > default), in the order written, and
                /// sets each to its value, so the section holds every key.
                pub(super) fn $layer(&mut self, l: &mut Layers<'_>) -> $keys {
                    $(
                        let $field = l.layer(
                            concat!($prefix, ".", stringify!($field)),
                            None,
                            &mut self.$field,
                            $default,
                        );
                    )*
                    $keys { $( $field, )* }
                }
            )*
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $section:ident under a name {
            $(#[$gmeta:meta])*
            keys $keys:ident by $layer:ident {
                $(
                    $(#[$fmeta:meta])*
                    $field:ident: $ty:ty $(= $default:expr)?;
                )*
            }
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default, Clone, Deserialize, Serialize)]
        #[serde(deny_unknown_fields)]
        pub struct $section {
            $( $(#[$fmeta])* pub $field: Option<$ty>, )*
        }

        #[doc = concat!("Keys of [`", stringify!($section), "`] resolved, each with its origin.")]
        pub(super) struct $keys {
            $(
                #[doc = concat!("`", stringify!($field), "`.")]
                pub(super) $field: keys!(@file_ty $ty $(, $default)?),
            )*
        }

        impl $section {
            $(#[$gmeta])*
            ///
            /// Resolves these keys of the section named `prefix` (`format.order`): the file's
            /// value or the default; a key without a default has an origin only when set.
            pub(super) fn $layer(&mut self, l: &mut Layers<'_>, prefix: &str) -> $keys {
                $(
                    let key = format!("{prefix}.{}", stringify!($field));
                    let $field = keys!(@file_layer l, key, self.$field $(, $default)?);
                )*
                $keys { $( $field, )* }
            }
        }
    };
    (@resolved $section:ident => $keys:ident $( $field:ident: $ty:ty )*) => {
        #[doc = concat!("Keys of [`", stringify!($section), "`] resolved, each with its origin.")]
        pub(super) struct $keys {
            $(
                #[doc = concat!("`", stringify!($field), "`.")]
                pub(super) $field: Sourced<$ty>,
            )*
        }

        impl $keys {
            /// Whether any key was set (by a flag, a variable or the file): every key of the
            /// table, so a key added to it is counted.
            #[allow(dead_code, reason = "asked of the `[snowflake]` keys only")]
            pub(super) fn any_set(&self) -> bool {
                [$( &self.$field.origin, )*].into_iter().any(|origin| *origin != Origin::Default)
            }
        }
    };
    (@file_ty $ty:ty) => { Sourced<Option<$ty>> };
    (@file_ty $ty:ty, $default:expr) => { Sourced<$ty> };
    (@file_layer $l:ident, $key:ident, $slot:expr) => {
        Sourced { value: $slot.clone(), origin: $l.optional(&$key, &$slot) }
    };
    (@file_layer $l:ident, $key:ident, $slot:expr, $default:expr) => {
        $l.file_only(&$key, &mut $slot, $default)
    };
    (@flag $flags:ident, $field:ident) => { None };
    (@flag $flags:ident, $field:ident, $flag:literal) => { flag(&$flags.$field, $flag) };
}

keys! {
    /// The config file as written; every key optional, unknown keys refused.
    pub struct FileConfig => TopKeys {
        /// `listen`: address and port to serve HTTP on.
        listen: String = DEFAULT_LISTEN.to_string(), flag "--listen";
        /// `grpc_listen`: address and port to serve gRPC on; empty (the default) serves gRPC on
        /// the HTTP port.
        grpc_listen: String = String::new(), flag "--grpc-listen";
        /// `store`: store URL (may hold a password).
        store: SecretUrl = SecretUrl::new(DEFAULT_STORE_URL), flag "--store";
        /// `redis`: the Redis that serves sequences (`redis://HOST:PORT[/DB][?prefix=P]`); empty
        /// means none.
        redis: SecretUrl = SecretUrl::default(), flag "--redis";
        /// `witness`: a second, independent store (SQL or Redis with an append-only file)
        /// every allocation's end is raised in before its range is served; empty means none.
        witness: SecretUrl = SecretUrl::default(), flag "--witness";
        /// `data_dir`: this node's directory (high-water marks; one node per directory).
        data_dir: String = DEFAULT_DATA_DIR.to_string(), flag "--data-dir";
        /// `ready_engines`: the engines `/ready` and gRPC health wait for, `auto` or a list
        /// of `segment`, `snowflake`, `tinyid`, `sequences` (see `sections::ready_engines`).
        ready_engines: String = READY_ENGINES_AUTO.to_string();
    }
    /// Values given as command-line flags (highest precedence).
    pub struct Overrides for the flags above;
    sections {
        /// `[segment]`: segment serving.
        #[serde(default)]
        pub segment: SegmentSection,
        /// `[limits]`: request limits.
        #[serde(default)]
        pub limits: LimitsSection,
        /// `[snowflake]`: the snowflake generator.
        #[serde(default)]
        pub snowflake: SnowflakeSection,
        /// `[format.TAG]`: public id formats of segment tags, by tag.
        #[serde(default)]
        pub format: BTreeMap<String, FormatSection>,
        /// `[auth]`: the admin token and client tokens.
        #[serde(default)]
        pub auth: AuthSection,
        /// `[tinyid]`: Didi Tinyid's routes on a Tinyid database.
        #[serde(default)]
        pub tinyid: TinyidSection,
        /// `[strict]`: strict tags and the timestamp oracle.
        #[serde(default)]
        pub strict: StrictSection,
        /// Which file the keys came from and on which lines, for messages; not a key.
        #[serde(skip)]
        pub(super) source: FileSource,
    }
}

keys! {
    /// The `[snowflake]` section.
    pub struct SnowflakeSection in "snowflake" {
        /// The snowflake generator and its ring.
        keys SnowflakeKeys by layer {
            /// Whether the node serves snowflake ids.
            enabled: bool = true;
            /// A preset: `snowflake`, `sonyflake`, `uid`, `js-safe`; the five keys below start
            /// from its fields and may change any of them.
            layout: String = "snowflake".to_string();
            /// Bits of the time field (default: the preset's).
            time_bits: u64 = u64::from(preset_or_default(&layout.value).time_bits());
            /// Bits of the worker field (default: the preset's).
            worker_bits: u64 = u64::from(preset_or_default(&layout.value).worker_bits());
            /// Bits of the sequence field (default: the preset's).
            sequence_bits: u64 = u64::from(preset_or_default(&layout.value).sequence_bits());
            /// One step of the time field: `ms`, `10ms` or `s` (default: the preset's).
            time_unit: String = preset_or_default(&layout.value).unit().label().to_string();
            /// Where time starts, UTC: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SS[.mmm]Z`, or ms since
            /// 1970 (default: the preset's).
            epoch: String = UtcMs(preset_or_default(&layout.value).epoch_ms()).to_string();
            /// `lease`, `store-assigned`, `ordinal` or `static:N`.
            worker: String = "lease".to_string();
            /// The worker ids this node may use, `LOW-HIGH` (e.g. `512-1023`), so Leaf or
            /// uid-generator nodes beside it keep the others; empty: every id of the layout.
            worker_ids: String = String::new();
            /// A clock step back up to this is waited out, in ms.
            tolerance_ms: u64 = TOLERANCE_MS_DEFAULT;
            /// Borrowed time: run at most this far ahead of the clock instead of waiting, in ms
            /// (0: never borrow).
            borrow_max_lead_ms: u64 = 0;
            /// Sequence vibration: a new unit's first sequence cycles `0..=max_vibration`
            /// (default: 255 with 12 or more sequence bits, so `id % N` is even for N | 256).
            max_vibration: u64 = vibration_default(sequence_bits.value);
            /// How far ahead of the clock the time mark is persisted, in ms.
            time_window_ms: u64 = TIME_WINDOW_MS_DEFAULT;
            /// Worker-lease TTL, in ms.
            lease_ttl_ms: u64 = LEASE_TTL_MS_DEFAULT;
            /// Wait after a lease expired before its worker id may be reused, in ms.
            lease_margin_ms: u64 = LEASE_MARGIN_MS_DEFAULT;
            /// Refuse (rather than warn about) a layout whose time runs out within 10 years.
            refuse_expiring: bool = false;
            /// Serve snowflake ids from a ring of pre-made ids on borrowed time (uid-generator's
            /// CachedUidGenerator).
            cached: bool = false;
            /// Ring capacity in ids (a power of two holding one whole time unit).
            ring_capacity: u64 = CACHED_RING_CAPACITY_DEFAULT;
            /// How far the ring's borrowed time may run ahead of the clock, in ms.
            ring_max_lead_ms: u64 = CACHED_MAX_LEAD_MS_DEFAULT;
            /// How far a ring id's time may lie before the clock when it is handed out, in ms.
            ring_max_age_ms: u64 = CACHED_MAX_AGE_MS_DEFAULT;
        }
    }
}

keys! {
    /// The `[tinyid]` section.
    pub struct TinyidSection in "tinyid" {
        /// Didi Tinyid's routes.
        keys TinyidKeys by layer {
            /// Whether the node serves Tinyid's routes (`/tinyid/id/*`) from a Tinyid database.
            enabled: bool = false;
            /// The Tinyid database (`mysql://…`, may hold a password); empty: the main store.
            store: SecretUrl = SecretUrl::default();
            /// How often `tiny_id_token` is reread, in ms (1 000 to 3 600 000).
            token_refresh_ms: u64 = TOKEN_REFRESH_MS_DEFAULT;
            /// Largest `batchSize`; a larger one is cut to it, as Tinyid's `batch.size.max`.
            batch_size_max: u64 = BATCH_SIZE_MAX_DEFAULT;
        }
    }
}

keys! {
    /// The `[strict]` section.
    pub struct StrictSection in "strict" {
        /// Strict tags and the timestamp oracle.
        keys StrictKeys by layer {
            /// **Unsafe**: an owner that can no longer prove its lease keeps serving from its
            /// window, which breaks real-time order (the chaos suite's control); never set it.
            unsafe_ignore_lease_loss: bool = false;
        }
    }
}

keys! {
    /// The `[segment]` section.
    pub struct SegmentSection in "segment" {
        /// Segment serving.
        keys SegmentKeys by layer {
            /// Share of a segment used before the next one is requested, in (0, 1].
            preload_ratio: f64 = 0.1;
            /// How long a request waits for a refill when both segments are spent, in ms.
            refill_wait_ms: u64 = REFILL_WAIT_MS_DEFAULT;
            /// Bound on one store call, in ms.
            store_call_timeout_ms: u64 = STORE_CALL_TIMEOUT_MS_DEFAULT;
            /// How often tags deleted from the store are dropped, in ms.
            tag_refresh_ms: u64 = TAG_REFRESH_MS_DEFAULT;
            /// How long one segment should last at the forecast rate, in seconds.
            segment_duration_s: u64 = SEGMENT_DURATION_S_DEFAULT;
            /// Whether the step follows the consumption rate (else: always the tag's step).
            adaptive_step: bool = true;
        }
    }
}

keys! {
    /// The `[limits]` section.
    pub struct LimitsSection in "limits" {
        /// The largest batch, resolved with the segment keys (before the addresses are
        /// checked, so its problems are reported in that order).
        keys BatchKeys by layer_batch {
            /// Largest `count` of a batch request (at most 100 000).
            batch_count_max: u64 = BATCH_COUNT_MAX;
        }
        /// The HTTP limits, resolved with the other tables (after the addresses are
        /// checked).
        keys HttpLimitKeys by layer_http {
            /// Requests one client address may have in flight (at most 1 024).
            client_in_flight_max: u64 = u64::from(HttpLimits::default().client_in_flight_max);
            /// How long one request may take, in ms (100 to 60 000).
            request_timeout_ms: u64 = HttpLimits::default().request_timeout_ms;
            /// How long a connection may stay without a byte read or written, and how long a
            /// request may take to arrive, in ms (above the request timeout, at most 600 000).
            idle_timeout_ms: u64 = HttpLimits::default().idle_timeout_ms;
            /// Connections open at once (at most 65 536).
            connections_max: u64 = HttpLimits::default().connections_max as u64;
            /// Connections one client address may hold open at once (at most 4 096, and at most
            /// `connections_max`).
            // The default never exceeds the total: a node configured for fewer connections than
            // the default cap per address keeps working, its cap the total.
            client_connections_max: u64 =
                (HttpLimits::default().client_connections_max as u64).min(connections_max.value);
            /// Tags with series of their own in `/metrics`, the busiest (at most 1 000; 0 sums
            /// every tag into `tag="(other)"`).
            metrics_tags_max: u64 = HttpLimits::default().metrics_tags_max as u64;
        }
    }
}

keys! {
    /// A `[format.TAG]` section: how the tag's ids are shown to clients.
    pub struct FormatSection under a name {
        /// Template, time zone, permutation and whether a key change is forced; file keys
        /// only (a key's variable is named by `key_env`).
        keys FormatKeys by layer {
            /// Output template, e.g. `ORD-{date:%Y%m%d}-{id:base36:8}` (default `{id}`).
            template: String = TEMPLATE_DEFAULT.to_string();
            /// Time zone of `{date}`: `UTC`, `+08:00` or an IANA name (default UTC).
            time_zone: String = "UTC".to_string();
            /// The permutation key, 32 hex digits. Prefer `key_env`: a key in a file is easier to
            /// leak.
            #[serde(skip_serializing_if = "Option::is_none")]
            key: Secret;
            /// The name of an environment variable holding the key.
            #[serde(skip_serializing_if = "Option::is_none")]
            key_env: String;
            /// Width of the permuted public ids in bits (16 to 63); required with a key.
            #[serde(skip_serializing_if = "Option::is_none")]
            bits: u32;
            /// Serve under a key other than the one recorded for the tag (or a first key on a tag
            /// that already allocated ids). Only for tags whose ids were never published.
            force_key_change: bool = false;
        }
    }
}

/// The dotted name of every plain key: the keys that have a variable ([`env_var`] of the
/// name), all but those of `[format.TAG]` and `[auth]`.
///
/// [`env_var`]: super::env_var
pub(super) fn plain_keys() -> impl Iterator<Item = &'static str> {
    [
        FileConfig::KEYS,
        SegmentSection::KEYS,
        LimitsSection::KEYS,
        SnowflakeSection::KEYS,
        TinyidSection::KEYS,
        StrictSection::KEYS,
    ]
    .into_iter()
    .flatten()
    .copied()
}

/// Every key that has a flag of `idmint serve` (and `idmint config check`), and the flag:
/// `("listen", "--listen")`, ….
pub const FLAG_KEYS: &[(&str, &str)] = FileConfig::FLAGS;

/// The preset `name`, or `snowflake` when there is none (its error is reported once, by the
/// `layout` key): the defaults of the layout's field keys.
fn preset_or_default(name: &str) -> Layout {
    Layout::preset(name).unwrap_or(idmint_core::snowflake::PRESETS[0].1)
}

/// The default `snowflake.max_vibration` for `sequence_bits` bits (see
/// `Layout::vibration_default`); 0 for a width no layout accepts (refused elsewhere).
fn vibration_default(sequence_bits: u64) -> u64 {
    u32::try_from(sequence_bits)
        .ok()
        .and_then(|bits| Layout::new(1, 0, bits, TimeUnit::Millis, 0).ok())
        .map_or(0, |layout| layout.vibration_default())
}
