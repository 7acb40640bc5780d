//! The CLI's client of an airlock server: the stored login, one HTTP/1.1
//! exchange at a time (http or verified https), typed bodies of
//! [`airlock_protocol`], and server-sent events for following a run.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use airlock_protocol::runs::RunEvent;
use airlock_protocol::{Error, ErrorBody, ErrorCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What `airlock login` stores.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Credentials {
    pub server: String,
    pub api_key: String,
}

/// `$XDG_CONFIG_HOME/airlock/credentials.json`, else `~/.config/…`.
pub fn credentials_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("airlock").join("credentials.json"))
}

/// The server and key to use: `AIRLOCK_SERVER` + `AIRLOCK_API_KEY` when
/// both are set, else the stored login.
pub fn credentials() -> Result<Credentials, String> {
    if let (Ok(server), Ok(api_key)) = (
        std::env::var("AIRLOCK_SERVER"),
        std::env::var("AIRLOCK_API_KEY"),
    ) {
        return Ok(Credentials { server, api_key });
    }
    let path = credentials_path().ok_or("no home directory for the stored login")?;
    let text = std::fs::read_to_string(&path)
        .map_err(|_| format!("not logged in (no {}); run `airlock login`", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Stores a login 0600 in a 0700 directory (written to a temporary file,
/// then renamed, so a crash never leaves half a key).
pub fn save_credentials(c: &Credentials) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let path = credentials_path().ok_or("no home directory to store the login in")?;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    let text = serde_json::to_string_pretty(c).map_err(|e| e.to_string())?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// One answer of the server.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub set_cookie: Option<String>,
    pub bytes: Bytes,
}

impl Reply {
    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The error of a non-2xx answer, from its error body.
    fn error(&self) -> Error {
        match serde_json::from_slice::<ErrorBody>(&self.bytes) {
            Ok(b) => b.into(),
            Err(_) => Error::new(
                ErrorCode::Internal,
                format!("the server answered {} without an error body", self.status),
            ),
        }
    }

    /// The typed body of a 2xx answer, or the error.
    pub fn json<T: DeserializeOwned>(self) -> Result<T, Error> {
        if !self.ok() {
            return Err(self.error());
        }
        serde_json::from_slice(&self.bytes)
            .map_err(|e| transport(format!("the server's answer does not parse: {e}")))
    }

    /// A 2xx answer with no body worth reading.
    pub fn empty(self) -> Result<(), Error> {
        if self.ok() { Ok(()) } else { Err(self.error()) }
    }

    /// The text of a 2xx answer.
    pub fn text(self) -> Result<String, Error> {
        if !self.ok() {
            return Err(self.error());
        }
        Ok(String::from_utf8_lossy(&self.bytes).into_owned())
    }
}

/// A failure to talk to the server at all.
fn transport(msg: impl Into<String>) -> Error {
    Error::new(ErrorCode::Internal, msg)
}

/// A connection to `server` (http or https), HTTP/1.1, with its host name.
async fn connect(
    server: &str,
) -> Result<(hyper::client::conn::http1::SendRequest<Full<Bytes>>, String), Error> {
    let uri: hyper::Uri = server
        .trim_end_matches('/')
        .parse()
        .map_err(|_| transport(format!("{server:?} is not a URL")))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(transport(format!("{server:?}: use http:// or https://"))),
    };
    let host = uri
        .host()
        .ok_or_else(|| transport("the server URL has no host"))?
        .to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let tcp = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect((host.as_str(), port)),
    )
    .await
    .map_err(|_| transport(format!("{server}: connection timed out")))?
    .map_err(|e| transport(format!("{server}: {e}")))?;
    let authority = format!("{host}:{port}");
    if tls {
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|_| transport(format!("{host:?} is not a valid TLS name")))?;
        let stream = airlock_egress::proxy::tls_connector()
            .connect(name, tcp)
            .await
            .map_err(|e| transport(format!("{server}: TLS: {e}")))?;
        Ok((
            handshake(hyper_util::rt::TokioIo::new(stream)).await?,
            authority,
        ))
    } else {
        Ok((
            handshake(hyper_util::rt::TokioIo::new(tcp)).await?,
            authority,
        ))
    }
}

async fn handshake<T>(io: T) -> Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>, Error>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| transport(e.to_string()))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Sends one request and returns the response with its body still
/// streaming.
pub(crate) async fn send(
    server: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
    let (mut sender, authority) = connect(server).await?;
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, authority)
        .header(hyper::header::USER_AGENT, "airlock-cli");
    if body.is_some() {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| transport(e.to_string()))?;
    tokio::time::timeout(Duration::from_secs(60), sender.send_request(req))
        .await
        .map_err(|_| transport("the server did not answer in 60 s"))?
        .map_err(|e| transport(e.to_string()))
}

/// One exchange with the server, the whole body read.
pub async fn call(
    server: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Result<Reply, Error> {
    let resp = send(server, method, path, headers, body).await?;
    let status = resp.status().as_u16();
    let set_cookie = resp
        .headers()
        .get(hyper::header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| transport(format!("{server}: {e}")))?
        .to_bytes();
    Ok(Reply {
        status,
        set_cookie,
        bytes,
    })
}

/// Percent-encodes one path segment or query value.
pub fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A server reached with an API key.
#[derive(Debug, Clone)]
pub struct Remote {
    pub creds: Credentials,
}

impl Remote {
    pub fn from_login() -> Result<Self, String> {
        Ok(Self {
            creds: credentials()?,
        })
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.creds.api_key)
    }

    /// A request with the key; `extra` headers added.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        body: Option<&impl Serialize>,
    ) -> Result<Reply, Error> {
        let bearer = self.bearer();
        let mut headers = vec![("authorization", bearer.as_str())];
        headers.extend_from_slice(extra);
        let body = match body {
            Some(b) => Some(serde_json::to_vec(b).map_err(|e| transport(e.to_string()))?),
            None => None,
        };
        call(&self.creds.server, method, path, &headers, body).await
    }

    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, Error> {
        self.request("GET", path, &[], None::<&()>).await?.json()
    }

    /// Follows a run's events over SSE from after `after` until its `end`
    /// event, calling `f` for each; a dropped stream is resumed with
    /// `Last-Event-ID`.
    pub async fn follow(
        &self,
        run_id: &str,
        mut after: i64,
        f: &mut (dyn FnMut(&RunEvent) + Send),
    ) -> Result<(), Error> {
        let path = format!("/v1/runs/{}/events", encode(run_id));
        let bearer = self.bearer();
        for _attempt in 0..100 {
            let last = after.to_string();
            let headers = [
                ("authorization", bearer.as_str()),
                ("accept", "text/event-stream"),
                ("last-event-id", last.as_str()),
            ];
            let resp = send(&self.creds.server, "GET", &path, &headers, None).await?;
            if !resp.status().is_success() {
                let status = resp.status().as_u16();
                let bytes = resp
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| transport(e.to_string()))?
                    .to_bytes();
                return Err(Reply {
                    status,
                    set_cookie: None,
                    bytes,
                }
                .error());
            }
            let mut body = resp.into_body();
            let mut parser = SseParser::default();
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { break };
                let Some(chunk) = frame.data_ref() else {
                    continue;
                };
                for ev in parser.push(chunk) {
                    if ev.kind == "end" {
                        return Ok(());
                    }
                    let seq = ev
                        .id
                        .as_deref()
                        .and_then(|i| i.parse().ok())
                        .unwrap_or(after);
                    let data = serde_json::from_str(&ev.data).unwrap_or(serde_json::Value::Null);
                    after = seq.max(after);
                    f(&RunEvent {
                        seq,
                        at: 0,
                        kind: ev.kind,
                        data,
                    });
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(transport("the event stream kept dropping"))
    }
}

/// One server-sent event.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct SseEvent {
    pub id: Option<String>,
    pub kind: String,
    pub data: String,
}

/// An incremental `text/event-stream` parser (lines, comments, `id`,
/// `event`, multi-line `data`).
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    cur: SseEvent,
}

impl SseParser {
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                let ev = std::mem::take(&mut self.cur);
                if !ev.kind.is_empty() || !ev.data.is_empty() {
                    out.push(SseEvent {
                        kind: if ev.kind.is_empty() {
                            "message".into()
                        } else {
                            ev.kind
                        },
                        ..ev
                    });
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "id" => self.cur.id = Some(value.to_string()),
                "event" => self.cur.kind = value.to_string(),
                "data" => {
                    if !self.cur.data.is_empty() {
                        self.cur.data.push('\n');
                    }
                    self.cur.data.push_str(value);
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_across_chunks_are_reassembled() {
        let mut p = SseParser::default();
        assert!(p.push(b": keepalive\n\nid: 3\nevent: lo").is_empty());
        let evs = p.push(b"g\ndata: {\"text\":\"hi\"}\n\nevent: end\ndata: {}\n\n");
        assert_eq!(
            evs,
            vec![
                SseEvent {
                    id: Some("3".into()),
                    kind: "log".into(),
                    data: "{\"text\":\"hi\"}".into()
                },
                SseEvent {
                    id: None,
                    kind: "end".into(),
                    data: "{}".into()
                }
            ]
        );
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        assert_eq!(encode("run_1"), "run_1");
        assert_eq!(encode("../x y"), "..%2Fx%20y");
    }
}
