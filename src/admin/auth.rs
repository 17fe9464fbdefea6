//! Who is asking: HTTP Basic credentials checked against the proxy's own users (the same users
//! and passwords as its MySQL port; with none configured, `root` with an empty password, as
//! there), or the `--admin-token` secret (as the Basic password, any user name, or as
//! `Authorization: Bearer`). And the defences of actions against other sites: a per-user token
//! in every form, and the browser's `Origin` / `Sec-Fetch-Site` headers.

use sha1::{Digest, Sha1};
use sha2::Sha256;

use super::http::Request;
use crate::config::{Secret, User};

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// One of the proxy's users.
    User(String),
    /// The `--admin-token` holder (with the user name they gave, for the log).
    Token(String),
}

impl Principal {
    /// The name for logs and the page.
    pub fn name(&self) -> String {
        match self {
            Principal::User(u) => u.clone(),
            Principal::Token(u) if u.is_empty() => "token".into(),
            Principal::Token(u) => format!("token ({u})"),
        }
    }
}

/// Why a request is not let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// No credentials at all.
    Missing,
    /// Credentials that do not match (never says which part).
    Wrong,
}

/// The page's logins.
pub struct Auth {
    users: Vec<User>,
    token: Option<String>,
    /// A secret of this process, for the forms' tokens (a new one at each start: a form from
    /// before a restart must be loaded again).
    secret: [u8; 32],
}

impl Auth {
    pub fn new(users: Vec<User>, token: Option<String>) -> Auth {
        Auth {
            users,
            token,
            secret: rand::random(),
        }
    }

    /// The request's principal, from its `Authorization` header.
    pub fn check(&self, request: &Request) -> Result<Principal, Denied> {
        let Some(value) = request.header("authorization") else {
            return Err(Denied::Missing);
        };
        let (scheme, rest) = value.split_once(' ').unwrap_or((value, ""));
        if scheme.eq_ignore_ascii_case("bearer") {
            return match &self.token {
                Some(t) if ct_eq(t.as_bytes(), rest.trim().as_bytes()) => {
                    Ok(Principal::Token(String::new()))
                }
                _ => Err(Denied::Wrong),
            };
        }
        if !scheme.eq_ignore_ascii_case("basic") {
            return Err(Denied::Wrong);
        }
        let decoded = base64_decode(rest.trim()).ok_or(Denied::Wrong)?;
        let colon = decoded
            .iter()
            .position(|&b| b == b':')
            .ok_or(Denied::Wrong)?;
        let name = String::from_utf8_lossy(decoded.get(..colon).unwrap_or_default()).into_owned();
        let password = decoded.get(colon + 1..).unwrap_or_default();
        if let Some(token) = &self.token {
            if ct_eq(token.as_bytes(), password) {
                return Ok(Principal::Token(name));
            }
        }
        if self.password_ok(&name, password) {
            return Ok(Principal::User(name));
        }
        Err(Denied::Wrong)
    }

    /// Whether `password` is `name`'s, as the MySQL port would decide.
    fn password_ok(&self, name: &str, password: &[u8]) -> bool {
        if self.users.is_empty() {
            // As the MySQL port: root with an empty password (the configuration allows that
            // only on loopback addresses).
            return name == "root" && password.is_empty();
        }
        let Some(user) = self.users.iter().find(|u| u.name == name) else {
            return false;
        };
        match &user.secret {
            Secret::Plain(p) => ct_eq(p, password),
            Secret::NativeHash(stored) => ct_eq(&Sha1::digest(Sha1::digest(password)), stored),
        }
    }

    /// The token the page's forms carry for `who`: a keyed hash of their name, so another site
    /// can neither read nor guess it.
    pub fn form_token(&self, who: &Principal) -> String {
        let mut h = Sha256::new();
        h.update(self.secret);
        h.update(b"form:");
        h.update(who.name().as_bytes());
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether an action request carries `who`'s form token.
    pub fn form_token_ok(&self, who: &Principal, given: Option<&str>) -> bool {
        given.is_some_and(|g| ct_eq(self.form_token(who).as_bytes(), g.as_bytes()))
    }
}

/// Whether a request comes from the page itself, as far as the browser says: `Sec-Fetch-Site`
/// (when sent) must be `same-origin` or `none` (typed or bookmarked), and `Origin` (when sent)
/// must name this host and port (its scheme is not compared: behind a reverse proxy that ends
/// TLS the browser's origin is `https` while the page is served as `http`, and one host and port
/// serve one scheme). Clients that send neither (curl, scripts) are not browsers led by another
/// site; they still need the form token.
pub fn same_origin(request: &Request) -> Result<(), String> {
    if let Some(site) = request.header("sec-fetch-site") {
        if site != "same-origin" && site != "none" {
            return Err(format!("Sec-Fetch-Site is {site}"));
        }
    }
    if let Some(origin) = request.header("origin") {
        let host = request.header("host").unwrap_or_default();
        let authority = origin
            .strip_prefix("https://")
            .or_else(|| origin.strip_prefix("http://"));
        if authority.is_none_or(|a| !a.eq_ignore_ascii_case(host)) {
            return Err(format!("Origin {origin} is not this page's ({host})"));
        }
    }
    Ok(())
}

/// Compares without an early exit, so the time taken says nothing about where they differ.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Standard base64 (padding optional); `None` for anything else.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for c in s.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Request::default()
        }
    }

    fn basic(user_pw: &str) -> String {
        // Encoded with the same alphabet the decoder reads.
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let bytes = user_pw.as_bytes();
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |a, &b| (a << 8) | u32::from(b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        while !out.len().is_multiple_of(4) {
            out.push('=');
        }
        format!("Basic {out}")
    }

    #[test]
    fn base64() {
        assert_eq!(base64_decode("YWRtaW46cHc=").unwrap(), b"admin:pw");
        assert_eq!(base64_decode("YWRtaW46cHc").unwrap(), b"admin:pw");
        assert!(base64_decode("a*b").is_none());
        assert_eq!(basic("admin:pw"), "Basic YWRtaW46cHc=");
    }

    #[test]
    fn users_tokens_and_refusals() {
        let users = vec![
            User {
                name: "app".into(),
                secret: Secret::Plain(b"s3cret".to_vec()),
            },
            User {
                name: "ops".into(),
                secret: Secret::NativeHash(
                    crate::protocol::auth::parse_native_hash(
                        &crate::protocol::auth::native_password_hash(b"pw2"),
                    )
                    .unwrap(),
                ),
            },
        ];
        let a = Auth::new(users, Some("0123456789abcdef-token".into()));
        let check = |h: &str| a.check(&request(&[("authorization", h)]));
        assert_eq!(
            check(&basic("app:s3cret")),
            Ok(Principal::User("app".into()))
        );
        assert_eq!(check(&basic("ops:pw2")), Ok(Principal::User("ops".into())));
        assert_eq!(check(&basic("app:wrong")), Err(Denied::Wrong));
        assert_eq!(check(&basic("nobody:s3cret")), Err(Denied::Wrong));
        assert_eq!(check(&basic("root:")), Err(Denied::Wrong));
        assert_eq!(
            check(&basic("me:0123456789abcdef-token")),
            Ok(Principal::Token("me".into()))
        );
        assert_eq!(
            check("Bearer 0123456789abcdef-token"),
            Ok(Principal::Token(String::new()))
        );
        assert_eq!(check("Bearer nope"), Err(Denied::Wrong));
        assert_eq!(check("Digest x"), Err(Denied::Wrong));
        assert_eq!(check("Basic !!!"), Err(Denied::Wrong));
        assert_eq!(a.check(&request(&[])), Err(Denied::Missing));
        // Without users, root with an empty password, as on the MySQL port.
        let open = Auth::new(Vec::new(), None);
        assert_eq!(
            open.check(&request(&[("authorization", &basic("root:"))])),
            Ok(Principal::User("root".into()))
        );
        assert_eq!(
            open.check(&request(&[("authorization", &basic("root:x"))])),
            Err(Denied::Wrong)
        );
        assert_eq!(
            open.check(&request(&[("authorization", "Bearer ")])),
            Err(Denied::Wrong)
        );
    }

    #[test]
    fn form_tokens_are_per_user_and_per_process() {
        let a = Auth::new(Vec::new(), None);
        let b = Auth::new(Vec::new(), None);
        let root = Principal::User("root".into());
        let t = a.form_token(&root);
        assert!(a.form_token_ok(&root, Some(&t)));
        assert!(!a.form_token_ok(&Principal::User("x".into()), Some(&t)));
        assert!(!b.form_token_ok(&root, Some(&t)));
        assert!(!a.form_token_ok(&root, None));
    }

    #[test]
    fn other_sites_are_refused() {
        let ok = request(&[("host", "127.0.0.1:9")]);
        assert!(same_origin(&ok).is_ok());
        let same = request(&[
            ("host", "127.0.0.1:9"),
            ("origin", "http://127.0.0.1:9"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert!(same_origin(&same).is_ok());
        let tls_ended_in_front =
            request(&[("host", "127.0.0.1:9"), ("origin", "https://127.0.0.1:9")]);
        assert!(same_origin(&tls_ended_in_front).is_ok());
        let null = request(&[("host", "127.0.0.1:9"), ("origin", "null")]);
        assert!(same_origin(&null).is_err());
        let other_port = request(&[("host", "127.0.0.1:9"), ("origin", "http://127.0.0.1:10")]);
        assert!(same_origin(&other_port).is_err());
        let cross = request(&[("host", "127.0.0.1:9"), ("sec-fetch-site", "cross-site")]);
        assert!(same_origin(&cross).is_err());
        let evil = request(&[("host", "127.0.0.1:9"), ("origin", "http://evil.example")]);
        assert!(same_origin(&evil).is_err());
    }
}
