//! Where sign-in sends an operator afterwards (`?next=`): only a path of this site's own UI,
//! so a link crafted elsewhere cannot turn the sign-in page into a redirect to another site
//! (`//evil.example`, `/\evil.example`, `https://...` and anything odd fall back to `/ui/`).

/// Where to go when `next` is missing or refused.
pub const DEFAULT_NEXT: &str = "/ui/";

/// The longest `next` kept.
const MAX_NEXT_LENGTH: usize = 1024;

/// `candidate` when it is a same-site path of the UI, else [`DEFAULT_NEXT`].
pub fn safe_next(candidate: Option<&str>) -> String {
    match candidate {
        Some(path) if is_safe(path) => path.to_string(),
        _ => DEFAULT_NEXT.to_string(),
    }
}

fn is_safe(path: &str) -> bool {
    path.len() <= MAX_NEXT_LENGTH
        && (path == "/ui" || path.starts_with("/ui/") || path.starts_with("/ui?"))
        && !path.starts_with("/ui/sign-in")
        && !path.contains("//")
        && !path.contains('\\')
        && !path.contains("/..")
        && path
            .bytes()
            .all(|byte| byte.is_ascii_graphic() && byte != b'"' && byte != b'<' && byte != b'>')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_the_ui_are_kept() {
        for path in ["/ui/", "/ui/nodes/5?tab=jobs", "/ui/jobs/42", "/ui"] {
            assert_eq!(safe_next(Some(path)), path);
        }
    }

    #[test]
    fn anything_that_could_leave_the_site_or_loop_falls_back_to_the_dashboard() {
        for path in [
            "//evil.example/ui/",
            "https://evil.example/ui/",
            "/\\evil.example",
            "/ui/\\evil",
            "/ui//evil.example",
            "/api/v1/nodes",
            "/ui/../api/v1/nodes",
            "/ui/sign-in?next=/ui/",
            "/ui/ x",
            "/ui/\u{7f}",
            "/ui/\"><script>",
            "",
            "ui/",
        ] {
            assert_eq!(safe_next(Some(path)), DEFAULT_NEXT, "{path:?}");
        }
        assert_eq!(safe_next(None), DEFAULT_NEXT);
        assert_eq!(
            safe_next(Some(&format!("/ui/{}", "a".repeat(2000)))),
            DEFAULT_NEXT
        );
    }
}
