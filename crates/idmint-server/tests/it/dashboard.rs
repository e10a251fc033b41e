//! The dashboard in a real browser: headless Chromium (Debian's `chromium`, named by
//! `IDMINT_TEST_CHROMIUM`; CI sets it, elsewhere the test is skipped and the run's summary says so) driven over
//! the DevTools protocol. The page must load with no console error or exception, show the
//! tags the test created, and update by itself after ids are fetched. A screenshot is saved
//! as a test artefact (`target/test-artefacts/dashboard.png`). At 1 366, 1 400, 800 and
//! 390 px wide (a phone in portrait), with the admin controls shown and the longest names,
//! descriptions and numbers a tag can have, no element reaches past the viewport's edges
//! (screenshots `dashboard-WIDTH.png`), and each tag shows its description, update time, ids
//! issued and a sparkline with its scale. Every time it shows reads `YYYY-MM-DD HH:MM:SS UTC`,
//! whatever the viewer's time zone.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

use crate::support::TestServer;

const TAG: &str = "dash_orders";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_loads_without_errors_shows_tags_and_updates() {
    let no_chromium = idmint_testkit::skip::NO_CHROMIUM;
    let Some(chromium) = idmint_testkit::opt_in("IDMINT_TEST_CHROMIUM", no_chromium) else {
        return;
    };
    let server = TestServer::with_snowflake().await;
    let created =
        server.create_tag(json!({"tag": TAG, "step": 100, "description": "<b>not html</b>"})).await;
    assert_eq!(created.status(), 201);
    assert_eq!(server.create_tag(json!({"tag": "dash_users"})).await.status(), 201);
    assert_eq!(server.get(&format!("/v1/segment/{TAG}?count=10")).await.status(), 200);
    let base = server.base.clone();
    let shot = tokio::task::spawn_blocking(move || browse(&chromium, &base)).await.unwrap();
    server.stop().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artefacts");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dashboard.png");
    std::fs::write(&path, &shot).unwrap();
    assert!(shot.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
    eprintln!("screenshot: {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_is_read_only_until_the_admin_token_is_entered() {
    let no_chromium = idmint_testkit::skip::NO_CHROMIUM;
    let Some(chromium) = idmint_testkit::opt_in("IDMINT_TEST_CHROMIUM", no_chromium) else {
        return;
    };
    const ADMIN: &str = "dashboard-admin-token-1";
    let auth =
        idmint_server::Auth::new(Some(idmint_server::Token::parse(ADMIN).unwrap()), Vec::new());
    let server = TestServer::with_auth_and_limits(
        std::sync::Arc::new(idmint_store::MemoryStore::new()),
        auth,
        idmint_server::HttpLimits::default(),
        idmint::segment::SegmentConfig::default(),
    )
    .await;
    let base = server.base.clone();
    tokio::task::spawn_blocking(move || {
        let profile = tempfile::tempdir().unwrap();
        let (mut browser, ws_url) = launch(&chromium, profile.path());
        let mut cdp = Cdp::connect(&ws_url);
        let target = cdp.call("Target.createTarget", json!({"url": "about:blank"}), None);
        let attached = cdp.call("Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true}), None);
        let session = attached["sessionId"].as_str().unwrap().to_string();
        let s = Some(session.as_str());
        cdp.call("Runtime.enable", json!({}), s);
        cdp.call("Page.navigate", json!({"url": format!("{base}/?refresh_ms=300")}), s);
        let eval = |cdp: &mut Cdp, expression: &str| {
            cdp.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}), s)["result"]["value"].clone()
        };
        let visible = "getComputedStyle(document.getElementById('create-form')).display";
        wait_for(&mut cdp, "the read-only page", |cdp| {
            (eval(cdp, "document.getElementById('mode').textContent") == "read-only").then_some(())
        });
        assert_eq!(eval(&mut cdp, visible), "none", "admin controls shown without a token");
        // The token, then a tag created from the page's form through the admin route.
        let enter = format!("document.getElementById('token').value = '{ADMIN}'; document.getElementById('token-form').requestSubmit(); 1");
        eval(&mut cdp, &enter);
        assert_eq!(eval(&mut cdp, visible), "flex", "admin controls hidden after the token");
        eval(&mut cdp, "document.getElementById('new-tag').value = 'made_in_page'; document.getElementById('create-form').requestSubmit(); 1");
        let row = "document.querySelector('[data-tag=\"made_in_page\"]') !== null";
        wait_for(&mut cdp, "the tag made in the page", |cdp| (eval(cdp, row) == true).then_some(()));
        // The token is in the tab's session storage, not in the page's address or cookies.
        assert_eq!(eval(&mut cdp, "document.cookie"), "");
        assert!(!eval(&mut cdp, "location.href").as_str().unwrap().contains(ADMIN));
        let errors = cdp.errors();
        assert!(errors.is_empty(), "console errors or exceptions: {errors:#?}");
        let _ = browser.kill();
        let _ = browser.wait();
    })
    .await
    .unwrap();
    let tag: serde_json::Value = server.get("/v1/tags/made_in_page").await.json().await.unwrap();
    assert_eq!(tag["tag"], "made_in_page");
    server.stop().await;
}

/// A node without an admin token (the quick start) is administered from its own page,
/// opened as `http://127.0.0.1:PORT` or `http://localhost:PORT`: the page's changes carry
/// its own origin, which the loopback guard lets through (`rebinding.rs` checks the
/// refusals of other hosts and origins).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_a_token_is_administered_from_its_own_page_by_either_loopback_name() {
    let no_chromium = idmint_testkit::skip::NO_CHROMIUM;
    let Some(chromium) = idmint_testkit::opt_in("IDMINT_TEST_CHROMIUM", no_chromium) else {
        return;
    };
    let server = TestServer::memory().await;
    let port = server.base.rsplit_once(':').unwrap().1.to_string();
    tokio::task::spawn_blocking(move || {
        let profile = tempfile::tempdir().unwrap();
        let (mut browser, ws_url) = launch(&chromium, profile.path());
        let mut cdp = Cdp::connect(&ws_url);
        let target = cdp.call("Target.createTarget", json!({"url": "about:blank"}), None);
        let attached = cdp.call("Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true}), None);
        let session = attached["sessionId"].as_str().unwrap().to_string();
        let s = Some(session.as_str());
        cdp.call("Runtime.enable", json!({}), s);
        let eval = |cdp: &mut Cdp, expression: &str| {
            cdp.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}), s)["result"]["value"].clone()
        };
        for (name, host) in [("made_on_127", "127.0.0.1"), ("made_on_localhost", "localhost")] {
            let base = format!("http://{host}:{port}");
            cdp.call("Page.navigate", json!({"url": format!("{base}/?refresh_ms=300")}), s);
            wait_for(&mut cdp, "the page of a node without a token", |cdp| {
                let mode = eval(cdp, "document.getElementById('mode').textContent");
                mode.as_str().is_some_and(|m| m.starts_with("no admin token")).then_some(())
            });
            let create = format!("document.getElementById('new-tag').value = '{name}'; document.getElementById('create-form').requestSubmit(); 1");
            eval(&mut cdp, &create);
            let row = format!("document.querySelector('[data-tag=\"{name}\"]') !== null");
            wait_for(&mut cdp, name, |cdp| (eval(cdp, &row) == true).then_some(()));
            let message = eval(&mut cdp, "document.getElementById('message').textContent");
            assert!(message.as_str().unwrap().ends_with("done"), "{base}: {message}");
        }
        let errors = cdp.errors();
        assert!(errors.is_empty(), "console errors or exceptions: {errors:#?}");
        let _ = browser.kill();
        let _ = browser.wait();
    })
    .await
    .unwrap();
    for name in ["made_on_127", "made_on_localhost"] {
        let tag: serde_json::Value =
            server.get(&format!("/v1/tags/{name}")).await.json().await.unwrap();
        assert_eq!(tag["tag"], name);
    }
    server.stop().await;
}

/// An idle tag (no id taken for the idle period, 300 ms here, 60 s by default) shows its
/// runway as "idle", while a busy tag's shows a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_an_idle_tags_runway_as_idle() {
    let no_chromium = idmint_testkit::skip::NO_CHROMIUM;
    let Some(chromium) = idmint_testkit::opt_in("IDMINT_TEST_CHROMIUM", no_chromium) else {
        return;
    };
    let config = idmint::segment::SegmentConfig::default().with_idle_after_ms(300).unwrap();
    let server = TestServer::setup().segment_config(config).start().await;
    for tag in ["dash_idle", "dash_busy"] {
        assert_eq!(server.create_tag(json!({"tag": tag, "step": 100_000})).await.status(), 201);
        assert_eq!(server.get(&format!("/v1/segment/{tag}?count=10")).await.status(), 200);
    }
    let base = server.base.clone();
    tokio::task::spawn_blocking(move || {
        let profile = tempfile::tempdir().unwrap();
        let (mut browser, ws_url) = launch(&chromium, profile.path());
        let mut cdp = Cdp::connect(&ws_url);
        let target = cdp.call("Target.createTarget", json!({"url": "about:blank"}), None);
        let attached = cdp.call("Target.attachToTarget", json!({"targetId": target["targetId"], "flatten": true}), None);
        let session = attached["sessionId"].as_str().unwrap().to_string();
        let s = Some(session.as_str());
        cdp.call("Runtime.enable", json!({}), s);
        cdp.call("Page.navigate", json!({"url": format!("{base}/?refresh_ms=200")}), s);
        let runway = |cdp: &mut Cdp, tag: &str| -> Option<String> {
            let expression = format!("(() => {{ const r = document.querySelector('[data-tag=\"{tag}\"] [data-field=runway]'); return r ? r.textContent : null; }})()");
            let result = cdp.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true}), s);
            result["result"]["value"].as_str().map(str::to_string)
        };
        let (idle, busy) = wait_for(&mut cdp, "an idle runway beside a busy one", |cdp| {
            http_get(&base, "/v1/segment/dash_busy?count=5");
            let idle = runway(cdp, "dash_idle")?;
            let busy = runway(cdp, "dash_busy")?;
            (idle == "idle" && busy != "idle").then_some((idle, busy))
        });
        assert_eq!(idle, "idle");
        assert!(busy.ends_with(" s") || busy.ends_with(" min") || busy.ends_with(" h") || busy.ends_with(" d"), "{busy}");
        let errors = cdp.errors();
        assert!(errors.is_empty(), "console errors or exceptions: {errors:#?}");
        let _ = browser.kill();
        let _ = browser.wait();
    })
    .await
    .unwrap();
    server.stop().await;
}

/// The widths the page must fit, with a height and whether it is a phone (touch, mobile
/// viewport): laptops (1 366 and 1 400), a half screen or tablet (800), a phone (390 × 844).
const VIEWPORTS: [(u32, u32, bool); 4] =
    [(1366, 768, false), (1400, 900, false), (800, 900, false), (390, 844, true)];

/// Every visible element whose box reaches past the viewport's left or right edge (half a
/// pixel of rounding allowed), described, and whether the page scrolls sideways.
const OVERFLOW_PROBE: &str = r#"(() => {
  const width = document.documentElement.clientWidth;
  const out = [];
  for (const e of document.querySelectorAll("body *")) {
    const r = e.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    if (r.right > width + 0.5 || r.left < -0.5) {
      out.push(e.tagName.toLowerCase() + (e.className && e.className.baseVal === undefined ? "." + e.className : "") + " [" + Math.round(r.left) + ", " + Math.round(r.right) + "] " + (e.textContent || "").slice(0, 40));
    }
  }
  if (document.documentElement.scrollWidth > width) out.push("page scrolls sideways: " + document.documentElement.scrollWidth + " > " + width);
  return out;
})()"#;

/// Every time the page shows: its text, whether it reads `YYYY-MM-DD HH:MM:SS UTC`, and
/// how far that UTC time is from the clock, in seconds.
const TIMES_PROBE: &str = r#"(() => {
  const shown = [document.getElementById('updated')]
    .concat(Array.from(document.querySelectorAll('[data-field=updated]')));
  return shown.map(node => {
    const text = node.textContent;
    const format = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/.test(text);
    const at = Date.parse(text.replace(' UTC', 'Z').replace(' ', 'T'));
    return { text, format, age_s: (Date.now() - at) / 1000 };
  });
})()"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_fits_laptops_a_half_screen_and_a_phone() {
    let no_chromium = idmint_testkit::skip::NO_CHROMIUM;
    let Some(chromium) = idmint_testkit::opt_in("IDMINT_TEST_CHROMIUM", no_chromium) else {
        return;
    };
    // No admin token (loopback): the admin controls, the delete buttons among them, show.
    let server = TestServer::with_snowflake().await;
    let long_tag = "w".repeat(idmint_core::limits::TAG_LEN_MAX);
    let description = "a description long enough to need more than one line on a phone, \
                       naming the team, the table and the service that takes these ids";
    for body in [
        json!({"tag": "fit_orders", "step": 100, "description": "orders of the web shop"}),
        json!({"tag": long_tag, "description": description}),
        json!({"tag": "fit_big", "start": 9_000_000_000_000_000_000_u64}),
    ] {
        assert_eq!(server.create_tag(body).await.status(), 201);
    }
    for tag in ["fit_orders", "fit_big", long_tag.as_str()] {
        assert_eq!(server.get(&format!("/v1/segment/{tag}?count=7")).await.status(), 200);
    }
    let base = server.base.clone();
    let shots = tokio::task::spawn_blocking(move || {
        let profile = tempfile::tempdir().unwrap();
        let (mut browser, ws_url) = launch(&chromium, profile.path());
        let mut cdp = Cdp::connect(&ws_url);
        let target = cdp.call("Target.createTarget", json!({"url": "about:blank"}), None);
        let attached = cdp.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
            None,
        );
        let session = attached["sessionId"].as_str().unwrap().to_string();
        let s = Some(session.as_str());
        for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
            cdp.call(domain, json!({}), s);
        }
        let eval = |cdp: &mut Cdp, expression: &str| {
            let answer = cdp.call(
                "Runtime.evaluate",
                json!({"expression": expression, "returnByValue": true}),
                s,
            );
            answer["result"]["value"].clone()
        };
        let mut shots = Vec::new();
        for (width, height, mobile) in VIEWPORTS {
            cdp.call(
                "Emulation.setDeviceMetricsOverride",
                json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": mobile}),
                s,
            );
            cdp.call("Page.navigate", json!({"url": format!("{base}/?refresh_ms=300")}), s);
            let card = "(() => { const c = document.querySelector('[data-tag=\"fit_orders\"]'); \
                        return c && document.body.classList.contains('admin') ? c.innerText : null; })()";
            let text = wait_for(&mut cdp, "the tag card", |cdp| {
                eval(cdp, card).as_str().map(str::to_string)
            });
            // What a tag shows: its description, update time, ids issued, and the scale of
            // its sparkline.
            for expected in ["orders of the web shop", "UTC", "ids issued here", "ids/s", "delete"] {
                assert!(text.contains(expected), "{width} px: no {expected:?} in\n{text}");
            }
            let issued = "document.querySelector('[data-tag=\"fit_orders\"] [data-field=ids_issued]').textContent";
            assert_eq!(eval(&mut cdp, issued), "7", "{width} px");
            let overflowing = eval(&mut cdp, OVERFLOW_PROBE);
            assert_eq!(overflowing, json!([]), "{width} px: elements past the viewport");
            let shot = cdp.call("Page.captureScreenshot", json!({"format": "png"}), s);
            shots.push((width, base64_decode(shot["data"].as_str().unwrap())));
        }
        let errors = cdp.errors();
        assert!(errors.is_empty(), "console errors or exceptions: {errors:#?}");
        let _ = browser.kill();
        let _ = browser.wait();
        shots
    })
    .await
    .unwrap();
    server.stop().await;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artefacts");
    std::fs::create_dir_all(&dir).unwrap();
    for (width, png) in shots {
        assert!(png.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
        std::fs::write(dir.join(format!("dashboard-{width}.png")), png).unwrap();
    }
}

/// Opens the dashboard, checks it, fetches ids, checks it again; returns a screenshot.
fn browse(chromium: &str, base: &str) -> Vec<u8> {
    let profile = tempfile::tempdir().unwrap();
    let (mut browser, ws_url) = launch(chromium, profile.path());
    let mut cdp = Cdp::connect(&ws_url);
    let target = cdp.call("Target.createTarget", json!({"url": "about:blank"}), None);
    let target_id = target["targetId"].as_str().unwrap().to_string();
    let attached =
        cdp.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true}), None);
    let session = attached["sessionId"].as_str().unwrap().to_string();
    let s = Some(session.as_str());
    for domain in ["Runtime.enable", "Log.enable", "Page.enable"] {
        cdp.call(domain, json!({}), s);
    }
    cdp.call(
        "Emulation.setDeviceMetricsOverride",
        json!({"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": false}),
        s,
    );
    // A viewer half an hour off any whole-hour zone: a time shown in local time would differ.
    cdp.call("Emulation.setTimezoneOverride", json!({"timezoneId": "Asia/Kolkata"}), s);
    cdp.call("Page.navigate", json!({"url": format!("{base}/?refresh_ms=300")}), s);

    // The tags the test created appear, with what the node serves.
    let row = |cdp: &mut Cdp| -> Option<String> {
        let expression = format!(
            "(() => {{ const r = document.querySelector('[data-tag=\"{TAG}\"]'); return r ? r.innerText : null; }})()"
        );
        let result = cdp.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
            s,
        );
        result["result"]["value"].as_str().map(str::to_string)
    };
    let first = wait_for(&mut cdp, "the tag row", |cdp| row(cdp));
    assert!(first.contains(TAG), "{first}");
    let text = |cdp: &mut Cdp| {
        let result = cdp.call(
            "Runtime.evaluate",
            json!({"expression": "document.body.innerText", "returnByValue": true}),
            s,
        );
        result["result"]["value"].as_str().unwrap_or_default().to_string()
    };
    let page = text(&mut cdp);
    assert!(page.contains("dash_users"), "second tag missing:\n{page}");
    assert!(page.contains("worker"), "snowflake worker missing:\n{page}");
    assert!(page.contains("up"), "store health missing:\n{page}");
    let description_as_markup = cdp.call(
        "Runtime.evaluate",
        json!({"expression": "document.querySelectorAll('b').length", "returnByValue": true}),
        s,
    );
    assert_eq!(description_as_markup["result"]["value"], 0, "data was rendered as HTML");

    // Every time on the page (the last update, each row's change) in one format, UTC.
    let times =
        cdp.call("Runtime.evaluate", json!({"expression": TIMES_PROBE, "returnByValue": true}), s);
    let times = times["result"]["value"].as_array().cloned().unwrap_or_default();
    assert!(times.len() >= 3, "the page's times: {times:?}");
    for time in &times {
        let text = time["text"].as_str().unwrap_or_default();
        assert_eq!(time["format"], true, "{text:?} is not YYYY-MM-DD HH:MM:SS UTC: {times:?}");
        let age_s = time["age_s"].as_f64().unwrap_or(f64::MAX);
        assert!(age_s.abs() < 120.0, "{text:?} is {age_s} s off the clock (not UTC?)");
    }

    // Ids fetched elsewhere move the store's max_id shown in the row, without a reload.
    let max_id = |cdp: &mut Cdp| -> Option<u64> {
        let expression = format!(
            "(() => {{ const r = document.querySelector('[data-tag=\"{TAG}\"]'); return r ? r.querySelector('[data-field=max_id]').textContent : null; }})()"
        );
        let result = cdp.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
            s,
        );
        result["result"]["value"].as_str().and_then(|v| v.replace(',', "").parse().ok())
    };
    let before = wait_for(&mut cdp, "the max_id cell", |cdp| max_id(cdp));
    for _ in 0..3 {
        http_get(base, &format!("/v1/segment/{TAG}?count=150"));
    }
    let after =
        wait_for(&mut cdp, "max_id to move", |cdp| max_id(cdp).filter(|m| *m >= before + 300));
    assert!(after >= before + 300, "{before} -> {after}");

    let errors = cdp.errors();
    assert!(errors.is_empty(), "console errors or exceptions: {errors:#?}");
    let shot = cdp.call("Page.captureScreenshot", json!({"format": "png"}), s);
    let png = base64_decode(shot["data"].as_str().unwrap());
    let _ = browser.kill();
    let _ = browser.wait();
    png
}

/// Starts Chromium headless on a free DevTools port; returns it and the browser's
/// WebSocket address.
fn launch(chromium: &str, profile: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-quic",
            "--no-first-run",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {chromium}: {e}"));
    let stderr = child.stderr.take().unwrap();
    let (found, url) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(at) = line.find("ws://").filter(|_| !sent) {
                let _ = found.send(line[at..].trim().to_string());
                sent = true;
            }
        }
    });
    let url =
        url.recv_timeout(Duration::from_secs(60)).expect("Chromium printed no DevTools address");
    (child, url)
}

/// A DevTools protocol connection: calls by id, events kept.
struct Cdp {
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    events: Vec<Value>,
}

impl Cdp {
    fn connect(url: &str) -> Cdp {
        let (ws, _) = tungstenite::connect(url).unwrap();
        if let MaybeTlsStream::Plain(stream) = ws.get_ref() {
            stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        }
        Cdp { ws, next_id: 1, events: Vec::new() }
    }

    /// Sends a command and waits for its answer; a protocol error fails the test.
    fn call(&mut self, method: &str, params: Value, session: Option<&str>) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = json!(session);
        }
        self.ws.send(Message::text(message.to_string())).unwrap();
        loop {
            let Message::Text(text) = self.ws.read().unwrap() else { continue };
            let value: Value = serde_json::from_str(&text).unwrap();
            if value["id"] == json!(id) {
                assert!(value.get("error").is_none(), "{method}: {value}");
                return value["result"].clone();
            }
            self.events.push(value);
        }
    }

    /// Console errors, uncaught exceptions and error log entries seen so far.
    fn errors(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| match e["method"].as_str() {
                Some("Runtime.exceptionThrown") => true,
                Some("Runtime.consoleAPICalled") => {
                    matches!(e["params"]["type"].as_str(), Some("error" | "assert"))
                }
                Some("Log.entryAdded") => e["params"]["entry"]["level"] == "error",
                _ => false,
            })
            .collect()
    }
}

/// Polls `probe` every 100 ms for up to 15 s.
fn wait_for<T>(cdp: &mut Cdp, what: &str, mut probe: impl FnMut(&mut Cdp) -> Option<T>) -> T {
    let began = Instant::now();
    loop {
        if let Some(value) = probe(cdp) {
            return value;
        }
        assert!(
            began.elapsed() < Duration::from_secs(15),
            "timed out waiting for {what}; events: {:#?}",
            cdp.events
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A plain HTTP/1.1 GET (the browser thread has no async runtime); panics unless 200.
fn http_get(base: &str, path: &str) {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
}

/// Standard base64 (the screenshot), padding allowed.
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|c| *c != b'=') {
        acc = (acc << 6) | value(c);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}
