//! HTTP/1.1 for the operator's page, by hand like the metrics endpoint (`metrics::http`): one
//! request per connection, read with bounds (a head of at most [`MAX_HEAD`] bytes, a body of at
//! most [`MAX_BODY`]), answered and closed. Parsing never indexes: whatever a client sends ends
//! in a 4xx, never a panic.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Longest request head (request line and headers).
pub const MAX_HEAD: usize = 8 * 1024;
/// Longest request body (an action's form).
pub const MAX_BODY: usize = 16 * 1024;

/// One request.
#[derive(Debug, Default)]
pub struct Request {
    pub method: String,
    /// The path, without the query string.
    pub path: String,
    pub query: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The first header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as an `application/x-www-form-urlencoded` form: the first value of `name`.
    pub fn form(&self, name: &str) -> Option<String> {
        url::form_urlencoded::parse(&self.body)
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }
}

/// One response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response::new(
            status,
            "text/plain; charset=utf-8",
            body.into().into_bytes(),
        )
    }

    pub fn html(status: u16, body: String) -> Response {
        Response::new(status, "text/html; charset=utf-8", body.into_bytes())
    }

    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Response {
        self.headers.push((name, value.into()));
        self
    }

    /// The bytes on the wire; `with_body` false for `HEAD`. Every answer carries headers that
    /// keep the page out of frames, caches and other origins' reach, and a policy that lets it
    /// run no script at all.
    pub fn to_bytes(&self, with_body: bool) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
             Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
             X-Frame-Options: DENY\r\nReferrer-Policy: no-referrer\r\n\
             Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; \
             img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            // Values are the proxy's own (never a client's bytes), but a newline would split
            // the head: dropped rather than trusted.
            let value: String = value.chars().filter(|c| !c.is_control()).collect();
            head.push_str(name);
            head.push_str(": ");
            head.push_str(&value);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        if with_body {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        _ => "Unknown",
    }
}

/// Reads one request from `stream`; `Err` is the answer to a request that cannot be read (or
/// `None` when the client went away).
pub async fn read_request<S: AsyncRead + Unpin>(
    stream: &mut S,
) -> Result<Request, Option<Response>> {
    let mut data = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    let head_end = loop {
        if let Some(end) = end_of_head(&data) {
            break end;
        }
        if data.len() >= MAX_HEAD {
            return Err(Some(Response::text(431, "request head too large\n")));
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return Err(None),
            Ok(n) => data.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    };
    let mut request = parse_head(data.get(..head_end).unwrap_or_default())
        .map_err(|why| Some(Response::text(400, format!("bad request: {why}\n"))))?;
    let length = match request.header("content-length") {
        None => 0,
        Some(v) => v
            .trim()
            .parse::<usize>()
            .map_err(|_| Some(Response::text(400, "bad request: Content-Length\n")))?,
    };
    if request.header("transfer-encoding").is_some() {
        return Err(Some(Response::text(
            400,
            "bad request: send the form with a Content-Length\n",
        )));
    }
    if length > MAX_BODY {
        return Err(Some(Response::text(413, "request body too large\n")));
    }
    let mut body = data.get(head_end..).unwrap_or_default().to_vec();
    while body.len() < length {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return Err(None),
            Ok(n) => body.extend_from_slice(buf.get(..n).unwrap_or_default()),
        }
    }
    body.truncate(length);
    request.body = body;
    Ok(request)
}

/// Where the head ends (after the blank line), if it does.
fn end_of_head(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

fn parse_head(head: &[u8]) -> Result<Request, &'static str> {
    let text = std::str::from_utf8(head).map_err(|_| "the head is not UTF-8")?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("the request line");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("only HTTP/1.x");
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or("a header without ':'")?;
        headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
    }
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        body: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read(bytes: &[u8]) -> Result<Request, Option<Response>> {
        let mut reader = bytes;
        read_request(&mut reader).await
    }

    #[tokio::test]
    async fn reads_heads_and_forms() {
        let r = read(b"POST /action?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 21\r\n\r\nx=a%20b&table=t%26u+v")
            .await
            .unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str()),
            ("POST", "/action", "x=1")
        );
        assert_eq!(r.header("host"), Some("a"));
        assert_eq!(r.form("x").as_deref(), Some("a b"));
        assert_eq!(r.form("table").as_deref(), Some("t&u v"));
        assert_eq!(r.form("nope"), None);
    }

    #[tokio::test]
    async fn refuses_what_it_cannot_read() {
        for (bytes, status) in [
            (&b"GET / SPDY/3\r\n\r\n"[..], 400),
            (b"GET /\r\n\r\n", 400),
            (b"GET / HTTP/1.1 x\r\n\r\n", 400),
            (b"GET / HTTP/1.1\r\nbroken\r\n\r\n", 400),
            (b"\xff\xfe HTTP/1.1\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
            (b"POST / HTTP/1.1\r\nContent-Length: 99999\r\n\r\n", 413),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                400,
            ),
        ] {
            let got = read(bytes).await.unwrap_err().map(|r| r.status);
            assert_eq!(got, Some(status), "{bytes:?}");
        }
        let big = [b'a'; MAX_HEAD + 10];
        assert_eq!(read(&big).await.unwrap_err().map(|r| r.status), Some(431));
        // A client that stops mid-body is gone, not answered.
        assert!(read(b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nab")
            .await
            .unwrap_err()
            .is_none());
    }

    #[test]
    fn headers_cannot_be_split() {
        let r = Response::text(200, "x").with_header("Location", "/a\r\nSet-Cookie: y");
        let wire = String::from_utf8(r.to_bytes(true)).unwrap();
        assert!(wire.contains("Location: /aSet-Cookie: y\r\n"), "{wire}");
        assert!(wire.contains("Content-Security-Policy: default-src 'none'"));
    }
}
