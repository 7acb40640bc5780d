//! The web interface end to end in the real headless Chromium (UI-1, UI-2):
//! what a person does in the browser, against the real `airlock up`. Every
//! flow ends with zero CSP violation reports in the server's log and zero
//! axe-core WCAG 2 A/AA violations on every page it visited, in both themes
//! and at 1280 and 375 px; the screenshots of those pages are written to
//! `target/ui-screenshots/`.
//!
//! A flow is a `#[test]` that starts a [`Ui`] (an env with the example
//! workers, a server with no owner yet, a browser), drives it with the
//! helpers below, calls [`Ui::capture`] on each page it wants checked and
//! ends with [`Ui::finish`].

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::suite::browser::{Browser, csp_reports, wait_reports};
use crate::suite::runs::{Env, OWNER_PASSWORD, Server};
use crate::suite::support::Who;

pub(crate) const OWNER: &str = "owner";
const WIDTHS: [u32; 2] = [1280, 375];
const THEMES: [&str; 2] = ["light", "dark"];

/// One flow's world: the env (example workers), its server and a browser.
pub(crate) struct Ui {
    pub(crate) env: Env,
    pub(crate) server: Server,
    pub(crate) b: Browser,
    /// Names screenshots: `<flow>-<page>-<width>-<theme>.png`.
    flow: &'static str,
    /// What the checks found (a11y violations, sideways scrolling), all
    /// reported together by [`Ui::finish`].
    problems: RefCell<Vec<String>>,
    /// Pages captured, for the closing summary.
    captured: RefCell<Vec<String>>,
}

/// The current RFC 6238 code of `secret`, `ahead` steps of 30 s from now
/// (a code is accepted once per step: a second sign-in soon after
/// enrolment uses the next step's code, which the server accepts within
/// its ±1 step window).
pub(crate) fn totp(secret: &[u8], ahead: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    airlock_iam::totp::code_at(
        secret,
        airlock_iam::totp::Algorithm::Sha1,
        airlock_iam::totp::DIGITS,
        airlock_iam::totp::STEP_S,
        now + ahead * airlock_iam::totp::STEP_S,
    )
}

impl Ui {
    /// `None` when the browser tests are skipped (`AIRLOCK_TEST_SKIP_BROWSER`).
    pub(crate) fn start(flow: &'static str) -> Option<Self> {
        Self::with_browser(flow, Browser::start()?)
    }

    /// The same, in a browser whose pages run no JavaScript (no `app.js`).
    pub(crate) fn start_without_javascript(flow: &'static str) -> Option<Self> {
        Self::with_browser(flow, Browser::start_without_javascript()?)
    }

    /// The same, with `prepare` run on the env before its server starts
    /// (an agent worker, a model profile) and `extra_env` given to the
    /// server.
    pub(crate) fn start_prepared(
        flow: &'static str,
        prepare: impl FnOnce(&Env),
        extra_env: &[(&str, &str)],
    ) -> Option<Self> {
        let b = Browser::start()?;
        let env = Env::with_examples(Who::Invoker);
        prepare(&env);
        let server = Server::start_unbootstrapped(&env, extra_env);
        Some(Self {
            env,
            server,
            b,
            flow,
            problems: RefCell::new(Vec::new()),
            captured: RefCell::new(Vec::new()),
        })
    }

    fn with_browser(flow: &'static str, b: Browser) -> Option<Self> {
        let env = Env::with_examples(Who::Invoker);
        let server = Server::start_unbootstrapped(&env, &[]);
        Some(Self {
            env,
            server,
            b,
            flow,
            problems: RefCell::new(Vec::new()),
            captured: RefCell::new(Vec::new()),
        })
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.base_url())
    }

    /// Opens `path` of the server; fails unless it answers 200.
    pub(crate) fn open(&self, path: &str) {
        let status = self.open_status(path);
        assert_eq!(
            status,
            200,
            "GET {path} answered {status} (now on {}): {}",
            self.b.path(),
            self.error_text()
        );
    }

    /// Opens `path` of the server; returns the HTTP status of the page it
    /// ends on (after redirects).
    pub(crate) fn open_status(&self, path: &str) -> u16 {
        self.b.goto(&self.url(path));
        self.b.status()
    }

    /// Fails unless the browser is on `path` (query ignored).
    pub(crate) fn assert_at(&self, path: &str) {
        let here = self.b.path();
        let bare = here.split('?').next().unwrap_or("");
        assert_eq!(
            bare,
            path,
            "expected to be on {path}, on {here}: {}",
            self.error_text()
        );
    }

    /// The page's error message, if it shows one (for failure messages).
    fn error_text(&self) -> String {
        if self.b.exists("#form-error") {
            self.b.text("#form-error")
        } else if self.b.exists(".error") {
            self.b.text(".error")
        } else {
            String::new()
        }
    }

    /// Creates the first owner through `/bootstrap` with the capability
    /// `airlock up` wrote; ends on the sign-in page.
    pub(crate) fn bootstrap(&self, user: &str, password: &str) {
        let token = std::fs::read_to_string(self.env.data.join("keys/bootstrap.token")).unwrap();
        if self.b.path() != "/bootstrap" {
            self.open("/bootstrap");
        }
        self.b.fill("#token", token.trim());
        self.b.fill("#username", user);
        self.b.fill("#password", password);
        if self.b.exists("#password_again") {
            self.b.fill("#password_again", password);
        }
        self.b.submit("form[action='/bootstrap']");
        self.assert_at("/sign-in");
    }

    /// Bootstraps the owner and signs in (no second factor): where most
    /// flows start.
    pub(crate) fn signed_in_owner(&self) {
        self.bootstrap(OWNER, OWNER_PASSWORD);
        self.sign_in(OWNER, OWNER_PASSWORD, None);
    }

    /// Submits the sign-in form with a password; stays on whatever page
    /// that leads to (the second factor's, or the page signed in).
    pub(crate) fn enter_password(&self, user: &str, password: &str) {
        if !self.b.path().starts_with("/sign-in") {
            self.open("/sign-in");
        }
        self.b.fill("#username", user);
        self.b.fill("#password", password);
        self.b.submit("form[action='/sign-in']");
    }

    /// On the second factor's page, enters the TOTP code of `secret`
    /// (`ahead` steps of 30 s from now, see [`totp`]).
    pub(crate) fn enter_totp(&self, secret: &[u8], ahead: u64) {
        self.assert_at("/sign-in/mfa");
        self.b.fill("#code", &totp(secret, ahead));
        self.b.submit("form[action='/sign-in/mfa']");
    }

    /// Signs in with a password, then the current TOTP code of `secret`
    /// when given (the next step's: see [`totp`]); ends on the page
    /// sign-in leads to.
    pub(crate) fn sign_in(&self, user: &str, password: &str, secret: Option<&[u8]>) {
        self.enter_password(user, password);
        if let Some(secret) = secret {
            self.enter_totp(secret, 1);
        }
        self.assert_signed_in();
    }

    /// Fails when the browser is still on a sign-in page.
    pub(crate) fn assert_signed_in(&self) {
        let here = self.b.path();
        assert!(
            !here.starts_with("/sign-in") && !here.starts_with("/bootstrap"),
            "sign-in did not complete, on {here}: {}",
            self.error_text()
        );
    }

    /// Turns on TOTP for the signed-in person from `/account`; returns the
    /// secret and the recovery codes shown once. With `capture`, checks the
    /// two pages shown once on the way.
    pub(crate) fn enrol_totp(&self, password: &str, capture: bool) -> (Vec<u8>, Vec<String>) {
        self.open("/account");
        if self.b.exists("form[action='/account/totp'] #password") {
            self.b
                .fill("form[action='/account/totp'] #password", password);
        }
        self.b.submit("form[action='/account/totp']");
        self.b.wait_for("#totp-secret");
        if capture {
            self.capture_once("account-totp-enrol");
        }
        let shown = self.b.text("#totp-secret");
        let secret = airlock_iam::totp::base32_decode(&shown)
            .unwrap_or_else(|| panic!("#totp-secret is not base32: {shown:?}"));
        self.b.fill(
            "form[action='/account/totp/confirm'] #code",
            &totp(&secret, 0),
        );
        self.b.submit("form[action='/account/totp/confirm']");
        self.b.wait_for("#recovery-codes");
        if capture {
            self.capture_once("account-recovery-codes");
        }
        let codes: Vec<String> = self
            .b
            .text("#recovery-codes")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert!(!codes.is_empty(), "no recovery codes shown");
        (secret, codes)
    }

    /// Signs out with the header's button; ends on the sign-in page.
    pub(crate) fn sign_out(&self) {
        self.b.submit("form[action='/sign-out']");
        self.assert_at("/sign-in");
    }

    /// Chooses `theme` for the current page: with the theme form when the
    /// page has one (it comes back to the same page), else with the cookie
    /// that form sets and a reload.
    pub(crate) fn set_theme(&self, theme: &str) {
        if self.b.exists("select#theme") {
            self.b.select("select#theme", theme);
            // app.js submits on change; without it, the form's own button.
            if !self
                .b
                .try_execute("return document.documentElement.classList.contains('js');")
                .is_ok_and(|v| v == json!(true))
            {
                self.b.submit("form[action='/theme']");
            }
        } else {
            self.b.set_cookie(airlock_ui::session::THEME_COOKIE, theme);
            self.b.refresh();
        }
        self.b.wait_until(
            &format!("theme {theme}"),
            &format!(
                "document.readyState === 'complete' && \
                 document.documentElement.dataset.theme === '{theme}'"
            ),
        );
        // A theme already chosen leaves the page as it was, the select
        // focused: unfocus it, so screenshots show the page as it opens.
        self.b.execute(
            "if (document.activeElement) document.activeElement.blur(); return null;",
            vec![],
        );
    }

    fn problem(&self, p: String) {
        eprintln!("UI problem: {p}");
        self.problems.borrow_mut().push(p);
    }

    /// Checks the current page at one width in its current theme:
    /// screenshot, no sideways scrolling at 375 px, axe.
    fn check_here(&self, page: &str, theme: &str) {
        for w in WIDTHS {
            self.b.set_window(w, 900);
            self.b
                .screenshot(&format!("{}-{page}-{w}-{theme}", self.flow));
            let (scroll, view) = self.b.widths();
            if scroll > view {
                self.problem(format!(
                    "{page} ({theme}, {w} px): the page is {scroll} px wide, it scrolls \
                     sideways (past the edge: {})",
                    self.b.overflowing().join("; ")
                ));
            }
            for v in self.b.axe() {
                self.problem(format!("{page} ({theme}, {w} px): axe {v}"));
            }
        }
        self.b.set_window(1280, 900);
    }

    /// Walks the page with the Tab key: every stop shows a focus indicator,
    /// and a page with a skip link reaches it first.
    fn check_keyboard(&self, page: &str) {
        let stops = self.b.tab_walk(150);
        eprintln!(
            "{page}: Tab order {}",
            stops
                .iter()
                .map(|(d, _)| d.as_str())
                .collect::<Vec<_>>()
                .join(" → ")
        );
        if self.b.exists("a.skip") {
            match stops.first() {
                Some((d, _)) if d.starts_with("a") && d.contains("Skip") => {}
                other => self.problem(format!(
                    "{page}: the first Tab stop is {other:?}, not the skip link"
                )),
            }
        }
        for (d, visible) in &stops {
            if !visible {
                self.problem(format!("{page}: no visible focus on {d}"));
            }
        }
    }

    /// Checks the current page (which a reload shows again) in both themes,
    /// chosen as a person does, at both widths; ends in the light theme.
    pub(crate) fn capture(&self, page: &str) {
        for theme in THEMES {
            self.set_theme(theme);
            self.check_here(page, theme);
        }
        self.set_theme("light");
        self.check_keyboard(page);
        self.captured.borrow_mut().push(page.to_string());
    }

    /// Checks a page that cannot be shown again (a secret shown once): the
    /// dark theme is applied by setting `data-theme`, as the server does
    /// from the theme cookie, instead of reloading.
    pub(crate) fn capture_once(&self, page: &str) {
        for theme in THEMES {
            self.b.execute(
                "document.documentElement.dataset.theme = arguments[0]; return null;",
                vec![json!(theme)],
            );
            self.check_here(page, theme);
        }
        self.captured.borrow_mut().push(page.to_string());
    }

    /// The end of every flow: no CSP report reached the server, and the
    /// pages' checks found nothing.
    pub(crate) fn finish(self) {
        // Reports are posted asynchronously: give any in flight a moment.
        std::thread::sleep(Duration::from_secs(1));
        let log = self.server.log_text();
        let reports = csp_reports(&log);
        let problems = self.problems.borrow();
        eprintln!(
            "pages checked ({}): {}",
            self.flow,
            self.captured.borrow().join(", ")
        );
        assert!(
            reports == 0 && problems.is_empty(),
            "{reports} CSP violation report(s) in the server's log; {} problem(s):\n{}",
            problems.len(),
            problems
                .iter()
                .map(|p| format!("  {p}\n"))
                .collect::<String>()
        );
    }
}

/// Bootstraps the owner through the form, signs in, turns on TOTP, signs
/// out and signs in with password and TOTP; checks each page on the way
/// with `capture`. Ends on the overview.
fn owner_with_totp(ui: &Ui) {
    ui.open("/bootstrap");
    ui.capture("bootstrap");
    ui.bootstrap(OWNER, OWNER_PASSWORD);
    ui.capture("sign-in");
    ui.sign_in(OWNER, OWNER_PASSWORD, None);
    ui.assert_at("/");
    ui.open("/account");
    ui.capture("account");
    let (secret, codes) = ui.enrol_totp(OWNER_PASSWORD, true);
    assert!(codes.len() >= 5, "{codes:?}");
    ui.open("/account");
    assert!(
        !ui.b.exists("#start-totp"),
        "the account page still offers to turn TOTP on"
    );
    ui.sign_out();
    // Password, then the second factor.
    ui.enter_password(OWNER, OWNER_PASSWORD);
    ui.assert_at("/sign-in/mfa");
    ui.capture("sign-in-mfa");
    // The enrolment used this step's code: the next step's is fresh.
    ui.enter_totp(&secret, 1);
    ui.assert_signed_in();
    ui.assert_at("/");
    ui.capture("overview");
}

/// Bootstrap the first owner through the form, sign in, turn on TOTP, sign
/// out, sign in with password and TOTP, run the example `hello-python` from
/// its generated form, watch the live log reach `succeeded`, and download
/// the report it wrote.
#[test]
fn ui_bootstrap_sign_in_with_totp_and_run_a_worker() {
    let Some(ui) = Ui::start("main") else {
        return;
    };
    owner_with_totp(&ui);

    // The worker catalog, the worker's page and its form generated from
    // the manifest.
    ui.open("/workers");
    ui.capture("workers");
    ui.b.click_and_load("a[href='/workers/hello-python']");
    ui.assert_at("/workers/hello-python");
    ui.capture("worker-hello-python");
    ui.b.fill("#in-name", "Ada");
    ui.b.fill("#in-times", "3");
    ui.b.click("#in-shout");
    ui.b.submit("form#run-form");
    // The run's page; its live log reaches the end.
    let run_path = ui.b.path();
    assert!(
        run_path.starts_with("/runs/"),
        "submitting the form led to {run_path}: {}",
        ui.error_text()
    );
    assert_eq!(ui.b.status(), 200, "{run_path}");
    ui.b.wait_until(
        "the run page shows succeeded",
        "document.getElementById('run-state') && \
         document.getElementById('run-state').textContent.trim() === 'succeeded'",
    );
    ui.b.wait_until(
        "the live log shows the worker's line",
        "document.getElementById('log') && \
         document.getElementById('log').textContent.indexOf(\"greeted 'Ada' 3 time(s)\") >= 0",
    );
    assert_eq!(ui.b.attr("#log", "role").as_deref(), Some("log"));
    // The artifact (the page reloads itself when the run ends, with the
    // artifacts listed), fetched with the browser's cookies.
    ui.b.wait_for("#run-artifacts a[download]");
    let href =
        ui.b.attr("#run-artifacts a[download]", "href")
            .expect("a link to the report");
    let (status, bytes) = ui.b.fetch_bytes(&href);
    assert_eq!(status, 200, "{href}");
    assert_eq!(
        String::from_utf8_lossy(&bytes),
        "HELLO, ADA!\n".repeat(3),
        "{href}"
    );
    ui.capture("run");
    ui.open("/runs");
    ui.capture("runs");
    ui.finish();
}

/// Without JavaScript, every form still works: bootstrap, sign-in, the
/// theme (its own Apply button), TOTP enrolment, sign-out, and sign-in with
/// a recovery code.
#[test]
fn ui_forms_work_without_javascript() {
    let Some(ui) = Ui::start_without_javascript("nojs") else {
        return;
    };
    ui.signed_in_owner();
    ui.assert_at("/");
    assert_eq!(
        ui.b.execute(
            "return document.documentElement.classList.contains('js');",
            vec![]
        ),
        json!(false),
        "app.js ran"
    );
    ui.set_theme("dark");
    ui.open("/account");
    assert_eq!(ui.b.attr("html", "data-theme").as_deref(), Some("dark"));
    ui.capture("account");
    let (_, codes) = ui.enrol_totp(OWNER_PASSWORD, false);
    ui.sign_out();
    ui.enter_password(OWNER, OWNER_PASSWORD);
    ui.assert_at("/sign-in/mfa");
    // The recovery code field is inside a closed <details>: open it first.
    ui.b.click("details summary");
    ui.b.fill("#recovery_code", &codes[0]);
    ui.b.submit("form[action='/sign-in/mfa']");
    ui.assert_signed_in();

    // A run from the generated form: the run page has no live log without
    // script, so a person reloads it until the run has ended.
    ui.open("/workers/hello-python");
    ui.b.fill("#in-name", "Bo");
    ui.b.submit("form#run-form");
    let run_path = ui.b.path();
    assert!(
        run_path.starts_with("/runs/"),
        "submitting the form led to {run_path}: {}",
        ui.error_text()
    );
    let deadline = std::time::Instant::now() + crate::suite::browser::HANG_GUARD;
    while ui.b.text("#run-state").trim() != "succeeded" {
        assert!(
            std::time::Instant::now() < deadline,
            "run {run_path} is still {}",
            ui.b.text("#run-state")
        );
        std::thread::sleep(Duration::from_millis(250));
        ui.b.refresh();
    }
    assert!(
        ui.b.text("#log").contains("greeted 'Bo' 1 time(s)"),
        "{}",
        ui.b.text("#log")
    );
    ui.capture("run");
    ui.finish();
}

/// The zero that every flow checks means something: an inline script
/// planted on a real page is refused by the page's CSP, and its report
/// reaches the server's log.
#[test]
fn ui_a_csp_violation_on_a_page_is_refused_and_reported() {
    let Some(ui) = Ui::start("csp") else {
        return;
    };
    ui.signed_in_owner();
    assert_eq!(csp_reports(&ui.server.log_text()), 0);
    ui.b.execute(
        "const s = document.createElement('script'); s.textContent = 'document.title = \"ran\"'; \
         document.body.appendChild(s); return null;",
        vec![],
    );
    assert_ne!(
        ui.b.execute("return document.title;", vec![]),
        json!("ran"),
        "the planted inline script ran"
    );
    wait_reports(&ui.server, 1);
}

/// Every page the navigation links to opens, and passes the checks (axe,
/// no sideways scrolling at 375 px) in both themes, with zero CSP reports.
#[test]
fn ui_every_page_in_the_navigation_passes_the_checks() {
    let Some(ui) = Ui::start("nav") else {
        return;
    };
    ui.signed_in_owner();
    let hrefs: Vec<String> = ui
        .b
        .execute(
            "return Array.from(document.querySelectorAll('nav a')).map(a => a.getAttribute('href'));",
            vec![],
        )
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h.as_str().unwrap_or("").to_string())
        .collect();
    assert!(hrefs.len() >= 8, "{hrefs:?}");
    for href in &hrefs {
        ui.open(href);
        let name = match href.trim_matches('/') {
            "" => "overview",
            other => other,
        };
        ui.capture(&name.replace('/', "-"));
    }
    ui.finish();
}
