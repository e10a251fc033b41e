//! The configuration's tests: precedence, every problem at once with its origin, secrets
//! never shown, the effective configuration, and every key documented.

use std::collections::HashMap;
use std::path::Path;

use idmint::snowflake::{CachedConfig, WorkerIdSource};
use idmint_core::limits::BATCH_COUNT_MAX;

use super::origins::Origin;
use super::*;

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> =
        vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| map.get(name).cloned()
}

#[test]
fn tokens_are_checked_but_never_quoted_back() {
    let secret = "hunter2-hunter2-hunter2";
    for text in [
        format!("[auth]\nadmin_token = \"{secret}"),
        format!("[auth]\nadmin_token = \"{secret}\" nonsense"),
        format!("[auth.clients.shop]\ntoken = \"{secret}\"\ntags = 5\n"),
        // Unquoted: the "quote it" hint names the key, never the value.
        format!("[auth]\nadmin_token = {secret}\n"),
        format!("[auth.clients.shop]\ntoken = {secret}\n"),
        format!("store = mysql://root:{secret}@db:3306/ids\n"),
        format!("listen = x{secret}@y\n"),
    ] {
        let error = FileConfig::parse(&text, "t.toml").unwrap_err().to_string();
        assert!(!error.contains("hunter2"), "{error}");
    }
    let text = format!("[auth]\nadmin_token = \"{secret}\"");
    let file = FileConfig::parse(&text, "t.toml").unwrap();
    assert!(!format!("{file:?}").contains("hunter2"));
    let settings = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap();
    assert!(settings.auth.has_admin_token());
    assert!(!format!("{settings:?}").contains("hunter2"));
    let printed = settings.effective.to_toml();
    assert!(printed.contains("admin_token") && !printed.contains("hunter2"), "{printed}");
    let short = FileConfig::parse("[auth]\nadmin_token = \"hunter2\"", "t.toml").unwrap();
    let error = Settings::resolve(&short, &env(&[]), &Overrides::default()).unwrap_err();
    assert!(error.to_string().contains("16 to 512") && !error.to_string().contains("hunter2"));
    // The variable beats the file, and is not shown either.
    let vars = env(&[("IDMINT_ADMIN_TOKEN", "from-the-env-0123456789")]);
    let settings = Settings::resolve(&short, &vars, &Overrides::default()).unwrap();
    assert!(settings.auth.has_admin_token());
    assert!(!settings.effective.to_toml().contains("from-the-env"));
}

#[test]
fn clients_need_a_token_and_tags() {
    let text = "[auth.clients.a]\ntags = [\"order\"]\n[auth.clients.b]\ntoken_env = \"B_TOKEN\"\ntags = []\n[auth.clients.c]\ntoken = \"c-token-0123456789abc\"\ntags = [\"bad\\ttag\"]\n";
    let file = FileConfig::parse(text, "t.toml").unwrap();
    let error = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap_err();
    assert_eq!(error.problems().len(), 4, "{error}");
    let message = error.to_string();
    assert!(message.contains("give token or token_env"), "{message}");
    assert!(message.contains("B_TOKEN") && message.contains("tags is empty"), "{message}");
}

#[test]
fn beyond_loopback_needs_an_admin_token() {
    let file = FileConfig::parse("listen = \"0.0.0.0:8080\"\n", "t.toml").unwrap();
    let error = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap_err();
    assert!(error.to_string().contains("IDMINT_ADMIN_TOKEN"), "{error}");
    let vars = env(&[("IDMINT_ADMIN_TOKEN", "admin-token-0123456789")]);
    assert!(Settings::resolve(&file, &vars, &Overrides::default()).is_ok());
    // The gRPC port too: it serves ids beyond the loopback guard's reach otherwise.
    let grpc = FileConfig::parse("grpc_listen = \"0.0.0.0:9090\"\n", "t.toml").unwrap();
    let error = Settings::resolve(&grpc, &env(&[]), &Overrides::default()).unwrap_err();
    assert!(error.to_string().contains("grpc_listen"), "{error}");
    assert!(error.to_string().contains("IDMINT_ADMIN_TOKEN"), "{error}");
    assert!(Settings::resolve(&grpc, &vars, &Overrides::default()).is_ok());
    let local = FileConfig::parse("grpc_listen = \"127.0.0.1:9090\"\n", "t.toml").unwrap();
    assert!(Settings::resolve(&local, &env(&[]), &Overrides::default()).is_ok());
}

#[test]
fn limits_may_be_lowered_never_raised() {
    let file = FileConfig::parse("[limits]\nclient_in_flight_max = 8\n", "t.toml").unwrap();
    let vars = env(&[("IDMINT_LIMITS_REQUEST_TIMEOUT_MS", "2000")]);
    let settings = Settings::resolve(&file, &vars, &Overrides::default()).unwrap();
    assert_eq!(settings.http_limits.client_in_flight_max, 8);
    assert_eq!(settings.http_limits.request_timeout_ms, 2_000);
    let raised = FileConfig::parse("[limits]\nconnections_max = 1000000\n", "t.toml").unwrap();
    let error = Settings::resolve(&raised, &env(&[]), &Overrides::default()).unwrap_err();
    assert!(error.to_string().contains("never raise"), "{error}");
}

#[test]
fn defaults_serve_loopback_from_the_embedded_store() {
    let s = Settings::resolve(&FileConfig::default(), &env(&[]), &Overrides::default()).unwrap();
    assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(s.store, StoreUrl::Sqlite("./idmint-data/idmint.db".into()));
    assert_eq!(s.batch_count_max, BATCH_COUNT_MAX);
    assert_eq!(s.segment.state_dir(), Some(Path::new("./idmint-data")));
    assert!(s.segment.adaptive_step());
    assert_eq!(s.segment.segment_duration().as_secs(), 900);
}

#[test]
fn segment_pacing_and_the_data_dir_resolve_and_refuse_bad_values() {
    let file = FileConfig::parse(
        "data_dir = \"/var/lib/idmint\"\n[segment]\nsegment_duration_s = 60\nadaptive_step = false\n",
        "t.toml",
    )
    .unwrap();
    let s = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap();
    assert_eq!(s.segment.state_dir(), Some(Path::new("/var/lib/idmint")));
    assert_eq!(s.segment.segment_duration().as_secs(), 60);
    assert!(!s.segment.adaptive_step());
    let memory = env(&[("IDMINT_STORE", "memory://")]);
    let s = Settings::resolve(&file, &memory, &Overrides::default()).unwrap();
    assert_eq!(s.segment.state_dir(), None, "memory:// keeps no state");
    let err = Settings::resolve(
        &file,
        &env(&[("IDMINT_SEGMENT_SEGMENT_DURATION_S", "0")]),
        &Overrides::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("segment_duration_s = 0 is out of range"), "{err}");
    let err = Settings::resolve(
        &file,
        &env(&[("IDMINT_SEGMENT_ADAPTIVE_STEP", "maybe")]),
        &Overrides::default(),
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("IDMINT_SEGMENT_ADAPTIVE_STEP"), "{err}");
}

#[test]
fn flag_beats_env_beats_file_beats_default() {
    let file = FileConfig::parse(
        "listen = \"127.0.0.1:1\"\nstore = \"memory://\"\n[segment]\nrefill_wait_ms = 7\n",
        "t.toml",
    )
    .unwrap();
    let only_file = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap();
    assert_eq!(only_file.listen.port(), 1);
    assert_eq!(only_file.segment.refill_wait().as_millis(), 7);
    let env = env(&[("IDMINT_LISTEN", "127.0.0.1:2"), ("IDMINT_SEGMENT_REFILL_WAIT_MS", "9")]);
    let with_env = Settings::resolve(&file, &env, &Overrides::default()).unwrap();
    assert_eq!(with_env.listen.port(), 2);
    assert_eq!(with_env.segment.refill_wait().as_millis(), 9);
    assert_eq!(with_env.store, StoreUrl::Memory);
    let flags = Overrides { listen: Some("127.0.0.1:3".into()), ..Overrides::default() };
    assert_eq!(Settings::resolve(&file, &env, &flags).unwrap().listen.port(), 3);
}

#[test]
fn bad_values_name_their_origin_and_the_fix() {
    let err = FileConfig::parse("lisen = \"x\"", "idmint.toml").unwrap_err().to_string();
    assert!(err.contains("idmint.toml") && err.contains("lisen"), "{err}");
    let file = FileConfig::parse("[limits]\nbatch_count_max = 1000000", "f").unwrap();
    let err = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("config key limits.batch_count_max"), "{err}");
    let err = Settings::resolve(
        &FileConfig::default(),
        &env(&[("IDMINT_SEGMENT_REFILL_WAIT_MS", "soon")]),
        &Overrides::default(),
    )
    .unwrap_err();
    assert!(err.to_string().starts_with("IDMINT_SEGMENT_REFILL_WAIT_MS"), "{err}");
    let flags = Overrides { listen: Some("localhost".into()), ..Overrides::default() };
    let err = Settings::resolve(&FileConfig::default(), &env(&[]), &flags).unwrap_err();
    assert!(
        err.to_string().starts_with("--listen") && err.to_string().contains("no port"),
        "{err}"
    );
}

/// Issue 22 item 8: `--listen localhost:8080` was refused; a host name resolves (once, its
/// first IPv4 address), and one that does not resolve is refused with the fix.
#[test]
fn listen_addresses_may_be_host_names() {
    let flags = Overrides {
        listen: Some("localhost:8080".into()),
        grpc_listen: Some("localhost:9090".into()),
        ..Overrides::default()
    };
    let s = Settings::resolve(&FileConfig::default(), &env(&[]), &flags).unwrap();
    assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(s.grpc_listen.map(|a| a.to_string()).as_deref(), Some("127.0.0.1:9090"));
    let flags = Overrides { listen: Some("nowhere.invalid:8080".into()), ..Overrides::default() };
    let err = Settings::resolve(&FileConfig::default(), &env(&[]), &flags).unwrap_err();
    assert!(
        err.to_string().contains("does not resolve") && err.to_string().contains("localhost:8080"),
        "{err}"
    );
}

#[test]
fn the_snowflake_section_resolves_and_refuses_what_cannot_run() {
    let resolve = |toml: &str, vars: &[(&str, &str)]| {
        let file = FileConfig::parse(toml, "t.toml").unwrap();
        Settings::resolve(&file, &env(vars), &Overrides::default())
    };
    let s = resolve("", &[]).unwrap();
    let config = s.snowflake.unwrap();
    assert_eq!((config.space.as_str(), config.worker), ("snowflake", WorkerIdSource::Lease));
    assert_eq!(s.snowflake_cached, None);
    let s = resolve("[snowflake]\nenabled = false\ncached = true", &[]).unwrap();
    assert!(s.snowflake.is_none() && s.snowflake_cached.is_none());
    let s = resolve("[snowflake]\nworker = \"static:1023\"\ncached = true", &[]).unwrap();
    assert_eq!(s.snowflake.unwrap().worker, WorkerIdSource::Static(1023));
    assert_eq!(
        s.snowflake_cached,
        Some(CachedConfig {
            capacity: idmint::snowflake::limits::CACHED_RING_CAPACITY_DEFAULT,
            max_lead_ms: idmint::snowflake::limits::CACHED_MAX_LEAD_MS_DEFAULT,
            max_age_ms: idmint::snowflake::limits::CACHED_MAX_AGE_MS_DEFAULT,
        })
    );
    let refused = |toml: &str, vars: &[(&str, &str)], says: &str| {
        let err = resolve(toml, vars).unwrap_err().to_string();
        assert!(err.contains(says), "{err} does not say {says:?}");
    };
    refused("[snowflake]\nlayout = \"twitter\"", &[], "use one of snowflake, sonyflake");
    refused("[snowflake]\nworker = \"static:1024\"", &[], "N from 0 to 1023");
    refused("", &[("IDMINT_SNOWFLAKE_TOLERANCE_MS", "5000")], "above 1000 ms");
    // Baidu's layout ran out in 2024: refused, naming the keys that fix it.
    refused("[snowflake]\nlayout = \"uid\"", &[], "layout uid");
    refused("[snowflake]\nlayout = \"uid\"\nrefuse_expiring = true", &[], "layout uid");
    let cached = "[snowflake]\ncached = true\n";
    refused(cached, &[("IDMINT_SNOWFLAKE_RING_MAX_AGE_MS", "5")], "at least 10 ms and one time");
    let ring = "[snowflake]\ncached = true\n";
    refused(&format!("{ring}ring_capacity = 1000"), &[], "config key snowflake.ring_capacity");
    refused(&format!("{ring}ring_capacity = 1024"), &[], "cannot hold one time unit");
    refused(ring, &[("IDMINT_SNOWFLAKE_RING_MAX_LEAD_MS", "60000")], "IDMINT_SNOWFLAKE_RING");
    let err = FileConfig::parse("[snowflake]\ncache = true", "t.toml").unwrap_err();
    assert!(err.to_string().contains("unknown key `cache`"), "{err}");
}

/// `[snowflake]` layout keys: each bad combination refused against its key, with the
/// numbers and the keys that fix it; a good one named `custom` unless it is a preset.
#[test]
fn custom_layouts_are_checked_for_fit_and_lifetime() {
    let resolve = |toml: &str, vars: &[(&str, &str)]| {
        let file = FileConfig::parse(toml, "t.toml").unwrap();
        Settings::resolve(&file, &env(vars), &Overrides::default())
    };
    let refused = |toml: &str, vars: &[(&str, &str)], says: &[&str]| {
        let err = resolve(toml, vars).unwrap_err().to_string();
        for part in says {
            assert!(err.contains(part), "{err} does not say {part:?}");
        }
    };
    let now = idmint::Clock::now_ms(&idmint::SystemClock);
    let this_year = idmint::snowflake::UtcMs(now).start_of_year().to_string();
    let this_year = &this_year[..10];
    // The defaults are the preset's fields: same layout, same space, vibration 255.
    let default = resolve("", &[]).unwrap().snowflake.unwrap();
    assert_eq!(default.layout, idmint::snowflake::Layout::preset("snowflake").unwrap());
    assert_eq!((default.space.as_str(), default.max_vibration), ("snowflake", 255));
    let sony = resolve("[snowflake]\nlayout = \"sonyflake\"", &[]).unwrap().snowflake.unwrap();
    assert_eq!((sony.space.as_str(), sony.max_vibration), ("sonyflake", 15));
    let off = resolve("[snowflake]\nmax_vibration = 0", &[]).unwrap().snowflake.unwrap();
    assert_eq!(off.max_vibration, 0, "vibration can still be turned off");
    // uid-generator's bits on a recent epoch: served, as `custom`.
    let uid = format!("[snowflake]\nlayout = \"uid\"\nepoch = \"{this_year}\"\n");
    let custom = resolve(&uid, &[]).unwrap().snowflake.unwrap();
    assert_eq!(custom.space, "custom");
    let layout = custom.layout;
    assert_eq!((layout.time_bits(), layout.worker_bits(), layout.sequence_bits()), (28, 22, 13));
    assert_eq!(layout.unit(), idmint::snowflake::TimeUnit::Seconds);
    assert_eq!(idmint::snowflake::UtcMs(layout.epoch_ms()).to_string()[..10], *this_year);
    // Set by variables, bit by bit; fewer than 63 bits is allowed (ids below 2^53 here).
    let vars = [
        ("IDMINT_SNOWFLAKE_TIME_BITS", "39"),
        ("IDMINT_SNOWFLAKE_WORKER_BITS", "4"),
        ("IDMINT_SNOWFLAKE_SEQUENCE_BITS", "10"),
        ("IDMINT_SNOWFLAKE_TIME_UNIT", "10ms"),
        ("IDMINT_SNOWFLAKE_EPOCH", "1704067200000"),
    ];
    let small = resolve("", &vars).unwrap().snowflake.unwrap();
    assert_eq!(
        small.layout.to_string(),
        "39 10ms-bits / 4 worker / 10 sequence, epoch 2024-01-01T00:00:00.000Z"
    );
    assert_eq!(small.max_vibration, 63, "a sixteenth of 1 024 sequences");
    // Every bad combination, refused against its key.
    refused(
        "[snowflake]\ntime_bits = 42",
        &[],
        &["config key snowflake.time_bits", "make 64 bits", "at most 63"],
    );
    refused(
        "[snowflake]\nsequence_bits = 0",
        &[],
        &["config key snowflake.sequence_bits", "no sequence bits"],
    );
    refused("[snowflake]\ntime_bits = 0", &[], &["no time bits"]);
    refused("[snowflake]\nworker_bits = 70", &[], &["snowflake.worker_bits", "at most 62"]);
    refused(
        "[snowflake]\ntime_unit = \"minutes\"",
        &[],
        &["snowflake.time_unit", "use ms, 10ms or s"],
    );
    refused(
        "[snowflake]\nepoch = \"2016-05-20T00:00:00+08:00\"",
        &[],
        &["snowflake.epoch", "is not a UTC time"],
    );
    refused(
        "[snowflake]\nepoch = \"2999-01-01\"",
        &[],
        &["config key snowflake.epoch", "after the clock", "must be in the past"],
    );
    refused(
        "[snowflake]\nlayout = \"uid\"",
        &[],
        &[
            "config key snowflake.layout",
            "ran out at 2024-11-20T21:24:16.000Z",
            "snowflake.epoch",
            "snowflake.time_bits",
            &format!("with epoch = \"{this_year}\""),
        ],
    );
    // 2^25 s is 388 days: from 30 days ago, under the one-year floor.
    let month_ago = idmint::snowflake::UtcMs(now - 30 * 86_400_000).to_string();
    refused(
        &format!("[snowflake]\nlayout = \"uid\"\ntime_bits = 25\nepoch = \"{month_ago}\""),
        &[],
        &["config key snowflake.epoch", "in 358 days", "at least 365 days"],
    );
    // A ring's age bound covers one time unit of the layout.
    refused(
        &format!("{uid}cached = true\nring_max_age_ms = 500"),
        &[],
        &["snowflake.ring_max_age_ms", "one time unit"],
    );
}

#[test]
fn a_worker_id_range_is_checked_against_the_layout_and_the_worker_source() {
    let resolve = |toml: &str, vars: &[(&str, &str)]| {
        let file = FileConfig::parse(toml, "t.toml").unwrap();
        Settings::resolve(&file, &env(vars), &Overrides::default())
    };
    let s = resolve("[snowflake]\nworker_ids = \"512-1023\"", &[]).unwrap();
    let range = s.snowflake.unwrap().worker_ids.unwrap();
    assert_eq!((range.min(), range.max()), (512, 1023));
    assert_eq!(resolve("", &[]).unwrap().snowflake.unwrap().worker_ids, None);
    let s = resolve("[snowflake]\nworker = \"static:600\"\nworker_ids = \"512-1023\"", &[]);
    assert_eq!(s.unwrap().snowflake.unwrap().worker, WorkerIdSource::Static(600));
    let refused = |toml: &str, vars: &[(&str, &str)], says: &[&str]| {
        let err = resolve(toml, vars).unwrap_err().to_string();
        for said in says {
            assert!(err.contains(said), "{err} does not say {said:?}");
        }
    };
    let key = "config key snowflake.worker_ids";
    refused("[snowflake]\nworker_ids = \"512..1023\"", &[], &[key, "not a worker-id range"]);
    refused("[snowflake]\nworker_ids = \"1023-512\"", &[], &[key, "LOW <= HIGH"]);
    refused("[snowflake]\nworker_ids = \"512-1024\"", &[], &[key, "10 worker bits"]);
    refused("", &[("IDMINT_SNOWFLAKE_WORKER_IDS", "x")], &["IDMINT_SNOWFLAKE_WORKER_IDS"]);
    let fixed = "[snowflake]\nworker = \"static:7\"\nworker_ids = \"512-1023\"";
    refused(fixed, &[], &[key, "does not hold snowflake.worker = \"static:7\""]);
    let assigned = "[snowflake]\nworker = \"store-assigned\"\nworker_ids = \"512-1023\"";
    refused(assigned, &[], &[key, "store-assigned ids count up from 1", "within 0-65535"]);
    // uid-generator's layout holds 4 194 304 worker ids, a lease space 65 536: a range past
    // it passed here once and then never started.
    let uid = "[snowflake]\nlayout = \"uid\"\nepoch = \"2024-06-01\"\n";
    refused(
        &format!("{uid}worker_ids = \"3000000-4194303\""),
        &[],
        &[key, "the largest leased worker id", "\"64512-65535\""],
    );
    assert!(resolve(&format!("{uid}worker_ids = \"32768-65535\""), &[]).is_ok());
}

#[test]
fn formats_resolve_their_key_from_env_and_never_show_it() {
    let key = "00112233445566778899aabbccddeeff";
    let toml = "[format.order]\ntemplate = \"O{id:base62:6}\"\nkey_env = \"K\"\nbits = 35\n\
                [format.plain]\n";
    let file = FileConfig::parse(toml, "t.toml").unwrap();
    let s = Settings::resolve(&file, &env(&[("K", key)]), &Overrides::default()).unwrap();
    assert_eq!(s.formats.len(), 2);
    let order = s.formats.iter().find(|f| f.tag.as_str() == "order").unwrap();
    assert_eq!(order.format.permutation().map(|p| p.bits()), Some(35));
    assert!(!order.force_key_change);
    assert!(!format!("{s:?}").contains(key), "the key reached Debug output");
    let inline = "[format.order]\nkey = \"00112233445566778899aabbccddeeff\"\nbits = 40\n";
    let file = FileConfig::parse(inline, "t.toml").unwrap();
    assert!(Settings::resolve(&file, &env(&[]), &Overrides::default()).is_ok());
    let refused = |toml: &str, says: &str| {
        let file = FileConfig::parse(toml, "t.toml").unwrap();
        let err = Settings::resolve(&file, &env(&[("K", key)]), &Overrides::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains(says) && err.contains("format."), "{err} does not say {says:?}");
        assert!(!err.contains(key), "{err}");
    };
    refused("[format.o]\nkey_env = \"K\"\nkey = \"00\"\nbits = 40", "not both");
    refused("[format.o]\nbits = 40", "needs a key or key_env");
    refused("[format.o]\nkey_env = \"K\"\nbits = 64", "use 16 to 63");
    refused("[format.o]\ntime_zone = \"Mars/Base\"", "time zone");
    // 62^6 holds 35 bits, not 36.
    refused("[format.o]\ntemplate = \"{id:base62:6}\"\nkey_env = \"K\"\nbits = 36", "bits = 35");
}

#[test]
fn every_problem_of_a_file_is_reported_at_once_with_its_line() {
    let text = "lisen = \"127.0.0.1:1\"\n\
                [segment]\n\
                refill_wait_ms = \"soon\"\n\
                preload_ratio = 0.5\n\
                refil_wait_ms = 5\n\
                [limits]\n\
                batch_count_max = 0\n\
                [snowflake]\n\
                tolerance_ms = 5000\n";
    let (file, problems) = FileConfig::parse_lenient(text, "idmint.toml");
    let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 3, "{shown:#?}");
    assert!(
        shown[0].starts_with(
            "idmint.toml:1:1: lisen: unknown key `lisen`; did you mean `listen`? The keys \
             allowed here are `listen`"
        ),
        "{shown:#?}"
    );
    assert!(shown[0].contains("`listen`") && shown[0].contains("`snowflake`"), "{shown:#?}");
    assert!(shown.iter().any(|s| s.starts_with(
        "idmint.toml:3:18: segment.refill_wait_ms: invalid type: string \"soon\", expected a whole number"
    )), "{shown:#?}");
    assert!(shown.iter().any(|s| s.starts_with("idmint.toml:5:1: segment.refil_wait_ms: unknown")));
    // What could be read is kept, so the values are checked in the same run.
    assert_eq!(file.segment.preload_ratio, Some(0.5));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idmint.toml");
    std::fs::write(&path, text).unwrap();
    let vars = env(&[("IDMINT_SEGMENT_TAG_REFRESH_MS", "often")]);
    let err = Settings::load(Some(&path), &vars, &Overrides::default()).unwrap_err();
    let all = err.to_string();
    assert!(all.starts_with("6 problems:"), "{all}");
    assert!(
        all.contains("IDMINT_SEGMENT_TAG_REFRESH_MS: \"often\" is not a whole number"),
        "{all}"
    );
    assert!(all.contains(":7)") && all.contains("batch_count_max = 0 is out of range"), "{all}");
    assert!(all.contains("config key snowflake.tolerance_ms") && all.contains(":9)"), "{all}");
}

#[test]
fn syntax_errors_name_their_line_and_column() {
    let err = FileConfig::parse("listen = \"a\"\n[segment\nx = = 1\n", "bad.toml").unwrap_err();
    let first = &err.problems()[0];
    let ConfigError::Parse { line, column, reason, .. } = first else { panic!("{first:?}") };
    assert_eq!((*line, *column), (2, 9), "{reason}");
    assert!(reason.starts_with("TOML syntax:"), "{reason}");
    assert!(err.to_string().contains("bad.toml:2:9:"), "{err}");
    let err = FileConfig::parse("listen = 1\nlisten = 2\n", "dup.toml").unwrap_err();
    assert!(err.to_string().contains("dup.toml:2:"), "{err}");
}

#[test]
fn the_effective_config_holds_every_key_with_secrets_masked() {
    let key = "00112233445566778899aabbccddeeff";
    let text = format!(
        "store = \"mysql://app:hunter2@db:3306/ids\"\n\
         [format.order]\nkey = \"{key}\"\nbits = 41\n[format.\"a.b\"]\ntemplate = \"A{{id}}\"\n"
    );
    let file = FileConfig::parse(&text, "prod.toml").unwrap();
    let vars = env(&[
        ("IDMINT_REDIS", "redis://:s3cret@cache:6379/0"),
        ("IDMINT_SEGMENT_REFILL_WAIT_MS", "250"),
        ("IDMINT_ADMIN_TOKEN", "admin-hunter3-0123456789"),
    ]);
    let flags = Overrides { listen: Some("0.0.0.0:9000".into()), ..Overrides::default() };
    let s = Settings::resolve(&file, &vars, &flags).unwrap();
    let printed = s.effective.to_toml();
    for secret in [key, "hunter2", "s3cret", "hunter3"] {
        assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
        assert!(!format!("{s:?}").contains(secret), "{secret} in Debug output");
    }
    for line in [
        "listen = \"0.0.0.0:9000\"",
        "store = \"mysql://app:***@db:3306/ids\"",
        "redis = \"redis://:***@cache:6379/0\"",
        "refill_wait_ms = 250",
        "key = \"***\"",
        "admin_token = \"***\"",
        "[format.\"a.b\"]",
        "template = \"A{id}\"",
    ] {
        assert!(printed.contains(line), "no {line:?} in\n{printed}");
    }
    let origin = |key: &str| {
        let line = printed.lines().find(|l| l.starts_with(key)).unwrap();
        line.rsplit_once("# ").unwrap().1.to_string()
    };
    assert_eq!(origin("listen ="), "--listen");
    assert_eq!(origin("refill_wait_ms ="), "IDMINT_SEGMENT_REFILL_WAIT_MS");
    assert_eq!(origin("store ="), "prod.toml:1");
    assert_eq!(origin("preload_ratio ="), "default");
    // Read back, it is a valid config file with the same keys (secrets aside).
    let again = printed
        .replace("admin_token = \"***\"", "admin_token = \"admin-hunter3-0123456789\"")
        .replace("key = \"***\"", &format!("key = \"{key}\""));
    let again = FileConfig::parse(&again, "printed.toml").unwrap();
    let again = Settings::resolve(&again, &env(&[]), &Overrides::default()).unwrap();
    assert_eq!(again.effective.keys().collect::<Vec<_>>(), s.effective.keys().collect::<Vec<_>>());
    let keys: Vec<&str> = s.effective.keys().collect();
    assert!(keys.contains(&"snowflake.ring_max_lead_ms") && keys.contains(&"redis"), "{keys:?}");
}

#[test]
fn every_key_has_its_variable_and_is_documented() {
    assert_eq!(env_var("segment.refill_wait_ms"), "IDMINT_SEGMENT_REFILL_WAIT_MS");
    let docs = include_str!("../../../../docs/configuration.md");
    let key = "00112233445566778899aabbccddeeff";
    let mut keys = std::collections::BTreeSet::new();
    for toml in [
        "[format.TAG]\nkey_env = \"K\"\nbits = 40",
        "[format.TAG]\nkey = \"00112233445566778899aabbccddeeff\"\nbits = 40",
        "[auth]\nadmin_token = \"admin-token-0123456789\"\n[auth.clients.NAME]\ntoken_env = \"T\"\ntags = [\"x\"]",
        "[auth.clients.NAME]\ntoken = \"client-token-0123456789\"\ntags = [\"x\"]",
    ] {
        let file = FileConfig::parse(toml, "t.toml").unwrap();
        let pairs = [("K", key), ("T", "client-token-0123456789")];
        let vars = env(&pairs);
        let s = Settings::resolve(&file, &vars, &Overrides::default()).unwrap();
        keys.extend(s.effective.keys().map(str::to_string));
    }
    let missing: Vec<String> = keys
        .iter()
        .flat_map(|key| {
            let mut names = vec![format!("`{key}`")];
            if key == "auth.admin_token" {
                names.push(format!("`{ADMIN_TOKEN_ENV}`"));
            } else if !key.starts_with("format.") && !key.starts_with("auth.") {
                names.push(format!("`{}`", env_var(key)));
            }
            names
        })
        .filter(|name| !docs.contains(name.as_str()))
        .collect();
    assert!(missing.is_empty(), "docs/configuration.md does not name {missing:?}");
}

#[test]
fn secrets_print_as_stars() {
    let secret = Secret::new("tok3n");
    assert_eq!((secret.to_string(), format!("{secret:?}")), ("***".into(), "***".into()));
    assert_eq!(secret.expose(), "tok3n");
    let url = SecretUrl::new("postgres://u:pw@h/db?password=pw");
    assert_eq!(url.to_string(), "postgres://u:***@h/db?password=***");
    assert!(!format!("{url:?}").contains("pw"));
}

#[test]
fn every_plain_key_is_set_by_its_variable_and_printed_with_it() {
    // Each key of the keys! tables, set through its variable to its own default: resolved
    // from there, and printed with the variable as its origin.
    let defaults = Settings::resolve(&FileConfig::default(), &env(&[]), &Overrides::default())
        .unwrap()
        .effective;
    let printed = defaults.to_toml();
    let plain: Vec<&str> =
        defaults.keys().filter(|k| !k.starts_with("auth.") && !k.starts_with("format.")).collect();
    assert!(plain.len() >= 30 && plain.contains(&"limits.metrics_tags_max"), "{plain:?}");
    for key in plain {
        let name = key.rsplit('.').next().unwrap_or(key);
        // The line under the key's own section: `enabled` is in [snowflake] and [tinyid].
        let section = key.rsplit_once('.').map(|(section, _)| format!("[{section}]"));
        let start = section.map_or(0, |section| {
            printed.lines().position(|l| l == section).expect("the section is printed")
        });
        let line =
            printed.lines().skip(start).find(|l| l.starts_with(&format!("{name} = "))).unwrap();
        let value = line.split(" = ").nth(1).unwrap().split(" #").next().unwrap().trim();
        let value = value.trim_matches('"');
        let variable = env_var(key);
        let s = Settings::resolve(
            &FileConfig::default(),
            &env(&[(&variable, value)]),
            &Overrides::default(),
        )
        .unwrap_or_else(|e| panic!("{variable}={value}: {e}"));
        assert_eq!(s.effective.origins.get(key), Some(&Origin::Env(variable.clone())), "{key}");
        assert!(s.effective.to_toml().contains(&format!("# {variable}\n")), "{key}");
    }
}

#[test]
fn tinyid_is_off_by_default_and_refuses_a_store_that_is_not_mysql() {
    let s = Settings::resolve(&FileConfig::default(), &env(&[]), &Overrides::default()).unwrap();
    assert!(s.tinyid.is_none());
    // On the default SQLite store: refused, naming the key that fixes it.
    let refused = Settings::resolve(
        &FileConfig::default(),
        &env(&[("IDMINT_TINYID_ENABLED", "true")]),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(refused.contains("tinyid.store") && refused.contains("MySQL"), "{refused}");
    let on = Settings::resolve(
        &FileConfig::default(),
        &env(&[
            ("IDMINT_TINYID_ENABLED", "true"),
            ("IDMINT_TINYID_STORE", "mysql://u:pw@127.0.0.1:3306/tinyid"),
            ("IDMINT_TINYID_TOKEN_REFRESH_MS", "5000"),
        ]),
        &Overrides::default(),
    )
    .unwrap();
    let tinyid = on.tinyid.expect("served");
    assert_eq!(tinyid.engine.token_refresh_ms, 5_000);
    assert!(!format!("{:?}", on.effective.to_toml()).contains("pw@"), "the password is shown");
    for (var, value) in
        [("IDMINT_TINYID_TOKEN_REFRESH_MS", "10"), ("IDMINT_TINYID_BATCH_SIZE_MAX", "0")]
    {
        let refused =
            Settings::resolve(&FileConfig::default(), &env(&[(var, value)]), &Overrides::default())
                .unwrap_err()
                .to_string();
        assert!(refused.contains(var), "{var}: {refused}");
    }
}

/// Loads `text` as a file with the environment's names `names` (no values: the lookup
/// answers none).
fn load_checked(
    text: &str,
    names: &[&str],
) -> Result<(Settings, Option<ConfigErrors>), ConfigErrors> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idmint.toml");
    std::fs::write(&path, text).unwrap();
    let names = names.iter().map(|name| name.to_string());
    Settings::load_checked(Some(&path), &env(&[]), &Overrides::default(), names)
}

#[test]
fn a_variable_idmint_does_not_read_is_reported_with_the_nearest_one() {
    let misspelled = ["IDMINT_SNOWFLAK_ENABLED", "IDMINT_REFILL_WAIT_MS", "IDMINT_ADMIN_TOKN"];
    let unrelated = "IDMINT_QQQQQQQQQQQQ";
    let link = super::variables::is_service_link;
    assert!(link("IDMINT_PORT_80_TCP_ADDR", &["IDMINT"]) && link("IDMINT_PORT", &["IDMINT"]));
    assert!(!link("IDMINT_LISTEN_PORT", &["IDMINT"]) && !link("IDMINT_PORT", &[]));
    assert!(
        !link("IDMINT_PORT_80_TCP_HOST", &["IDMINT"]) && !link("IDMINT_PORT_X_TCP", &["IDMINT"])
    );
    // What Kubernetes sets in a pod for a Service named `idmint` (and `idmint-grpc`).
    let service_links = [
        "IDMINT_SERVICE_HOST",
        "IDMINT_SERVICE_PORT",
        "IDMINT_SERVICE_PORT_HTTP",
        "IDMINT_PORT",
        "IDMINT_PORT_80_TCP",
        "IDMINT_PORT_80_TCP_PROTO",
        "IDMINT_PORT_80_TCP_PORT",
        "IDMINT_PORT_80_TCP_ADDR",
        "IDMINT_GRPC_SERVICE_HOST",
        "IDMINT_GRPC_PORT_9090_TCP_ADDR",
    ];
    let known = [
        "IDMINT_LISTEN",
        "IDMINT_SEGMENT_REFILL_WAIT_MS",
        "IDMINT_ADMIN_TOKEN",
        "IDMINT_CONFIG",
        "IDMINT_LOG",
        "IDMINT_LOG_FORMAT",
        "IDMINT_SERVER",
        "IDMINT_TOKEN",
        "IDMINT_TEST_MYSQL_URL",
        "IDMINT_TEST_ANYTHING_NEW",
        // Named by the file: a format's key_env, a client's token_env.
        "IDMINT_ORDER_KEY",
        "IDMINT_SHOP_TOKEN",
        "PATH",
        "HOME",
    ];
    let file = "[format.order]\nkey_env = \"IDMINT_ORDER_KEY\"\nbits = 41\n\
                [auth.clients.shop]\ntoken_env = \"IDMINT_SHOP_TOKEN\"\ntags = [\"order\"]\n";
    let vars = env(&[
        ("IDMINT_ORDER_KEY", "00112233445566778899aabbccddeeff"),
        ("IDMINT_SHOP_TOKEN", "shop-token-0123456789"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("idmint.toml");
    std::fs::write(&path, file).unwrap();
    let names = known
        .iter()
        .chain(&service_links)
        .chain(&misspelled)
        .chain([&unrelated])
        .map(|n| n.to_string());
    let (_, unknown) =
        Settings::load_checked(Some(&path), &vars, &Overrides::default(), names).unwrap();
    let unknown = unknown.expect("the misspelled variables are reported");
    let shown: Vec<String> = unknown.problems().iter().map(ToString::to_string).collect();
    assert_eq!(shown.len(), 4, "{shown:#?}");
    let expected = [
        ("IDMINT_ADMIN_TOKN", "did you mean IDMINT_ADMIN_TOKEN (key `auth.admin_token`)?"),
        (unrelated, "unset it; docs/configuration.md lists the variables idmint reads"),
        (
            "IDMINT_REFILL_WAIT_MS",
            "did you mean IDMINT_SEGMENT_REFILL_WAIT_MS (key `segment.refill_wait_ms`)?",
        ),
        (
            "IDMINT_SNOWFLAK_ENABLED",
            "did you mean IDMINT_SNOWFLAKE_ENABLED (key `snowflake.enabled`)?",
        ),
    ];
    for (line, (name, fix)) in shown.iter().zip(expected) {
        assert!(line.starts_with(&format!("{name}: idmint reads no variable")), "{line}");
        assert!(line.ends_with(fix), "{line}");
    }
    // Alone, nothing is reported.
    let names = known.iter().map(|n| n.to_string());
    let (_, none) =
        Settings::load_checked(Some(&path), &vars, &Overrides::default(), names).unwrap();
    assert!(none.is_none(), "{none:?}");
    // With an invalid configuration they are among its problems, the likelier cause.
    let error = load_checked("listen = \"0.0.0.0:8080\"\n", &["IDMINT_ADMIN_TOKN"]).unwrap_err();
    assert_eq!(error.problems().len(), 2, "{error}");
    assert!(error.to_string().contains("did you mean IDMINT_ADMIN_TOKEN"), "{error}");
}

#[test]
fn every_idmint_variable_the_sources_name_is_one_idmint_reads() {
    // Every `"IDMINT_…"` literal of the workspace's sources and tests is a variable the
    // check above knows, so it never reports one of idmint's own. Typos written on purpose
    // are in this file or sit on lines that say `misspelled`.
    let known: std::collections::BTreeSet<String> = keys::plain_keys()
        .map(env_var)
        .chain(OTHER_VARIABLES.iter().map(|v| v.to_string()))
        .collect();
    // Not variables: a Redis error's prefix.
    let not_variables = ["IDMINT_UNSUPPORTED"];
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = Vec::new();
    let mut dirs = vec![crates];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with("target") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    assert!(files.len() > 50, "{} files", files.len());
    let mut unknown = Vec::new();
    for file in files.iter().filter(|file| !file.ends_with("config/tests.rs")) {
        let text = std::fs::read_to_string(file).unwrap();
        for line in text.lines().filter(|line| !line.contains("misspelled")) {
            for (at, _) in line.match_indices("\"IDMINT_") {
                let rest = &line[at + 1..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // Whole literals only (not a prefix, not a format string).
                if !rest[name.len()..].starts_with('"') || name.ends_with('_') {
                    continue;
                }
                if !(known.contains(&name)
                    || name.starts_with(TEST_VARIABLE_PREFIX)
                    || not_variables.contains(&name.as_str()))
                {
                    unknown.push(format!("{}: {name}", file.display()));
                }
            }
        }
    }
    assert!(unknown.is_empty(), "variables the check does not know: {unknown:#?}");
}

#[test]
fn an_unknown_key_names_the_nearest_key() {
    let problem = |text: &str| -> String {
        let (_, problems) = FileConfig::parse_lenient(text, "t.toml");
        assert_eq!(problems.len(), 1, "{problems:?}");
        problems[0].to_string()
    };
    for (text, near) in [
        ("lisen = \"127.0.0.1:1\"", "`listen`"),
        ("[segment]\nrefil_wait_ms = 5", "`segment.refill_wait_ms`"),
        // In the wrong section: found in its own.
        ("[segment]\nbatch_count_max = 5", "`limits.batch_count_max`"),
        ("batch_count_max = 5", "`limits.batch_count_max`"),
        ("[snowflake]\nworker_id = \"static:1\"", "`snowflake.worker_ids`"),
        ("[format.order]\ntempalte = \"{id}\"", "`format.order.template`"),
        ("[segmnt]\nstep = 5", "`segment`"),
        ("[auth.clients.shop]\ntoken_evn = \"T\"\ntags = [\"a\"]", "`auth.clients.shop.token_env`"),
    ] {
        let shown = problem(text);
        assert!(shown.contains(&format!("; did you mean {near}? The key")), "{text:?}: {shown}");
    }
    let far = problem("[segment]\nsomething_else_entirely = 1");
    assert!(!far.contains("did you mean"), "{far}");
    assert!(far.contains("; the keys allowed here are `preload_ratio`"), "{far}");
}

#[test]
fn a_bare_range_is_told_to_be_quoted() {
    let error = FileConfig::parse("[snowflake]\nworker_ids = 512-1023\n", "t.toml").unwrap_err();
    let shown = error.to_string();
    assert!(shown.starts_with("t.toml:2:"), "{shown}");
    assert!(shown.ends_with("; quote it: worker_ids = \"512-1023\""), "{shown}");
    let error = FileConfig::parse("[snowflake]\nlayout = sonyflake # the preset\n", "t.toml");
    assert!(error.unwrap_err().to_string().ends_with("quote it: layout = \"sonyflake\""));
    // Not for what quoting does not fix.
    let error = FileConfig::parse("listen = \"a\"\n[segment\n", "t.toml").unwrap_err();
    assert!(!error.to_string().contains("quote it"), "{error}");
    let error = FileConfig::parse("[snowflake]\nworker_ids = [1, \n", "t.toml").unwrap_err();
    assert!(!error.to_string().contains("quote it"), "{error}");
}

#[test]
fn the_plain_keys_are_every_key_with_a_variable() {
    let defaults = Settings::resolve(&FileConfig::default(), &env(&[]), &Overrides::default())
        .unwrap()
        .effective;
    let resolved: Vec<&str> =
        defaults.keys().filter(|k| !k.starts_with("auth.") && !k.starts_with("format.")).collect();
    let mut listed: Vec<&str> = keys::plain_keys().collect();
    listed.sort_unstable();
    assert_eq!(listed, resolved);
    let flags: Vec<&str> = FLAG_KEYS.iter().map(|(key, _)| *key).collect();
    assert_eq!(flags, ["listen", "grpc_listen", "store", "redis", "witness", "data_dir"]);
}

/// `ready_engines = "auto"` waits for segments, and for snowflake only once a `[snowflake]`
/// key is set (file or variable: snowflake ids are on by default); tinyid and sequences when
/// configured. A list is taken as written, and naming an engine the node does not run, or
/// no engine, is a problem with the fix.
#[test]
fn readiness_waits_for_the_engines_the_configuration_uses() {
    use idmint::node::Engine::{Segment, Sequences, Snowflake};
    let engines = |text: &str, vars: &[(&str, &str)]| {
        let file = FileConfig::parse(text, "t.toml").unwrap();
        Settings::resolve(&file, &env(vars), &Overrides::default()).map(|s| s.ready_engines)
    };
    assert_eq!(engines("", &[]).unwrap(), [Segment]);
    assert_eq!(engines("[snowflake]\nworker = \"static:3\"\n", &[]).unwrap(), [Segment, Snowflake]);
    let lease = [("IDMINT_SNOWFLAKE_LEASE_MARGIN_MS", "2000")];
    assert_eq!(engines("", &lease).unwrap(), [Segment, Snowflake]);
    assert_eq!(engines("[snowflake]\nenabled = false\n", &[]).unwrap(), [Segment]);
    let redis = [("IDMINT_REDIS", "redis://127.0.0.1:6379")];
    assert_eq!(engines("", &redis).unwrap(), [Segment, Sequences]);
    let listed = [("IDMINT_READY_ENGINES", "snowflake, segment")];
    assert_eq!(engines("", &listed).unwrap(), [Snowflake, Segment]);
    assert_eq!(
        engines("ready_engines = \"segment\"\n[snowflake]\nworker = \"lease\"\n", &[]).unwrap(),
        [Segment]
    );
    for (text, wanted) in [
        ("ready_engines = \"sequences\"\n", "no redis is configured"),
        ("ready_engines = \"tinyid\"\n", "tinyid.enabled is false"),
        ("ready_engines = \"snowflake\"\n[snowflake]\nenabled = false\n", "snowflake.enabled"),
        ("ready_engines = \"segment,dns\"\n", "\"dns\" is not an engine"),
        ("ready_engines = \"\"\n", "is not an engine"),
    ] {
        let error = engines(text, &[]).unwrap_err().to_string();
        assert!(error.contains("ready_engines") && error.contains(wanted), "{text}: {error}");
    }
}

/// `witness` (issue 35): empty is none; another single store is taken; the main store
/// itself and `memory://` are refused with the reason.
#[test]
fn a_witness_is_another_single_store_that_keeps_its_marks() {
    let resolve = |vars: &[(&str, &str)]| {
        Settings::resolve(&FileConfig::default(), &env(vars), &Overrides::default())
    };
    assert_eq!(resolve(&[]).unwrap().witness, None);
    let taken = resolve(&[("IDMINT_WITNESS", "sqlite:///var/lib/idmint/witness.db")]).unwrap();
    assert!(matches!(taken.witness, Some(StoreUrl::Sqlite(_))), "{:?}", taken.witness);
    for (store, witness, says) in [
        ("sqlite://./idmint-data/idmint.db", "sqlite://./idmint-data/idmint.db", "the main store"),
        ("sqlite://a.db", "memory://", "keeps nothing"),
    ] {
        let problems = resolve(&[("IDMINT_STORE", store), ("IDMINT_WITNESS", witness)])
            .unwrap_err()
            .to_string();
        assert!(problems.contains(says) && problems.contains("IDMINT_WITNESS"), "{problems}");
    }
}
