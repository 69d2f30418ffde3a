//! The UI's cookies, all `__Host-` prefixed with `Secure; HttpOnly; SameSite=Strict; Path=/`
//! (so no script, other site or subdomain can read or set them): the session, the sign-in
//! form's pre-session CSRF token, and the one-page flash message. Secrets in them never reach
//! a log line.

use axum::http::{header, HeaderMap, HeaderValue};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD, Engine};
use cookie::{Cookie, SameSite};
use rand::RngCore;
use subtle::ConstantTimeEq;

use super::Flash;

pub const SESSION_COOKIE: &str = "__Host-capstan_session";
pub const PRE_SESSION_COOKIE: &str = "__Host-capstan_presession";
pub const FLASH_COOKIE: &str = "__Host-capstan_flash";
/// The Main | Test tab last chosen (PV-13: "`?account=` plus a remembering cookie").
pub const ACCOUNT_TAB_COOKIE: &str = "__Host-capstan_account_tab";

/// The longest flash text carried (a cookie holds about 4 KiB).
const FLASH_MAX_CHARS: usize = 600;

/// 32 random bytes, base64url without padding (43 characters): session ids and CSRF tokens.
pub fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Whether `candidate` has a secret's shape (refused before any look-up otherwise).
pub fn looks_like_secret(candidate: &str) -> bool {
    candidate.len() == 43
        && candidate
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_')
}

/// The value of cookie `name` among the request's `Cookie` headers.
pub fn read(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|cookie| cookie.name() == name)
        .map(|cookie| cookie.value().to_string())
}

fn build(
    name: &'static str,
    value: String,
    max_age: Option<cookie::time::Duration>,
) -> HeaderValue {
    let mut cookie = Cookie::build((name, value))
        .secure(true)
        .http_only(true)
        .same_site(SameSite::Strict)
        .path("/");
    if let Some(max_age) = max_age {
        cookie = cookie.max_age(max_age);
    }
    HeaderValue::from_str(&cookie.build().to_string())
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The session cookie: a browser-session cookie; the server ends it earlier by its idle
/// timeout and lifetime.
pub fn session(value: String) -> HeaderValue {
    build(SESSION_COOKIE, value, None)
}

/// The sign-in form's pre-session token, for an hour.
pub fn pre_session(value: String) -> HeaderValue {
    build(
        PRE_SESSION_COOKIE,
        value,
        Some(cookie::time::Duration::hours(1)),
    )
}

/// The Main | Test tab chosen (`main` or `test`), remembered for a year.
pub fn account_tab(value: &'static str) -> HeaderValue {
    build(
        ACCOUNT_TAB_COOKIE,
        value.to_string(),
        Some(cookie::time::Duration::days(365)),
    )
}

/// Removes cookie `name`.
pub fn clear(name: &'static str) -> HeaderValue {
    build(name, String::new(), Some(cookie::time::Duration::ZERO))
}

/// The flash cookie carrying `flash` to the next page (a minute at most).
pub fn flash_cookie(flash: &Flash) -> Option<HeaderValue> {
    let text: String = flash.text.chars().take(FLASH_MAX_CHARS).collect();
    let json = serde_json::to_vec(&Flash { ok: flash.ok, text }).ok()?;
    Some(build(
        FLASH_COOKIE,
        URL_SAFE_NO_PAD.encode(json),
        Some(cookie::time::Duration::minutes(1)),
    ))
}

/// The flash the previous answer left, if any and readable.
pub fn read_flash(headers: &HeaderMap) -> Option<Flash> {
    let value = read(headers, FLASH_COOKIE)?;
    let json = URL_SAFE_NO_PAD.decode(value.as_bytes()).ok()?;
    let flash: Flash = serde_json::from_slice(&json).ok()?;
    let text: String = flash.text.chars().take(FLASH_MAX_CHARS).collect();
    (!text.trim().is_empty()).then_some(Flash { ok: flash.ok, text })
}

/// Compares a CSRF token in constant time; an empty expected token never matches.
pub fn tokens_match(expected: &str, given: &str) -> bool {
    !expected.is_empty()
        && expected.len() == given.len()
        && bool::from(expected.as_bytes().ct_eq(given.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cookie_is_host_prefixed_secure_http_only_strict_and_site_wide() {
        for cookie in [
            session(random_secret()),
            pre_session(random_secret()),
            clear(SESSION_COOKIE),
            account_tab("test"),
            flash_cookie(&Flash {
                ok: true,
                text: "done".into(),
            })
            .unwrap(),
        ] {
            let text = cookie.to_str().unwrap();
            assert!(text.starts_with("__Host-capstan_"), "{text}");
            for attribute in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/"] {
                assert!(text.contains(attribute), "{text} lacks {attribute}");
            }
            assert!(!text.contains("Domain"), "{text}");
        }
        assert!(clear(FLASH_COOKIE).to_str().unwrap().contains("Max-Age=0"));
    }

    #[test]
    fn cookies_are_read_by_name_among_several_headers() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            "a=1; __Host-capstan_session=abc".parse().unwrap(),
        );
        headers.append(header::COOKIE, "b=2".parse().unwrap());
        assert_eq!(read(&headers, SESSION_COOKIE).as_deref(), Some("abc"));
        assert_eq!(read(&headers, "b").as_deref(), Some("2"));
        assert_eq!(read(&headers, PRE_SESSION_COOKIE), None);
    }

    #[test]
    fn a_flash_survives_the_round_trip_and_a_forged_one_is_ignored() {
        let flash = Flash {
            ok: false,
            text: "Needs a newer agent — update this node. <b>".into(),
        };
        let cookie = flash_cookie(&flash).unwrap();
        let value = cookie
            .to_str()
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string();
        let mut headers = HeaderMap::new();
        headers.insert(header::COOKIE, value.parse().unwrap());
        assert_eq!(read_flash(&headers), Some(flash));
        headers.insert(header::COOKIE, "__Host-capstan_flash=%%%".parse().unwrap());
        assert_eq!(read_flash(&headers), None);
    }

    #[test]
    fn tokens_match_only_exactly_and_never_when_empty() {
        let token = random_secret();
        assert!(looks_like_secret(&token));
        assert!(tokens_match(&token, &token.clone()));
        assert!(!tokens_match(&token, &random_secret()));
        assert!(!tokens_match(&token, &token[..42]));
        assert!(!tokens_match("", ""));
        assert!(!looks_like_secret("short"));
    }
}
