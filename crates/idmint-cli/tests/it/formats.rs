//! A tag configured with a template and a key, end to end through the real binary: the
//! server hands out compact, non-sequential, unique public ids over HTTP (`idmint next`,
//! Leaf's route), `idmint decode --tag` maps each back to the internal id it stands for, and
//! a node started with another key for the tag is refused until the change is forced.

use std::collections::HashSet;

use tempfile::TempDir;

use crate::cli::{idmint, run_err, run_ok, serve};

const KEY: &str = "5f1c0b7e2a9d48e3b6c4a1f0d2e3c4b5";
const OTHER_KEY: &str = "00112233445566778899aabbccddeeff";

fn config(dir: &std::path::Path, extra: &str) {
    let text = format!(
        "[format.order]\ntemplate = \"ORD-{{date:%Y%m%d}}-{{id:base36:8}}\"\n\
         key_env = \"ORDER_KEY\"\nbits = 41\n{extra}"
    );
    std::fs::write(dir.join("idmint.toml"), text).unwrap();
}

#[test]
fn a_keyed_template_serves_unique_non_sequential_ids_that_decode_back() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    config(d, "");
    run_ok(idmint(d).args([
        "tag",
        "create",
        "order",
        "--step",
        "500",
        "--store",
        crate::cli::DEFAULT_STORE,
    ]));
    let args = ["--listen", "127.0.0.1:0", "--config", "idmint.toml"];
    let mut server = serve(d, &args, &[("ORDER_KEY", KEY)]);

    let out = run_ok(idmint(d).args(["next", "order", "-n", "2000", "--server", &server.url]));
    let texts: Vec<&str> = out.lines().collect();
    assert_eq!(texts.len(), 2000);
    assert_eq!(texts.iter().collect::<HashSet<_>>().len(), 2000, "a public id repeated");
    for text in &texts {
        let (prefix, id) = text.rsplit_once('-').unwrap();
        assert!(prefix.starts_with("ORD-20") && prefix.len() == 12, "{text}");
        assert!(id.len() == 8 && id.bytes().all(|b| b.is_ascii_alphanumeric()), "{text}");
    }
    // Non-sequential: about half of consecutive public ids go down.
    let down = texts.windows(2).filter(|w| w[1][13..] < w[0][13..]).count();
    assert!((700..=1300).contains(&down), "{down} of 1999 consecutive pairs go down");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let leaf_url = format!("{}/api/segment/get/order", server.url);
    let leaf = runtime.block_on(async { reqwest::get(leaf_url).await?.text().await }).unwrap();
    assert!(leaf.starts_with("ORD-") && leaf.len() == 21, "{leaf}");

    // The owner of the key maps each public id back to the internal ids 1, 2, 3, ...
    for (n, text) in texts.iter().enumerate().step_by(397) {
        let decoded = run_ok(
            idmint(d)
                .args(["decode", text, "--tag", "order", "--config", "idmint.toml"])
                .env("ORDER_KEY", KEY),
        );
        let id = decoded.lines().find_map(|l| l.strip_prefix("id         ")).unwrap();
        assert_eq!(id, (n + 1).to_string(), "{text}: {decoded}");
    }
    // Without the right key the text does not decode to the same id.
    let wrong = idmint(d)
        .args(["decode", texts[0], "--tag", "order", "--config", "idmint.toml"])
        .env("ORDER_KEY", OTHER_KEY)
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&wrong.stdout).contains("id         1\n"));
    server.child.kill().unwrap();
    server.child.wait().unwrap();

    // The key guard row is in the store but not a tag: not listed, not deleted, not served.
    let listed = run_ok(idmint(d).args(["tag", "list"]));
    assert!(listed.contains("order") && !listed.contains("idmint.key"), "{listed}");
    for command in [
        &["tag", "delete", "idmint.key.order"][..],
        &["tag", "set", "IDMINT.KEY.order", "--step", "5"],
    ] {
        let err = run_err(idmint(d).args(command));
        assert!(err.contains("internal rows"), "{command:?}: {err}");
    }

    // Another key for a tag that issued ids under this one: refused, with the fix.
    let err = run_err(idmint(d).args(["serve"]).args(args).env("ORDER_KEY", OTHER_KEY));
    assert!(err.contains("force_key_change = true") && err.contains("order"), "{err}");
    assert!(!err.contains(OTHER_KEY) && !err.contains(KEY), "a key reached the message: {err}");
    let log = std::fs::read_to_string(d.join("serve.log")).unwrap_or_default();
    assert!(!log.contains(KEY) && !log.contains(OTHER_KEY), "a key reached the log");
    // Forced, the new key is recorded and served.
    config(d, "force_key_change = true\n");
    let mut server = serve(d, &args, &[("ORDER_KEY", OTHER_KEY)]);
    run_ok(idmint(d).args(["next", "order", "-n", "3", "--server", &server.url]));
    server.child.kill().unwrap();
    server.child.wait().unwrap();
}

#[test]
fn bad_formats_are_refused_at_start_with_the_fix() {
    let dir = TempDir::new().unwrap();
    let d = dir.path();
    for (toml, env, says) in [
        ("[format.order]\ntemplate = \"{id:base36:8}\"\n", None, "widen it to 13"),
        ("[format.order]\nkey_env = \"K\"\nbits = 41\n", None, "\"K\", which is not set"),
        ("[format.order]\nkey_env = \"K\"\nbits = 41\n", Some("abc"), "openssl rand -hex 16"),
        ("[format.order]\nkey_env = \"K\"\n", Some(KEY), "a key needs bits"),
        ("[format.order]\ntemplate = \"{date:%-d}{id}\"\n", None, "change width"),
        ("[format.\" bad tag\"]\n", None, "format. bad tag"),
        ("[format.order]\ntemplat = \"{id}\"\n", None, "unknown key `templat`"),
    ] {
        std::fs::write(d.join("bad.toml"), toml).unwrap();
        let mut command = idmint(d);
        command.args(["serve", "--listen", "127.0.0.1:0", "--config", "bad.toml"]);
        if let Some(key) = env {
            command.env("K", key);
        }
        let err = run_err(&mut command);
        assert!(err.contains(says), "{toml}: {err}");
        assert!(!err.contains(KEY), "{err}");
    }
    let out = run_ok(idmint(d).args(["decode", "0000003F", "--encoding", "crockford32"]));
    assert!(out.contains("id         111"), "{out}");
    let err = run_err(idmint(d).args(["decode", "x!", "--encoding", "base62"]));
    assert!(err.contains("outside the alphabet"), "{err}");
}
