//! The operator web UI in a real browser: Debian's headless Chromium driven over WebDriver
//! (chromedriver) against a plane of the test's own and the real `capstan-agent` binary.
//! `.ci/run` installs `chromium` and `chromium-driver` when they are absent; without them these
//! tests fail and say so.

mod backups;
mod flows;
mod incidents;
mod monitor;
mod provisioning;
mod provisioning_flow;
mod releases;
mod rollouts;
mod scale;
mod security;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// chromedriver on a free loopback port, stopped when dropped.
pub struct Driver {
    pub url: String,
    child: Child,
    _profile: tempfile::TempDir,
    profile_dir: PathBuf,
}

impl Driver {
    pub async fn start() -> Driver {
        for program in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(program).is_file(),
                "{program} is missing: install Debian's chromium and chromium-driver \
                 (.ci/run does when they are absent)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        capstan_e2e::wait_for("chromedriver to be ready", Duration::from_secs(30), || {
            let (http, url) = (http.clone(), url.clone());
            async move {
                let status: Value = http
                    .get(format!("{url}/status"))
                    .send()
                    .await
                    .ok()?
                    .json()
                    .await
                    .ok()?;
                (status["value"]["ready"] == true).then_some(())
            }
        })
        .await;
        let profile = tempfile::tempdir().unwrap();
        let profile_dir = profile.path().to_path_buf();
        Driver {
            url,
            child,
            _profile: profile,
            profile_dir,
        }
    }

    /// A new headless browser (its own profile directory, so its own cookies).
    pub async fn browser(&self, name: &str) -> Browser {
        let profile = self.profile_dir.join(name);
        std::fs::create_dir_all(&profile).unwrap();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1280,900",
                    format!("--user-data-dir={}", profile.display()),
                ],
            },
            "goog:loggingPrefs": {"browser": "ALL"},
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("an object")
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("chromedriver opens a Chromium session");
        let session = client.session_id().await.unwrap().expect("a session id");
        Browser {
            client,
            logs: format!("{}/session/{session}/se/log", self.url),
            http: reqwest::Client::new(),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One browser window.
pub struct Browser {
    pub client: Client,
    logs: String,
    http: reqwest::Client,
}

impl Browser {
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    pub async fn path(&self) -> String {
        let url = self.client.current_url().await.unwrap();
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        }
    }

    /// Waits (up to 20 s) until the browser is at a path starting with `prefix`, as after a
    /// form's redirect; the path. Fails with the page's flash message if it never gets there.
    pub async fn wait_path(&self, prefix: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let path = self.path().await;
            if path.starts_with(prefix) {
                return path;
            }
            if tokio::time::Instant::now() >= deadline {
                let flash = match self.client.find(Locator::Css("[data-test=flash]")).await {
                    Ok(flash) => flash.text().await.unwrap_or_default(),
                    Err(_) => "no flash message".to_string(),
                };
                panic!("never reached {prefix}: still at {path} ({flash})");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The first element matching `css`, waiting up to 20 s for it to appear.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(20))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("no element {css}: {error}"))
    }

    /// How many elements match `css` now.
    pub async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.unwrap().len()
    }

    /// The text of the first element matching `css`. A page that reloads itself (the job page
    /// when its job ends) can replace the element between finding and reading it; that is
    /// read again from the new page.
    pub async fn text(&self, css: &str) -> String {
        let mut attempts = 0;
        loop {
            match self.find(css).await.text().await {
                Ok(text) => return text,
                Err(error) if replaced_while_read(&error) && attempts < 20 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(error) => panic!("reading {css}: {error}"),
            }
        }
    }

    pub async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap();
    }

    pub async fn fill(&self, css: &str, text: &str) {
        let field = self.find(css).await;
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// Signs in as `name` from wherever the browser is sent for it.
    pub async fn sign_in(&self, base: &str, name: &str, password: &str) {
        self.goto(&format!("{base}/ui/")).await;
        assert!(
            self.path().await.starts_with("/ui/sign-in"),
            "an anonymous visit is sent to sign in, not {}",
            self.path().await
        );
        self.fill("input[name=name]", name).await;
        self.fill("input[name=password]", password).await;
        self.click("button[data-test=sign-in]").await;
        let shown = self.text("[data-test=operator]").await;
        assert!(shown.contains(name), "signed in as {name}: {shown}");
    }

    /// Runs `script` in the page; its value.
    pub async fn run(&self, script: &str) -> Value {
        self.client.execute(script, vec![]).await.unwrap()
    }

    /// The browser console's entries at level SEVERE since the last call (errors, CSP
    /// violations, failed loads).
    pub async fn console_errors(&self) -> Vec<String> {
        let answer: Value = self
            .http
            .post(&self.logs)
            .json(&json!({"type": "browser"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["value"]
            .as_array()
            .unwrap_or_else(|| panic!("chromedriver gave no browser log: {answer}"))
            .iter()
            .filter(|entry| entry["level"] == "SEVERE")
            .map(|entry| entry["message"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// A PNG of the window, written to the target directory and, with `CAPSTAN_WRITE_DOCS=1`,
    /// to `docs/screenshots/<name>.png` for the README.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
        let target = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .join("screenshots");
        std::fs::create_dir_all(&target).unwrap();
        std::fs::write(target.join(format!("{name}.png")), &png).unwrap();
        if std::env::var("CAPSTAN_WRITE_DOCS").as_deref() == Ok("1") {
            let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshots");
            std::fs::create_dir_all(&docs).unwrap();
            std::fs::write(docs.join(format!("{name}.png")), &png).unwrap();
        }
    }

    /// Whether the page fits the window's width (no sideways scrolling).
    pub async fn fits_width(&self) -> bool {
        self.run("return document.documentElement.scrollWidth <= window.innerWidth;")
            .await
            == json!(true)
    }

    /// Every visible control on the page that the keyboard cannot reach (a negative
    /// `tabindex`) or that has no name a screen reader could say (text, value, a `<label>`,
    /// `aria-label` or `title`).
    pub async fn unreachable_or_unnamed_controls(&self) -> Vec<String> {
        let found = self
            .run(
                "const bad = [];
                 for (const el of document.querySelectorAll('a[href], button, input, select, textarea, summary')) {
                   if (el.type === 'hidden' || el.offsetParent === null) continue;
                   const labelled = el.id && document.querySelector('label[for=\"' + el.id + '\"]');
                   const name = (el.getAttribute('aria-label') || el.textContent || el.value || '').trim()
                     || (labelled && labelled.textContent.trim())
                     || (el.closest('label') && el.closest('label').textContent.trim())
                     || el.getAttribute('title');
                   if (el.tabIndex < 0) bad.push('not reachable: ' + el.outerHTML.slice(0, 160));
                   if (!name) bad.push('no name: ' + el.outerHTML.slice(0, 160));
                 }
                 return bad;",
            )
            .await;
        serde_json::from_value(found).unwrap_or_default()
    }

    /// Presses Tab until the focused element matches `css` (at most 60 times); whether it got
    /// there. The keyboard path to a control, as someone without a mouse would take it.
    pub async fn tab_to(&self, css: &str) -> bool {
        use fantoccini::key::Key;
        let matches = format!(
            "return document.activeElement !== null && document.activeElement.matches({});",
            serde_json::to_string(css).unwrap()
        );
        for _ in 0..60 {
            self.client
                .active_element()
                .await
                .unwrap()
                .send_keys(&char::from(Key::Tab).to_string())
                .await
                .unwrap();
            if self.run(&matches).await == json!(true) {
                return true;
            }
        }
        false
    }

    /// Presses Enter on the focused element.
    pub async fn press_enter(&self) {
        use fantoccini::key::Key;
        self.client
            .active_element()
            .await
            .unwrap()
            .send_keys(&char::from(Key::Enter).to_string())
            .await
            .unwrap();
    }

    pub async fn close(self) {
        self.client.close().await.unwrap();
    }
}

/// Whether reading an element failed because the page replaced it after it was found. The
/// WebDriver standard says so with `stale element reference`; chromedriver sometimes says it
/// with an `unknown error` from its inspector instead ("Node with given id does not belong to
/// the document"), which CI met once on the job page's reload (stop 25).
fn replaced_while_read(error: &fantoccini::error::CmdError) -> bool {
    use fantoccini::error::{CmdError, ErrorStatus};
    match error {
        CmdError::Standard(error) => {
            error.error == ErrorStatus::StaleElementReference
                || (error.error == ErrorStatus::UnknownError
                    && (error.message.contains("does not belong to the document")
                        || error.message.contains("No node with given id")))
        }
        _ => false,
    }
}
