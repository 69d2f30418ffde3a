//! The names the machine's own web server serves over TLS, read from its nginx site files
//! (AG-56: "every name the site vhost serves"). A small reader of nginx's configuration
//! grammar (words, quoted strings, `#` comments, `;` and blocks): each `server` block that
//! listens with TLS (`listen ... ssl`, `listen 443`, or `ssl on`) gives its `server_name`s.
//! Only plain host names are kept: `_`, wildcards and regular expressions name no one host a
//! certificate can be asked for.

/// One token of an nginx configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(String),
    Semicolon,
    Open,
    Close,
}

crate::domain::refusal!(
    /// Why nginx's configuration could not be read for its TLS server names.
    BadNginxConfig
);

fn tokens(text: &str) -> Result<Vec<Token>, BadNginxConfig> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            ';' => {
                chars.next();
                out.push(Token::Semicolon);
            }
            '{' => {
                chars.next();
                out.push(Token::Open);
            }
            '}' => {
                chars.next();
                out.push(Token::Close);
            }
            '"' | '\'' => {
                let quote = c;
                chars.next();
                let mut word = String::new();
                let mut closed = false;
                while let Some(c) = chars.next() {
                    if c == '\\' {
                        if let Some(escaped) = chars.next() {
                            word.push(escaped);
                        }
                        continue;
                    }
                    if c == quote {
                        closed = true;
                        break;
                    }
                    word.push(c);
                }
                if !closed {
                    return Err("a quoted string is never closed".into());
                }
                out.push(Token::Word(word));
            }
            _ => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, ';' | '{' | '}') {
                        break;
                    }
                    word.push(c);
                    chars.next();
                }
                out.push(Token::Word(word));
            }
        }
    }
    Ok(out)
}

/// One `server` block as far as TLS names go.
#[derive(Debug, Default)]
struct Server {
    tls: bool,
    names: Vec<String>,
}

/// Whether a `listen` directive's arguments listen with TLS.
fn listens_with_tls(args: &[String]) -> bool {
    args.iter().any(|arg| {
        arg == "ssl" || arg == "443" || arg.rsplit_once(':').is_some_and(|(_, port)| port == "443")
    })
}

/// A name a certificate can be asked for: letters, digits, hyphens and dots, no wildcard.
pub fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.contains(|c: char| c.is_ascii_alphabetic())
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// The names the TLS `server` blocks of one nginx file serve, lowercased, in order, each
/// once; or why the file cannot be read as nginx configuration.
pub fn tls_server_names(text: &str) -> Result<Vec<String>, BadNginxConfig> {
    let tokens = tokens(text)?;
    // Each open block: whether it is a `server` block (its index in `servers`).
    let mut stack: Vec<Option<usize>> = Vec::new();
    let mut servers: Vec<Server> = Vec::new();
    let mut statement: Vec<String> = Vec::new();
    for token in tokens {
        match token {
            Token::Word(word) => statement.push(word),
            Token::Open => {
                let is_server = statement.len() == 1 && statement[0] == "server";
                // A `server` inside `upstream` is a directive, never a block; a `server {`
                // is a virtual host wherever it stands (http, or a file included there).
                stack.push(if is_server {
                    servers.push(Server::default());
                    Some(servers.len() - 1)
                } else {
                    None
                });
                statement.clear();
            }
            Token::Close => {
                if !statement.is_empty() {
                    return Err(format!(
                        "\"{}\" is not ended with ';' before '}}'",
                        statement.join(" ")
                    )
                    .into());
                }
                if stack.pop().is_none() {
                    return Err("a '}' closes no block".into());
                }
            }
            Token::Semicolon => {
                let server = stack.last().copied().flatten();
                if let (Some(index), Some((directive, args))) = (server, statement.split_first()) {
                    let server = &mut servers[index];
                    match directive.as_str() {
                        "listen" if listens_with_tls(args) => server.tls = true,
                        "ssl" if args.first().is_some_and(|arg| arg == "on") => server.tls = true,
                        "server_name" => server.names.extend(args.iter().cloned()),
                        _ => {}
                    }
                }
                statement.clear();
            }
        }
    }
    if !stack.is_empty() {
        return Err("a block is never closed".into());
    }
    if !statement.is_empty() {
        return Err(format!("\"{}\" is not ended with ';'", statement.join(" ")).into());
    }
    let mut names: Vec<String> = Vec::new();
    for server in servers.into_iter().filter(|server| server.tls) {
        for name in server.names {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            if is_host_name(&name) && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: &str = r#"
# the site, as certbot --nginx leaves it
server {
    listen 80;
    server_name example.test www.example.test;
    return 301 https://$host$request_uri;
}
server {
    listen 443 ssl http2; # managed by Certbot
    listen [::]:443 ssl;
    server_name example.test "WWW.Example.test" _ *.example.test ~^(?<sub>.+)\.example\.test$;
    ssl_certificate /etc/letsencrypt/live/example.test/fullchain.pem;
    location / { try_files $uri /index.php; }
}
server {
    listen 8443;
    ssl on;
    server_name shop.example.test;
}
server {
    listen 127.0.0.1:8080;
    server_name internal.example.test;
}
upstream php { server unix:/run/php/php-fpm.sock; }
"#;

    #[test]
    fn ag_56_the_names_served_over_tls_are_read_from_the_server_blocks() {
        assert_eq!(
            tls_server_names(SITE).unwrap(),
            ["example.test", "www.example.test", "shop.example.test"]
        );
    }

    #[test]
    fn ag_56_a_file_that_is_not_nginx_configuration_says_why() {
        assert!(
            tls_server_names("server { listen 443 ssl; server_name a.test; ")
                .unwrap_err()
                .contains("never closed")
        );
        assert!(tls_server_names("server { server_name \"a.test; }")
            .unwrap_err()
            .contains("quoted"));
        assert!(tls_server_names("}")
            .unwrap_err()
            .contains("closes no block"));
        assert!(tls_server_names("server { listen 443 ssl }")
            .unwrap_err()
            .contains("not ended"));
        assert_eq!(tls_server_names("").unwrap(), Vec::<String>::new());
    }

    #[test]
    fn only_plain_host_names_are_names_a_certificate_is_asked_for() {
        assert!(is_host_name("www.example.test"));
        assert!(is_host_name("localhost"));
        for bad in [
            "_",
            "*.example.test",
            "~^x$",
            "",
            "-a.test",
            "a..test",
            "127.0.0.1",
        ] {
            assert!(!is_host_name(bad), "{bad}");
        }
    }
}
