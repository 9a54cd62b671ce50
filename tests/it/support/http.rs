//! Requests to a running provender, read whole: [`get`] and [`request`] give a [`Got`] (status,
//! headers, body) with accessors for the JSON error body provender answers failures with.

use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::within;

/// One whole response.
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Got {
    /// The body as JSON; panics, showing the body, if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// The body as text (invalid UTF-8 replaced), for messages and `contains` checks.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `content-type` header, empty if absent.
    pub fn content_type(&self) -> &str {
        self.headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// `error.code` of the JSON error body provender answers a failure with, empty if absent.
    pub fn code(&self) -> String {
        self.error_field("code")
    }

    /// `error.message` of the JSON error body, empty if absent.
    pub fn message(&self) -> String {
        self.error_field("message")
    }

    fn error_field(&self, field: &str) -> String {
        self.json()["error"][field]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// `GET url`; panics if no whole response arrives (see [`send`]).
pub async fn get(client: &reqwest::Client, url: &str) -> Got {
    request(client, reqwest::Method::GET, url).await
}

/// `method url`; panics if no whole response arrives (see [`send`]).
pub async fn request(client: &reqwest::Client, method: reqwest::Method, url: &str) -> Got {
    send(url, client.request(method, url)).await
}

/// Sends `req` (for `url`, named in failures) and reads its whole body, each step within
/// [`super::TIMEOUT`]; panics if it cannot be sent or its body ends in an error.
pub async fn send(url: &str, req: reqwest::RequestBuilder) -> Got {
    let (got, body) = send_and_read(url, req).await;
    Got {
        body: body.unwrap_or_else(|e| panic!("{url}: reading the body: {e}")),
        ..got
    }
}

/// Like [`send`], but a body that ends in an error (a refused archive is cut off mid-stream)
/// reads as empty, keeping the status and headers.
pub async fn send_lenient(url: &str, req: reqwest::RequestBuilder) -> Got {
    let (got, body) = send_and_read(url, req).await;
    Got {
        body: body.unwrap_or_default(),
        ..got
    }
}

/// The response with an empty body, and the body as read.
async fn send_and_read(url: &str, req: reqwest::RequestBuilder) -> (Got, reqwest::Result<Vec<u8>>) {
    let resp = within(url, req.send())
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let got = Got {
        status: resp.status(),
        headers: resp.headers().clone(),
        body: Vec::new(),
    };
    let body = within(url, resp.bytes()).await.map(|b| b.to_vec());
    (got, body)
}
