//! A small browser for the UI tests: it keeps cookies as a browser would for this one site
//! (reqwest's own cookie store would drop `Secure` cookies over plain HTTP), follows no
//! redirect by itself, and reads the CSRF token out of the pages it gets.

use capstan_events::rpc::Level;
use std::{collections::BTreeMap, sync::Mutex};

use crate::harness::Gateway;

/// The password every test operator gets.
pub const PASSWORD: &str = "a long enough password";

pub struct Browser {
    pub url: String,
    client: reqwest::Client,
    cookies: Mutex<BTreeMap<String, String>>,
    /// The operator signed in, when one is.
    pub name: String,
    /// The client address a trusted proxy names for this browser (`X-Forwarded-For`).
    forwarded_for: Option<String>,
}

pub struct Page {
    pub status: u16,
    pub location: Option<String>,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Page {
    /// The value of the first `name="csrf"` hidden field.
    pub fn csrf(&self) -> String {
        let marker = "name=\"csrf\" value=\"";
        let start = self.body.find(marker).expect("a form with a csrf field") + marker.len();
        let end = start + self.body[start..].find('"').unwrap();
        self.body[start..end].to_string()
    }

    pub fn has(&self, needle: &str) -> bool {
        self.body.contains(needle)
    }
}

impl Browser {
    pub fn new(gateway: &Gateway) -> Browser {
        Browser {
            url: gateway.url.clone(),
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookies: Mutex::default(),
            name: String::new(),
            forwarded_for: None,
        }
    }

    /// A browser at `address`, as a proxy the gateway trusts names it
    /// ([`Gateway::start_behind`]).
    pub fn at(gateway: &Gateway, address: &str) -> Browser {
        Browser {
            forwarded_for: Some(address.to_string()),
            ..Browser::new(gateway)
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self
            .client
            .request(method, format!("{}{path}", self.url))
            .header("cookie", self.cookie_header());
        match &self.forwarded_for {
            Some(address) => request.header("x-forwarded-for", address),
            None => request,
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .lock()
            .unwrap()
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The cookie `name`, as the browser holds it.
    pub fn cookie(&self, name: &str) -> Option<String> {
        self.cookies.lock().unwrap().get(name).cloned()
    }

    pub fn set_cookie(&self, name: &str, value: &str) {
        self.cookies
            .lock()
            .unwrap()
            .insert(name.to_string(), value.to_string());
    }

    async fn read(&self, response: reqwest::Response) -> Page {
        for value in response.headers().get_all("set-cookie") {
            let text = value.to_str().unwrap();
            let (pair, attributes) = text.split_once(';').unwrap_or((text, ""));
            let (name, value) = pair.split_once('=').unwrap();
            let mut cookies = self.cookies.lock().unwrap();
            if attributes.contains("Max-Age=0") {
                cookies.remove(name.trim());
            } else {
                cookies.insert(name.trim().to_string(), value.trim().to_string());
            }
        }
        Page {
            status: response.status().as_u16(),
            location: response
                .headers()
                .get("location")
                .map(|value| value.to_str().unwrap().to_string()),
            headers: response.headers().clone(),
            body: response.text().await.unwrap(),
        }
    }

    pub async fn get(&self, path: &str) -> Page {
        let response = self
            .request(reqwest::Method::GET, path)
            .send()
            .await
            .unwrap();
        self.read(response).await
    }

    /// POSTs `fields` as a form, exactly as given (add `csrf` yourself).
    pub async fn post(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let response = self
            .request(reqwest::Method::POST, path)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap();
        self.read(response).await
    }

    /// The session's CSRF token, from the Account page.
    pub async fn csrf(&self) -> String {
        self.get("/ui/account").await.csrf()
    }

    /// POSTs `fields` with this session's CSRF token added.
    pub async fn submit(&self, path: &str, fields: &[(&str, &str)]) -> Page {
        let csrf = self.csrf().await;
        let mut all = vec![("csrf", csrf.as_str())];
        all.extend_from_slice(fields);
        self.post(path, &all).await
    }

    /// Fills in and sends the sign-in form.
    pub async fn sign_in(&self, name: &str, password: &str) -> Page {
        let csrf = self.sign_in_form().await;
        self.send_sign_in(&csrf, name, password).await
    }

    /// Opens the sign-in form; its CSRF token.
    pub async fn sign_in_form(&self) -> String {
        let form = self.get("/ui/sign-in").await;
        assert_eq!(form.status, 200);
        form.csrf()
    }

    /// Sends the sign-in form opened with [`Browser::sign_in_form`].
    pub async fn send_sign_in(&self, csrf: &str, name: &str, password: &str) -> Page {
        self.post(
            "/ui/sign-in",
            &[
                ("csrf", csrf),
                ("name", name),
                ("password", password),
                ("next", "/ui/"),
            ],
        )
        .await
    }
}

impl Gateway {
    /// A fresh operator at `level` with [`PASSWORD`] (already chosen, no change required).
    pub async fn operator(&self, level: Level, must_change: bool) -> String {
        let token = self.token(level).await;
        let name: String = sqlx::query_scalar(
            "SELECT o.name FROM operators o JOIN api_tokens t ON t.operator_id = o.id
             WHERE t.token_sha256 = $1",
        )
        .bind(sha2_of(&token).to_vec())
        .fetch_one(self.store.pool())
        .await
        .unwrap();
        capstan_gateway::admin::set_password_plain(&self.store, &name, PASSWORD, must_change)
            .await
            .unwrap();
        name
    }

    /// A browser signed in as a fresh operator at `level`.
    pub async fn signed_in(&self, level: Level) -> Browser {
        let name = self.operator(level, false).await;
        let mut browser = Browser::new(self);
        let answer = browser.sign_in(&name, PASSWORD).await;
        assert_eq!(answer.status, 303, "{}", answer.body);
        assert_eq!(answer.location.as_deref(), Some("/ui/"));
        browser.name = name;
        browser
    }
}

pub fn sha2_of(token: &str) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(token.as_bytes()).into()
}
