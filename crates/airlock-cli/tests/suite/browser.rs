//! The browser harness of the web UI's end-to-end tests (UI-2): the real
//! Debian Chromium, headless, driven through chromedriver (WebDriver) with
//! fantoccini; the vendored axe-core for WCAG 2 A/AA checks; screenshots
//! under `target/ui-screenshots/`; and the count of CSP violation reports a
//! server logged.
//!
//! The suite is synchronous: a [`Browser`] owns a small tokio runtime and
//! blocks on each WebDriver command. Without `/usr/bin/chromium` and
//! `/usr/bin/chromedriver` (which `scripts/test` installs) a browser test
//! fails, unless `AIRLOCK_TEST_SKIP_BROWSER` is set.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

use crate::suite::runs::{Env, Server};
use crate::suite::support::Who;

/// Set to skip, rather than fail, the browser tests on a machine without
/// Chromium and chromedriver.
pub(crate) const SKIP_BROWSER: &str = "AIRLOCK_TEST_SKIP_BROWSER";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// The vendored axe-core (see `tests/vendor/README.md`) and its SHA-256,
/// checked before each use.
const AXE_FILE: &str = "axe-core-4.14.1.min.js";
const AXE_SHA256: &str = "29348999450cdf2849a8e70b7912fc2da85a849da39c0d0d5394f51d4a9ed95c";
/// The rules every page must pass: WCAG 2.0 and 2.1, levels A and AA.
const AXE_TAGS: [&str; 4] = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"];

/// How long a wait may last before the test fails: a guard against a hang,
/// not a timing assertion.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(60);

/// One headless Chromium with a fresh profile, and the chromedriver that
/// started it. Dropping it ends the session, then both processes.
pub(crate) struct Browser {
    rt: tokio::runtime::Runtime,
    client: Option<Client>,
    /// Pages run no script of their own ([`Browser::start_without_javascript`]).
    no_javascript: bool,
    driver: Child,
    /// The profile (`--user-data-dir`) and chromedriver's log.
    dir: tempfile::TempDir,
}

/// An axe-core violation, summarised.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    pub(crate) id: String,
    pub(crate) impact: String,
    pub(crate) help: String,
    /// The CSS selector of each offending node.
    pub(crate) targets: Vec<String>,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}): {} at {}",
            self.id,
            self.impact,
            self.help,
            self.targets.join(", ")
        )
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Browser {
    /// A new browser, or `None` when Chromium or chromedriver is missing and
    /// [`SKIP_BROWSER`] is set (the test then returns, skipped out loud).
    /// Missing without the variable, the test fails naming `scripts/test`.
    pub(crate) fn start() -> Option<Self> {
        Self::start_with(true)
    }

    /// A new browser whose pages run no JavaScript: what a form does
    /// without `app.js`. WebDriver's own scripts still run, and [`axe`]
    /// turns page scripts on for its scan only (its timers need them).
    ///
    /// [`axe`]: Browser::axe
    pub(crate) fn start_without_javascript() -> Option<Self> {
        Self::start_with(false)
    }

    fn start_with(javascript: bool) -> Option<Self> {
        let missing: Vec<&str> = [CHROMIUM, CHROMEDRIVER]
            .into_iter()
            .filter(|p| !Path::new(p).exists())
            .collect();
        if !missing.is_empty() {
            assert!(
                std::env::var_os(SKIP_BROWSER).is_some(),
                "{} missing: run scripts/test (it installs chromium and chromium-driver), \
                 or set {SKIP_BROWSER}=1 to skip the browser tests",
                missing.join(" and ")
            );
            eprintln!(
                "skipped ({SKIP_BROWSER}): {} missing",
                missing.join(" and ")
            );
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("profile");
        std::fs::create_dir(&profile).unwrap();
        let log = std::fs::File::create(dir.path().join("chromedriver.log")).unwrap();
        let port = free_port();
        let mut cmd = Command::new(CHROMEDRIVER);
        cmd.arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // Its own process group, so Drop can end Chrome with it.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let driver = cmd.spawn().expect("start chromedriver");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut b = Self {
            rt,
            client: None,
            no_javascript: !javascript,
            driver,
            dir,
        };
        let deadline = Instant::now() + HANG_GUARD;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(st)) = b.driver.try_wait() {
                panic!("chromedriver exited ({st}): {}", b.driver_log());
            }
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen: {}",
                b.driver_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    format!("--user-data-dir={}", profile.display()),
                    "--window-size=1280,900",
                ],
            },
        });
        let Value::Object(caps) = caps else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = b.rt.block_on(async {
            let mut builder = ClientBuilder::new(connector);
            builder.capabilities(caps);
            builder.connect(&format!("http://127.0.0.1:{port}")).await
        });
        let client = client.unwrap_or_else(|e| {
            panic!(
                "no WebDriver session: {e}; chromedriver: {}",
                b.driver_log()
            )
        });
        b.client = Some(client);
        // A hung page or script fails the test rather than the whole run.
        b.block(|c| async move {
            c.update_timeouts(fantoccini::wd::TimeoutConfiguration::new(
                Some(HANG_GUARD),
                Some(HANG_GUARD),
                Some(Duration::ZERO),
            ))
            .await
        })
        .unwrap();
        if !javascript {
            b.page_scripts(false);
        }
        Some(b)
    }

    /// Turns the pages' own scripts off or on (DevTools'
    /// `Emulation.setScriptExecutionDisabled`, which lasts across
    /// navigations of the tab).
    fn page_scripts(&self, on: bool) {
        self.cdp(
            "Emulation.setScriptExecutionDisabled",
            json!({ "value": !on }),
        );
    }

    /// Sends one DevTools command through chromedriver.
    pub(crate) fn cdp(&self, cmd: &str, params: Value) -> Value {
        let c = Cdp {
            cmd: cmd.to_string(),
            params,
        };
        self.block(|cl| async move { cl.issue_cmd(c).await })
            .unwrap_or_else(|e| panic!("DevTools {cmd}: {e}"))
    }

    fn driver_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("chromedriver.log")).unwrap_or_default()
    }

    fn client(&self) -> Client {
        self.client.clone().expect("a WebDriver session")
    }

    /// Runs one async WebDriver exchange to completion.
    fn block<T, F, Fut>(&self, f: F) -> T
    where
        F: FnOnce(Client) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        self.rt.block_on(f(self.client()))
    }

    /// The HTTP status of the current page's main response (Navigation
    /// Timing's `responseStatus`; 0 when the browser does not say).
    pub(crate) fn status(&self) -> u16 {
        self.try_execute(
            "const n = performance.getEntriesByType('navigation')[0]; \
             return n ? n.responseStatus : 0;",
        )
        .ok()
        .and_then(|v| v.as_u64())
        .unwrap_or(0) as u16
    }

    /// Where the browser is, for failure messages.
    pub(crate) fn url(&self) -> String {
        self.block(|c| async move { c.current_url().await })
            .map(|u| u.to_string())
            .unwrap_or_else(|e| format!("(no url: {e})"))
    }

    /// Opens `url` and waits for it to load.
    pub(crate) fn goto(&self, url: &str) {
        self.block(|c| async move { c.goto(url).await })
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.block(|c| async move { c.find(Locator::Css(css)).await })
            .unwrap_or_else(|e| panic!("no element {css} on {}: {e}", self.url()))
    }

    /// Whether an element matches `css` now.
    pub(crate) fn exists(&self, css: &str) -> bool {
        self.block(|c| async move { c.find_all(Locator::Css(css)).await })
            .map(|v| !v.is_empty())
            .unwrap_or(false)
    }

    /// Replaces the value of the field `css` with `text`, typed.
    pub(crate) fn fill(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.rt
            .block_on(async {
                e.clear().await?;
                e.send_keys(text).await
            })
            .unwrap_or_else(|err| panic!("fill {css} on {}: {err}", self.url()));
    }

    /// Chooses the option whose value is `value` in the `select` at `css`.
    pub(crate) fn select(&self, css: &str, value: &str) {
        let e = self.find(css);
        self.rt
            .block_on(e.select_by_value(value))
            .unwrap_or_else(|err| panic!("select {value} in {css} on {}: {err}", self.url()));
    }

    /// Clicks the element at `css` (chromedriver waits for a navigation it
    /// starts).
    pub(crate) fn click(&self, css: &str) {
        let e = self.find(css);
        self.rt
            .block_on(e.click())
            .unwrap_or_else(|err| panic!("click {css} on {}: {err}", self.url()));
    }

    /// Clicks the element at `css` and waits until a new page has loaded
    /// (the click's navigation may start after the click returns).
    pub(crate) fn click_and_load(&self, css: &str) {
        self.execute("window.__airlockOldPage = true; return null;", vec![]);
        self.click(css);
        self.wait_until(
            &format!("a new page after clicking {css}"),
            "window.__airlockOldPage !== true && document.readyState === 'complete'",
        );
    }

    /// Submits the form at `form_css` as a user does: clicks its submit
    /// button, then waits for the page the form leads to.
    pub(crate) fn submit(&self, form_css: &str) {
        let button = format!(
            "{form_css} button[type=submit], {form_css} input[type=submit], \
             {form_css} button:not([type])"
        );
        self.click_and_load(&button);
    }

    /// Submits the form at `form_css` whose submission asks for a
    /// confirmation (`window.confirm`): accepts the dialog, returns its
    /// text, and waits for the page the form leads to.
    pub(crate) fn submit_confirmed(&self, form_css: &str) -> String {
        self.execute("window.__airlockOldPage = true; return null;", vec![]);
        let button = format!(
            "{form_css} button[type=submit], {form_css} input[type=submit], \
             {form_css} button:not([type])"
        );
        self.click(&button);
        let deadline = Instant::now() + HANG_GUARD;
        let text = loop {
            match self.block(|c| async move { c.get_alert_text().await }) {
                Ok(t) => break t,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "no confirmation dialog after submitting {form_css}: {e}"
                ),
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        self.block(|c| async move { c.accept_alert().await })
            .unwrap_or_else(|e| panic!("accept the dialog of {form_css}: {e}"));
        self.wait_until(
            &format!("a new page after confirming {form_css}"),
            "window.__airlockOldPage !== true && document.readyState === 'complete'",
        );
        text
    }

    /// The rendered text of the element at `css`.
    pub(crate) fn text(&self, css: &str) -> String {
        let e = self.find(css);
        self.rt
            .block_on(e.text())
            .unwrap_or_else(|err| panic!("text of {css} on {}: {err}", self.url()))
    }

    /// The value of attribute `name` of the element at `css`.
    pub(crate) fn attr(&self, css: &str, name: &str) -> Option<String> {
        let e = self.find(css);
        self.rt
            .block_on(e.attr(name))
            .unwrap_or_else(|err| panic!("attr {name} of {css} on {}: {err}", self.url()))
    }

    /// The page's HTML as the browser has it now.
    pub(crate) fn source(&self) -> String {
        self.block(|c| async move { c.source().await }).unwrap()
    }

    /// Waits until an element matches `css` (hang guard: [`HANG_GUARD`]).
    pub(crate) fn wait_for(&self, css: &str) {
        let r = self.block(|c| async move {
            c.wait()
                .at_most(HANG_GUARD)
                .every(Duration::from_millis(100))
                .for_element(Locator::Css(css))
                .await
        });
        if let Err(e) = r {
            panic!("{css} did not appear on {} ({e})", self.url());
        }
    }

    /// Waits until the JavaScript expression `js` is truthy (hang guard:
    /// [`HANG_GUARD`]). `what` names the condition in a failure.
    /// A script that fails (the page is navigating) counts as not yet.
    pub(crate) fn wait_until(&self, what: &str, js: &str) {
        let script = format!("return !!({js});");
        let deadline = Instant::now() + HANG_GUARD;
        loop {
            if self.try_execute(&script).ok() == Some(Value::Bool(true)) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not true after {HANG_GUARD:?} on {}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `script` (a function body; `return` gives the result).
    pub(crate) fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.block(|c| async move { c.execute(script, args).await })
            .unwrap_or_else(|e| panic!("script failed on {}: {e}", self.url()))
    }

    /// Runs `script`; an error (the page navigating away, a script error)
    /// is returned, not a failure.
    pub(crate) fn try_execute(&self, script: &str) -> Result<Value, String> {
        self.block(|c| async move { c.execute(script, vec![]).await })
            .map_err(|e| e.to_string())
    }

    /// The path and query of the current page.
    pub(crate) fn path(&self) -> String {
        let u = self
            .block(|c| async move { c.current_url().await })
            .unwrap_or_else(|e| panic!("no current url: {e}"));
        match u.query() {
            Some(q) if !q.is_empty() => format!("{}?{q}", u.path()),
            _ => u.path().to_string(),
        }
    }

    /// Sets a cookie (not HttpOnly, path `/`, SameSite=Lax) for the current
    /// page's origin, as a page script would. (WebDriver's Add Cookie
    /// refuses a cookie for an IP address host.)
    pub(crate) fn set_cookie(&self, name: &str, value: &str) {
        self.execute(
            "document.cookie = arguments[0] + '=' + arguments[1] + '; path=/; SameSite=Lax'; \
             return null;",
            vec![json!(name), json!(value)],
        );
    }

    /// Loads the current page again.
    pub(crate) fn refresh(&self) {
        self.block(|c| async move { c.refresh().await })
            .unwrap_or_else(|e| panic!("refresh {}: {e}", self.url()));
    }

    /// Runs `script`, which calls its last argument with the result.
    pub(crate) fn execute_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.block(|c| async move { c.execute_async(script, args).await })
            .unwrap_or_else(|e| panic!("async script failed on {}: {e}", self.url()))
    }

    /// Fetches `path` from the page's origin with the browser's cookies;
    /// returns the status and the body's bytes.
    pub(crate) fn fetch_bytes(&self, path: &str) -> (u16, Vec<u8>) {
        let v = self.execute_async(
            "const [path, done] = arguments;
             fetch(path, {credentials: 'same-origin'})
               .then(async r => done({status: r.status,
                                      bytes: Array.from(new Uint8Array(await r.arrayBuffer()))}))
               .catch(e => done({error: String(e)}));",
            vec![json!(path)],
        );
        if let Some(e) = v.get("error") {
            panic!("fetch {path}: {e}");
        }
        let status = v["status"].as_u64().unwrap_or(0) as u16;
        let bytes = v["bytes"]
            .as_array()
            .map(|a| a.iter().map(|b| b.as_u64().unwrap_or(0) as u8).collect())
            .unwrap_or_default();
        (status, bytes)
    }

    /// Sizes the window so that the page's viewport (`innerWidth` ×
    /// `innerHeight`) is `width` × `height` CSS pixels: headless Chromium
    /// still counts a window frame in the outer size.
    pub(crate) fn set_window(&self, width: u32, height: u32) {
        self.set_outer(width, height);
        let v = self.execute("return [window.innerWidth, window.innerHeight];", vec![]);
        let (iw, ih) = (v[0].as_u64().unwrap_or(0), v[1].as_u64().unwrap_or(0));
        if (iw, ih) != (u64::from(width), u64::from(height)) && iw > 0 && ih > 0 {
            let w = 2 * i64::from(width) - iw as i64;
            let h = 2 * i64::from(height) - ih as i64;
            self.set_outer(w.max(1) as u32, h.max(1) as u32);
        }
    }

    fn set_outer(&self, width: u32, height: u32) {
        self.block(|c| async move { c.set_window_size(width, height).await })
            .unwrap_or_else(|e| panic!("set window {width}x{height}: {e}"));
    }

    /// The page's width as laid out, and the viewport's: a page that works at
    /// 375 px does not scroll sideways.
    pub(crate) fn widths(&self) -> (u64, u64) {
        let v = self.execute(
            "return [document.documentElement.scrollWidth, window.innerWidth];",
            vec![],
        );
        (v[0].as_u64().unwrap_or(0), v[1].as_u64().unwrap_or(0))
    }

    /// The outermost elements that reach past the right edge of the
    /// viewport, outside any scrolling or clipping box (`tag#id.class:
    /// right edge px`, at most five), to say what makes a page scroll
    /// sideways.
    pub(crate) fn overflowing(&self) -> Vec<String> {
        let v = self.execute(
            "const w = document.documentElement.clientWidth, out = [];
             for (const e of document.body.querySelectorAll('*')) {
               const r = e.getBoundingClientRect();
               // Its box, or its content spilling out of a box that shows it.
               const spill = getComputedStyle(e).overflowX === 'visible' ? r.left + e.scrollWidth : r.right;
               const right = Math.max(r.right, spill);
               if (right <= w + 1 || r.width === 0) continue;
               let p = e.parentElement, inside = false;
               while (p && p !== document.body) {
                 if (p.getBoundingClientRect().right > w + 1 ||
                     getComputedStyle(p).overflowX !== 'visible') { inside = true; break; }
                 p = p.parentElement;
               }
               if (inside) continue;
               out.push(e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
                 (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\\s+/).join('.') : '') +
                 (r.right > w + 1 ? ': right edge ' : ': content to ') + Math.round(right) + ' px');
               if (out.length >= 5) break;
             }
             return out;",
            vec![],
        );
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Presses Tab from the top of the page until focus comes back around
    /// (at most `max` times) and returns each element focused, in order,
    /// with whether it shows a focus indicator (an outline or a box
    /// shadow): keyboard focus order and visible focus (WCAG 2.4.3, 2.4.7),
    /// which axe does not check.
    pub(crate) fn tab_walk(&self, max: usize) -> Vec<(String, bool)> {
        const DESCRIBE: &str = "const e = document.activeElement;
             if (!e || e === document.body) return null;
             const s = getComputedStyle(e);
             const visible = (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0) ||
                             (s.boxShadow && s.boxShadow !== 'none');
             const label = (e.getAttribute('aria-label') || e.textContent || e.getAttribute('name') || '')
               .trim().replace(/\\s+/g, ' ').slice(0, 40);
             return [e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
                     (label ? ' \"' + label + '\"' : ''), visible];";
        // Focus starts from the top of the page, not after a field that has
        // `autofocus`: a focused element removed leaves the starting point
        // where it was.
        self.execute(
            "const s = document.createElement('span'); s.tabIndex = -1;
             document.body.prepend(s); s.focus(); s.remove(); window.scrollTo(0, 0);
             return null;",
            vec![],
        );
        let mut out: Vec<(String, bool)> = Vec::new();
        // A first Tab can land nowhere while the browser window is still
        // taking focus (seen once under a loaded full run): before the first
        // stop, nothing focused is retried a few times.
        let mut misses = 0;
        for _ in 0..max {
            self.block(|c| async move {
                let e = c.active_element().await?;
                e.send_keys("\u{E004}").await
            })
            .unwrap_or_else(|e| panic!("Tab on {}: {e}", self.url()));
            let v = self.execute(DESCRIBE, vec![]);
            let Some(stop) = v.as_array() else {
                if out.is_empty() && misses < 3 {
                    misses += 1;
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    continue;
                }
                break;
            };
            let desc = stop[0].as_str().unwrap_or("").to_string();
            if out.first().is_some_and(|(d, _)| *d == desc) {
                break;
            }
            // Tab also moves through the parts of a native control (a date
            // field's day, month, year and picker button) with focus on the
            // field itself; it is one stop, judged as focus enters it (the
            // parts' own rings are the browser's, out of the page's reach).
            if out.last().is_some_and(|(d, _)| *d == desc) {
                continue;
            }
            out.push((desc, stop[1] == json!(true)));
        }
        out
    }

    /// Writes a PNG of the whole page (the window stretched to the page's
    /// height, at most 6000 px, then put back) to
    /// `target/ui-screenshots/<name>.png`; returns its path.
    pub(crate) fn screenshot(&self, name: &str) -> PathBuf {
        let v = self.execute(
            "return [window.innerWidth, window.innerHeight, \
             Math.max(document.documentElement.scrollHeight, \
                      document.body ? document.body.scrollHeight : 0)];",
            vec![],
        );
        let (w, h) = (v[0].as_u64().unwrap_or(0), v[1].as_u64().unwrap_or(0));
        let tall = v[2].as_u64().unwrap_or(h).clamp(h, 6000);
        if tall != h {
            self.set_window(w as u32, tall as u32);
        }
        let png = self
            .block(|c| async move { c.screenshot().await })
            .unwrap_or_else(|e| panic!("screenshot {name}: {e}"));
        if tall != h {
            self.set_window(w as u32, h as u32);
        }
        assert!(png.starts_with(b"\x89PNG"), "screenshot {name} is no PNG");
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// Runs the vendored axe-core's WCAG 2 A/AA rules on the current page.
    pub(crate) fn axe(&self) -> Vec<Violation> {
        if self.no_javascript {
            self.page_scripts(true);
            let v = self.axe_scan();
            self.page_scripts(false);
            return v;
        }
        self.axe_scan()
    }

    fn axe_scan(&self) -> Vec<Violation> {
        let src = axe_source();
        let loaded = self.execute(&format!("{src}\n;return typeof axe;"), vec![]);
        assert_eq!(
            loaded,
            json!("object"),
            "axe-core did not load on {}",
            self.url()
        );
        let v = self.execute_async(
            "const [tags, done] = arguments;
             axe.run(document, {runOnly: {type: 'tag', values: tags}})
               .then(r => done({violations: r.violations.map(v => ({
                   id: v.id, impact: v.impact || '', help: v.help,
                   targets: v.nodes.map(n => JSON.stringify(n.target))}))}))
               .catch(e => done({error: String(e)}));",
            vec![json!(AXE_TAGS)],
        );
        if let Some(e) = v.get("error") {
            panic!("axe.run failed on {}: {e}", self.url());
        }
        v["violations"]
            .as_array()
            .unwrap_or_else(|| panic!("axe.run answered {v}"))
            .iter()
            .map(|x| Violation {
                id: x["id"].as_str().unwrap_or("").to_string(),
                impact: x["impact"].as_str().unwrap_or("").to_string(),
                help: x["help"].as_str().unwrap_or("").to_string(),
                targets: x["targets"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|t| t.as_str().unwrap_or("").to_string())
                            .collect()
                    })
                    .unwrap_or_default(),
            })
            .collect()
    }

    /// Fails, listing every violation, when axe finds any on the current
    /// page; `page` names it.
    pub(crate) fn assert_accessible(&self, page: &str) {
        let v = self.axe();
        assert!(
            v.is_empty(),
            "axe-core found {} WCAG 2 A/AA violation(s) on {page} ({}):\n{}",
            v.len(),
            self.url(),
            v.iter().map(|x| format!("  {x}\n")).collect::<String>()
        );
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the session (Chrome quits), then chromedriver; whatever of
        // either is left, by its process group and by the profile path in
        // its command line.
        if let Some(c) = self.client.take() {
            let _ = self
                .rt
                .block_on(async { tokio::time::timeout(Duration::from_secs(10), c.close()).await });
        }
        let pgid = self.driver.id() as i32;
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pgid),
            nix::sys::signal::Signal::SIGKILL,
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let marker = self.dir.path().to_string_lossy().into_owned();
        for pid in pids_with(&marker) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// chromedriver's `POST /session/{id}/goog/cdp/execute`.
#[derive(Debug)]
struct Cdp {
    cmd: String,
    params: Value,
}

impl fantoccini::wd::WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base_url.join(&format!(
            "session/{}/goog/cdp/execute",
            session_id.unwrap_or("")
        ))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        let body = json!({ "cmd": self.cmd, "params": self.params });
        (http::Method::POST, Some(body.to_string()))
    }
}

/// Host processes whose command line contains `marker`.
fn pids_with(marker: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| {
                    let pid: i32 = e.file_name().to_str()?.parse().ok()?;
                    let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
                    (pid != me && String::from_utf8_lossy(&cmd).contains(marker)).then_some(pid)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The build's target folder: `CARGO_TARGET_DIR` when set, else the
/// workspace's `target/`.
pub(crate) fn target_dir() -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    match std::env::var_os("CARGO_TARGET_DIR").or(option_env!("CARGO_TARGET_DIR").map(Into::into)) {
        Some(d) => workspace.join(d),
        None => workspace.join("target"),
    }
}

/// `target/ui-screenshots/`.
pub(crate) fn screenshot_dir() -> PathBuf {
    target_dir().join("ui-screenshots")
}

/// The vendored axe-core, after its digest matched [`AXE_SHA256`].
fn axe_source() -> String {
    use sha2::Digest;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vendor")
        .join(AXE_FILE);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let digest: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        digest,
        AXE_SHA256,
        "{} is not the vendored axe-core (SHA-256 differs from AXE_SHA256): \
         re-vendor it as tests/vendor/README.md says",
        path.display()
    );
    String::from_utf8(bytes).expect("axe-core is UTF-8")
}

/// How many CSP violation reports (`POST /ui/csp-report`) a server's log
/// shows: its access log has one JSON line per request.
pub(crate) fn csp_reports(log: &str) -> usize {
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter(|v| v["event"] == "request" && v["path"] == "/ui/csp-report")
        .count()
}

/// Serves `body` as HTML with the header `Content-Security-Policy: csp` to
/// every request on a new port, from a thread that lives as long as the test
/// process; returns the port.
fn serve_page(csp: String, body: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 8192];
            let _ = s.read(&mut buf);
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                 Content-Security-Policy: {csp}\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes());
        }
    });
    port
}

/// The harness's own positive controls: a screenshot is a PNG, axe-core
/// finds the violation a page was built to have, and a CSP violation in
/// Chromium ends up counted in a real server's log.
#[test]
fn browser_harness_finds_what_it_must() {
    let Some(b) = Browser::start() else {
        return;
    };
    // An image without a text alternative: axe must say `image-alt`.
    b.goto("data:text/html,<!doctype html><html lang=en><title>control</title><main><h1>Harness control</h1><img src=x></main></html>");
    b.set_window(375, 700);
    assert_eq!(b.widths(), (375, 375), "the viewport is 375 px wide");
    let path = b.screenshot("harness-control-375");
    assert!(std::fs::metadata(&path).unwrap().len() > 0);
    b.set_window(1280, 900);
    assert_eq!(b.widths(), (1280, 1280));
    let v = b.axe();
    assert!(
        v.iter()
            .any(|x| x.id == "image-alt" && x.targets.iter().any(|t| t.contains("img"))),
        "axe-core missed the image without alt: {v:?}"
    );
    // The same page with alt text passes.
    b.goto("data:text/html,<!doctype html><html lang=en><title>control</title><main><img src=x alt=nothing></main></html>");
    b.assert_accessible("the fixed control page");

    // An inline script under `script-src 'self'` with a report-uri on a real
    // airlock server: Chromium posts a report, the server's access log has
    // it, `csp_reports` counts it. (The UI's own pages send their reports to
    // their own origin; this page is served by the test so it can break the
    // policy on purpose.)
    let env = Env::new(Who::Invoker);
    let server = Server::start_unbootstrapped(&env, &[]);
    assert_eq!(csp_reports(&server.log_text()), 0);
    let csp = format!(
        "default-src 'self'; script-src 'self'; report-uri {}/ui/csp-report",
        server.base_url()
    );
    let port = serve_page(
        csp,
        "<!doctype html><html lang=en><title>csp</title><script>document.title='ran'</script></html>",
    );
    b.goto(&format!("http://127.0.0.1:{port}/"));
    assert_eq!(
        b.execute("return document.title;", vec![]),
        json!("csp"),
        "the inline script ran despite the CSP"
    );
    wait_reports(&server, 1);

    // A page under a strict policy (the UI's kind): running axe there sends
    // no report (its scan must not count against a page), while an inline
    // script a test inserts with `execute` is refused and reported (a test
    // can plant a violation on a real page that way).
    let csp = format!(
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'; \
         report-uri {}/ui/csp-report",
        server.base_url()
    );
    let port = serve_page(
        csp,
        "<!doctype html><html lang=en><head><title>strict</title></head><body><main>\
         <h1>Strict</h1><p>Plain text.</p><form><label for=f>Field</label><input id=f name=f>\
         <button>Go</button></form></main></body></html>",
    );
    b.goto(&format!("http://127.0.0.1:{port}/"));
    b.assert_accessible("the strict control page");
    b.execute(
        "const s = document.createElement('script'); s.textContent = 'document.title = \"ran\"'; \
         document.body.appendChild(s); return null;",
        vec![],
    );
    assert_eq!(b.execute("return document.title;", vec![]), json!("strict"));
    wait_reports(&server, 2);
    // A second later still two: the axe scan sent none.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        csp_reports(&server.log_text()),
        2,
        "more CSP reports than the two planted violations: {}",
        server.log_text()
    );
}

/// Waits until `server`'s log shows `n` CSP reports (hang guard).
pub(crate) fn wait_reports(server: &Server, n: usize) {
    let deadline = Instant::now() + HANG_GUARD;
    while csp_reports(&server.log_text()) < n {
        assert!(
            Instant::now() < deadline,
            "fewer than {n} CSP reports reached the server: {}",
            server.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// With JavaScript off, the page's own scripts do not run, and the
/// harness's still do.
#[test]
fn browser_without_javascript_runs_no_page_script() {
    let Some(b) = Browser::start_without_javascript() else {
        return;
    };
    let port = serve_page(
        "default-src 'none'".into(),
        "<!doctype html><html lang=en><head><title>nojs</title></head><body><main><h1>No script</h1>\
         <noscript><p id=noscript>shown</p></noscript></main></body></html>",
    );
    b.goto(&format!("http://127.0.0.1:{port}/"));
    assert!(b.exists("#noscript"), "the noscript content is not shown");
    b.assert_accessible("a page without JavaScript");
    // Still off after the scan and across a navigation.
    b.goto(&format!("http://127.0.0.1:{port}/again"));
    assert!(b.exists("#noscript"), "page scripts came back on");
}

#[test]
fn browser_csp_reports_counts_only_report_requests() {
    let log = r#"{"event":"request","request_id":"a","method":"GET","path":"/","status":200,"ms":1.0}
not json
{"event":"request","request_id":"b","method":"POST","path":"/ui/csp-report","status":204,"ms":0.5}
{"event":"other","path":"/ui/csp-report"}
{"event":"request","request_id":"c","method":"POST","path":"/ui/csp-report/x","status":404,"ms":0.5}"#;
    assert_eq!(csp_reports(log), 1);
}

/// `submit_confirmed` accepts the confirmation a page's script asks for and
/// lands on the page the form leads to.
#[test]
fn browser_submit_confirmed_accepts_the_dialog() {
    let Some(b) = Browser::start() else {
        return;
    };
    let port = serve_page(
        "default-src 'none'; script-src 'unsafe-inline'; form-action 'self'".into(),
        "<!doctype html><html lang=en><head><title>confirm</title></head><body><main>\
         <form id=f method=get action=/done><button>Stop</button></form>\
         <script>document.getElementById('f').addEventListener('submit', e => \
         { if (!confirm('Really stop?')) e.preventDefault(); });</script></main></body></html>",
    );
    b.goto(&format!("http://127.0.0.1:{port}/"));
    assert_eq!(b.submit_confirmed("#f"), "Really stop?");
    assert_eq!(b.path(), "/done");
}

/// `tab_walk` starts at the top even when a later field has `autofocus`,
/// follows the Tab order, and sees a focus indicator taken away.
#[test]
fn browser_tab_walk_sees_a_missing_focus_indicator() {
    let Some(b) = Browser::start() else {
        return;
    };
    let port = serve_page(
        "default-src 'none'; style-src 'unsafe-inline'".into(),
        "<!doctype html><html lang=en><head><title>focus</title>\
         <style>#bare:focus { outline: none; }</style></head><body><main>\
         <a href=#top id=first>First</a><button id=bare>Bare</button>\
         <input id=auto aria-label=Auto autofocus></main></body></html>",
    );
    b.goto(&format!("http://127.0.0.1:{port}/"));
    let stops = b.tab_walk(20);
    let got: Vec<(&str, bool)> = stops
        .iter()
        .map(|(d, v)| (d.split(' ').next().unwrap_or(""), *v))
        .collect();
    assert_eq!(
        got,
        [
            ("a#first", true),
            ("button#bare", false),
            ("input#auto", true)
        ],
        "{stops:?}"
    );
}
