//! Reading the proxy's Prometheus endpoint (`--metrics-listen`) in tests.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET /metrics` on 127.0.0.1:`port`: the body, after checking the status and content type.
pub async fn scrape(port: u16) -> String {
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap_or_else(|e| panic!("connect to the metrics port {port}: {e}"));
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("send the scrape request");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut response))
        .await
        .expect("the metrics answer within 5 s")
        .expect("read the metrics answer");
    let text = String::from_utf8(response).expect("the metrics page is UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP head");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_string()
}

/// The value of the sample `name{labels}` (labels in the order the proxy writes them), if any.
pub fn sample(page: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut key = name.to_string();
    if !labels.is_empty() {
        let inner: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        key = format!("{key}{{{}}}", inner.join(","));
    }
    page.lines()
        .find_map(|l| l.strip_prefix(&key)?.strip_prefix(' '))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{key}: {v} is not a number"))
        })
}
