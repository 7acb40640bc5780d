//! Webhook signature verification (API-9), pure: headers, the raw body, the
//! candidate secrets and the current time in; a delivery id or a refusal
//! out. No I/O, no clock, no store.
//!
//! Four formats:
//!
//! | format | headers | signed bytes | delivery id |
//! |---|---|---|---|
//! | Standard Webhooks (default) | `webhook-id`, `webhook-timestamp`, `webhook-signature` (`v1,<base64>` list) | `{id}.{timestamp}.{body}` | `webhook-id` |
//! | GitHub | `X-Hub-Signature-256: sha256=<hex>`, `X-GitHub-Delivery` | `{body}` | the signature (hex) |
//! | Slack | `X-Slack-Request-Timestamp`, `X-Slack-Signature: v0=<hex>` | `v0:{ts}:{body}` | the signature (hex) |
//! | Stripe | `Stripe-Signature: t=<ts>,v1=<hex>[,v1=…]` | `{t}.{body}` | `{t}.{sha256(body)}` |
//!
//! Why the delivery ids are what they are:
//! - Slack sends no delivery id, so the signature itself (lower-case hex)
//!   is the id: it is a function of the timestamp, the body and the key, so
//!   a replayed request carries the same one. A retry that Slack re-signs
//!   with a new timestamp is a new delivery.
//! - Stripe's header may carry several `v1` signatures (one per live
//!   secret on Stripe's side). An id built from "the first `v1`" could be
//!   changed by reordering or dropping signatures of a captured request,
//!   so the id is the signed timestamp plus the SHA-256 of the body, which
//!   no header edit can change. (Every Stripe event body carries its own
//!   `evt_…` id, so two genuine events never share it.)
//! - GitHub signs only the body: `X-GitHub-Delivery` is not covered by the
//!   signature (a captured request replayed with a new delivery id would
//!   look new), so the id is the signature, a function of the body and the
//!   key. The header is still required. There is no timestamp, so replay
//!   protection lasts as long as the replay store remembers (a day); every
//!   GitHub body carries unique ids, so two genuine events never collide.
//!
//! Secrets: for Standard Webhooks a secret is `whsec_<base64>` (the prefix
//! is optional) and the HMAC key is the decoded bytes, as the official
//! libraries do; for the other formats the secret string's bytes are the
//! key, as GitHub, Slack and Stripe do.
//!
//! Every check works on the raw bytes as received: a body that was parsed
//! and re-serialised (spacing, key order, escapes) does not verify. MACs
//! are compared with [`subtle::ConstantTimeEq`].

use std::fmt;

use airlock_worker::WebhookFormat;
use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// Accepted clock skew between the sender's timestamp and ours, both ways.
pub const TOLERANCE_S: i64 = 300;
/// Longest delivery id accepted (the replay store keys on it).
pub const MAX_DELIVERY_ID: usize = 256;
/// Longest signature header read; anything longer is refused unparsed.
const MAX_SIGNATURE_HEADER: usize = 8 * 1024;
/// Most signatures tried from one header.
const MAX_SIGNATURES: usize = 16;

/// Standard base64, padding optional (senders differ; the official Python
/// library pads an unpadded secret itself).
const B64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A delivery that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The replay-store key (see the module documentation per format).
    pub delivery_id: String,
    /// The signed timestamp (Unix seconds); `None` for GitHub.
    pub timestamp: Option<i64>,
}

/// Why a delivery was refused. The code goes to logs and the audit trail,
/// never to the sender (who always gets the same 401).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WebhookRefusal {
    /// A required header is absent.
    MissingHeader(&'static str),
    /// A header is present but garbled: not ASCII, repeated, wrong shape,
    /// bad base64 or hex, a non-numeric timestamp, an over-long id.
    MalformedHeader(&'static str),
    /// The signed timestamp is more than [`TOLERANCE_S`] in the past.
    TimestampTooOld,
    /// The signed timestamp is more than [`TOLERANCE_S`] in the future.
    TimestampTooNew,
    /// No candidate secret is usable as a key (none given, or none decodes).
    NoUsableSecret,
    /// Well-formed, in time, but no signature matches any secret.
    SignatureMismatch,
}

impl WebhookRefusal {
    /// A stable code for logs and audit metadata.
    pub fn code(&self) -> &'static str {
        match self {
            Self::MissingHeader(_) => "missing_header",
            Self::MalformedHeader(_) => "malformed_header",
            Self::TimestampTooOld => "timestamp_too_old",
            Self::TimestampTooNew => "timestamp_too_new",
            Self::NoUsableSecret => "no_usable_secret",
            Self::SignatureMismatch => "signature_mismatch",
        }
    }

    /// The header the refusal is about, if any.
    pub fn header(&self) -> Option<&'static str> {
        match self {
            Self::MissingHeader(h) | Self::MalformedHeader(h) => Some(h),
            _ => None,
        }
    }
}

impl fmt::Display for WebhookRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MissingHeader(h) => write!(f, "missing header {h}"),
            Self::MalformedHeader(h) => write!(f, "malformed header {h}"),
            Self::TimestampTooOld => write!(f, "timestamp older than {TOLERANCE_S} s"),
            Self::TimestampTooNew => write!(f, "timestamp more than {TOLERANCE_S} s ahead"),
            Self::NoUsableSecret => f.write_str("no usable secret"),
            Self::SignatureMismatch => f.write_str("no signature matches"),
        }
    }
}

impl std::error::Error for WebhookRefusal {}

/// Verifies one delivery against every candidate secret (newest first is
/// customary; any match suffices).
pub fn verify(
    format: WebhookFormat,
    secrets: &[impl AsRef<[u8]>],
    headers: &HeaderMap,
    raw_body: &[u8],
    now_unix_s: i64,
) -> Result<Verified, WebhookRefusal> {
    let parsed = parse(format, headers, now_unix_s)?;
    let keys: Vec<Zeroizing<Vec<u8>>> = secrets
        .iter()
        .filter_map(|s| key_of(format, s.as_ref()))
        .collect();
    if keys.is_empty() {
        return Err(WebhookRefusal::NoUsableSecret);
    }
    let mut matched = false;
    for key in &keys {
        let Some(expected) = hmac_sha256(key, &parsed.prefix, raw_body) else {
            continue;
        };
        for sig in &parsed.signatures {
            // Lengths are public; the comparison of equal-length MACs is
            // constant-time.
            if bool::from(expected.as_slice().ct_eq(sig.as_slice())) {
                matched = true;
            }
        }
        if matched {
            break;
        }
    }
    if !matched {
        return Err(WebhookRefusal::SignatureMismatch);
    }
    let delivery_id = match parsed.delivery {
        Delivery::Given(id) => id,
        Delivery::TimestampAndBody(t) => format!("{t}.{}", hex_lower(&Sha256::digest(raw_body))),
    };
    Ok(Verified {
        delivery_id,
        timestamp: parsed.timestamp,
    })
}

/// The header checks alone (shape, encoding, time window), without secrets
/// or body: lets a front end refuse garbage before it reads any secret.
/// [`verify`] repeats them.
pub fn precheck(
    format: WebhookFormat,
    headers: &HeaderMap,
    now_unix_s: i64,
) -> Result<(), WebhookRefusal> {
    parse(format, headers, now_unix_s).map(|_| ())
}

// ------------------------------------------------------------------ parsing

enum Delivery {
    Given(String),
    /// Stripe: `{t}.{sha256(body)}`, computed once the body is known.
    TimestampAndBody(i64),
}

struct Parsed {
    /// The signed bytes are `prefix || body`.
    prefix: Vec<u8>,
    signatures: Vec<Vec<u8>>,
    delivery: Delivery,
    timestamp: Option<i64>,
}

fn parse(format: WebhookFormat, headers: &HeaderMap, now: i64) -> Result<Parsed, WebhookRefusal> {
    match format {
        WebhookFormat::Standard => parse_standard(headers, now),
        WebhookFormat::Github => parse_github(headers),
        WebhookFormat::Slack => parse_slack(headers, now),
        WebhookFormat::Stripe => parse_stripe(headers, now),
    }
}

const SW_ID: &str = "webhook-id";
const SW_TS: &str = "webhook-timestamp";
const SW_SIG: &str = "webhook-signature";
const GH_SIG: &str = "x-hub-signature-256";
const GH_ID: &str = "x-github-delivery";
const SL_TS: &str = "x-slack-request-timestamp";
const SL_SIG: &str = "x-slack-signature";
const ST_SIG: &str = "stripe-signature";

fn parse_standard(h: &HeaderMap, now: i64) -> Result<Parsed, WebhookRefusal> {
    let id = delivery_id(h, SW_ID)?;
    let ts_text = header(h, SW_TS)?;
    let ts = timestamp(ts_text).ok_or(WebhookRefusal::MalformedHeader(SW_TS))?;
    let sig_text = header(h, SW_SIG)?;
    if sig_text.len() > MAX_SIGNATURE_HEADER {
        return Err(WebhookRefusal::MalformedHeader(SW_SIG));
    }
    let mut signatures = Vec::new();
    for entry in sig_text.split_ascii_whitespace() {
        let (version, value) = entry
            .split_once(',')
            .ok_or(WebhookRefusal::MalformedHeader(SW_SIG))?;
        // Other schemes (`v1a`, asymmetric) are not ours to check.
        if version != "v1" {
            continue;
        }
        let bytes = B64
            .decode(value)
            .map_err(|_| WebhookRefusal::MalformedHeader(SW_SIG))?;
        signatures.push(bytes);
    }
    if signatures.is_empty() || signatures.len() > MAX_SIGNATURES {
        return Err(WebhookRefusal::MalformedHeader(SW_SIG));
    }
    in_window(ts, now)?;
    Ok(Parsed {
        prefix: format!("{id}.{ts_text}.").into_bytes(),
        signatures,
        delivery: Delivery::Given(id.to_string()),
        timestamp: Some(ts),
    })
}

fn parse_github(h: &HeaderMap) -> Result<Parsed, WebhookRefusal> {
    let sig_text = header(h, GH_SIG)?;
    let sig = sig_text
        .strip_prefix("sha256=")
        .and_then(hex_32)
        .ok_or(WebhookRefusal::MalformedHeader(GH_SIG))?;
    // Required, but not the replay key: it is not signed.
    delivery_id(h, GH_ID)?;
    Ok(Parsed {
        prefix: Vec::new(),
        delivery: Delivery::Given(format!("gh:{}", hex_lower(&sig))),
        signatures: vec![sig.to_vec()],
        timestamp: None,
    })
}

fn parse_slack(h: &HeaderMap, now: i64) -> Result<Parsed, WebhookRefusal> {
    let ts_text = header(h, SL_TS)?;
    let ts = timestamp(ts_text).ok_or(WebhookRefusal::MalformedHeader(SL_TS))?;
    let sig_text = header(h, SL_SIG)?;
    let sig = sig_text
        .strip_prefix("v0=")
        .and_then(hex_32)
        .ok_or(WebhookRefusal::MalformedHeader(SL_SIG))?;
    in_window(ts, now)?;
    Ok(Parsed {
        prefix: format!("v0:{ts_text}:").into_bytes(),
        delivery: Delivery::Given(hex_lower(&sig)),
        signatures: vec![sig.to_vec()],
        timestamp: Some(ts),
    })
}

fn parse_stripe(h: &HeaderMap, now: i64) -> Result<Parsed, WebhookRefusal> {
    let text = header(h, ST_SIG)?;
    if text.len() > MAX_SIGNATURE_HEADER {
        return Err(WebhookRefusal::MalformedHeader(ST_SIG));
    }
    let bad = WebhookRefusal::MalformedHeader(ST_SIG);
    let mut t: Option<(&str, i64)> = None;
    let mut signatures = Vec::new();
    for item in text.split(',') {
        let (k, v) = item.trim().split_once('=').ok_or(bad)?;
        match k {
            "t" => {
                if t.is_some() {
                    return Err(bad);
                }
                t = Some((v, timestamp(v).ok_or(bad)?));
            }
            "v1" => signatures.push(hex_32(v).ok_or(bad)?.to_vec()),
            // `v0` (test-mode legacy) and future schemes are ignored.
            _ => {}
        }
    }
    let (t_text, ts) = t.ok_or(bad)?;
    if signatures.is_empty() || signatures.len() > MAX_SIGNATURES {
        return Err(bad);
    }
    in_window(ts, now)?;
    Ok(Parsed {
        prefix: format!("{t_text}.").into_bytes(),
        signatures,
        delivery: Delivery::TimestampAndBody(ts),
        timestamp: Some(ts),
    })
}

/// The one value of a header as visible ASCII. A repeated header is
/// refused: which copy a proxy would pass on is anyone's guess.
fn header<'h>(h: &'h HeaderMap, name: &'static str) -> Result<&'h str, WebhookRefusal> {
    let mut all = h.get_all(name).iter();
    let Some(v) = all.next() else {
        return Err(WebhookRefusal::MissingHeader(name));
    };
    if all.next().is_some() {
        return Err(WebhookRefusal::MalformedHeader(name));
    }
    let s = v
        .to_str()
        .map_err(|_| WebhookRefusal::MalformedHeader(name))?
        .trim();
    if s.is_empty() {
        return Err(WebhookRefusal::MissingHeader(name));
    }
    Ok(s)
}

fn delivery_id<'h>(h: &'h HeaderMap, name: &'static str) -> Result<&'h str, WebhookRefusal> {
    let id = header(h, name)?;
    if id.len() > MAX_DELIVERY_ID || !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(WebhookRefusal::MalformedHeader(name));
    }
    Ok(id)
}

/// Unix seconds: 1 to 15 ASCII digits, nothing else (no sign, no fraction).
fn timestamp(s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 15 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn in_window(ts: i64, now: i64) -> Result<(), WebhookRefusal> {
    let skew = now.saturating_sub(ts);
    if skew > TOLERANCE_S {
        Err(WebhookRefusal::TimestampTooOld)
    } else if skew < -TOLERANCE_S {
        Err(WebhookRefusal::TimestampTooNew)
    } else {
        Ok(())
    }
}

/// The HMAC key a stored secret stands for; `None` when it is unusable.
/// The HMAC key a secret stands for; wiped when dropped.
fn key_of(format: WebhookFormat, secret: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    if secret.is_empty() {
        return None;
    }
    match format {
        WebhookFormat::Standard => {
            let text = std::str::from_utf8(secret).ok()?.trim();
            let b64 = text.strip_prefix("whsec_").unwrap_or(text);
            let key = Zeroizing::new(B64.decode(b64).ok()?);
            (!key.is_empty()).then_some(key)
        }
        WebhookFormat::Github | WebhookFormat::Slack | WebhookFormat::Stripe => {
            Some(Zeroizing::new(secret.to_vec()))
        }
    }
}

fn hmac_sha256(key: &[u8], prefix: &[u8], body: &[u8]) -> Option<Vec<u8>> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).ok()?;
    mac.update(prefix);
    mac.update(body);
    Some(mac.finalize().into_bytes().to_vec())
}

/// 64 hex digits (either case) as 32 bytes.
fn hex_32(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks_exact(2).enumerate() {
        let hi = hex_digit(pair[0])?;
        let lo = hex_digit(pair[1])?;
        *out.get_mut(i)? = (hi << 4) | lo;
    }
    Some(out)
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn hex_lower(bytes: &[u8]) -> String {
    const D: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(D[usize::from(b >> 4)]));
        s.push(char::from(D[usize::from(b & 0xf)]));
    }
    s
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use axum::http::{HeaderName, HeaderValue};

    const NOW: i64 = 1_800_000_000;
    const BODY: &[u8] = br#"{"name":"ada","count":3}"#;
    /// The same JSON value, re-serialised with different spacing.
    const RESPACED: &[u8] = br#"{"name": "ada", "count": 3}"#;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn mac(key: &[u8], msg: &[u8]) -> Vec<u8> {
        hmac_sha256(key, b"", msg).unwrap()
    }

    fn cat(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    // ------------------------------------------------------------ formats

    /// A sender of one format: signs `body` at `ts` with `secret`.
    #[derive(Clone, Copy)]
    struct Sender {
        format: WebhookFormat,
    }

    const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const PLAIN_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

    impl Sender {
        fn secret(self) -> Vec<u8> {
            match self.format {
                WebhookFormat::Standard => STANDARD_SECRET.as_bytes().to_vec(),
                _ => PLAIN_SECRET.as_bytes().to_vec(),
            }
        }

        fn other_secret(self) -> Vec<u8> {
            match self.format {
                WebhookFormat::Standard => {
                    b"whsec_c2VjcmV0LW51bWJlci10d28tLS0tLS0tLS0tLQ==".to_vec()
                }
                _ => b"another-secret-entirely".to_vec(),
            }
        }

        /// The signature value(s) for this format's header.
        fn signature(self, secret: &[u8], ts: i64, body: &[u8]) -> Vec<u8> {
            let key = key_of(self.format, secret).unwrap();
            match self.format {
                WebhookFormat::Standard => {
                    mac(&key, &cat(&[format!("msg_1.{ts}.").as_bytes(), body]))
                }
                WebhookFormat::Github => mac(&key, body),
                WebhookFormat::Slack => mac(&key, &cat(&[format!("v0:{ts}:").as_bytes(), body])),
                WebhookFormat::Stripe => mac(&key, &cat(&[format!("{ts}.").as_bytes(), body])),
            }
        }

        /// Headers carrying the given signatures (several where the format
        /// allows it).
        fn headers_with(self, ts: i64, sigs: &[Vec<u8>]) -> HeaderMap {
            let ts_s = ts.to_string();
            match self.format {
                WebhookFormat::Standard => {
                    let list: Vec<String> = sigs
                        .iter()
                        .map(|s| format!("v1,{}", B64.encode(s)))
                        .collect();
                    headers(&[
                        ("webhook-id", "msg_1"),
                        ("webhook-timestamp", &ts_s),
                        ("webhook-signature", &list.join(" ")),
                    ])
                }
                WebhookFormat::Github => headers(&[
                    (
                        "x-hub-signature-256",
                        &format!("sha256={}", hex_lower(&sigs[0])),
                    ),
                    ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
                ]),
                WebhookFormat::Slack => headers(&[
                    ("x-slack-request-timestamp", &ts_s),
                    ("x-slack-signature", &format!("v0={}", hex_lower(&sigs[0]))),
                ]),
                WebhookFormat::Stripe => {
                    let mut v = format!("t={ts}");
                    for s in sigs {
                        v.push_str(&format!(",v1={}", hex_lower(s)));
                    }
                    headers(&[("stripe-signature", &v)])
                }
            }
        }

        fn signed(self, ts: i64, body: &[u8]) -> HeaderMap {
            self.headers_with(ts, &[self.signature(&self.secret(), ts, body)])
        }

        fn check(self, h: &HeaderMap, body: &[u8]) -> Result<Verified, WebhookRefusal> {
            verify(self.format, &[self.secret()], h, body, NOW)
        }

        fn has_timestamp(self) -> bool {
            self.format != WebhookFormat::Github
        }

        fn required_headers(self) -> &'static [&'static str] {
            match self.format {
                WebhookFormat::Standard => {
                    &["webhook-id", "webhook-timestamp", "webhook-signature"]
                }
                WebhookFormat::Github => &["x-hub-signature-256", "x-github-delivery"],
                WebhookFormat::Slack => &["x-slack-request-timestamp", "x-slack-signature"],
                WebhookFormat::Stripe => &["stripe-signature"],
            }
        }
    }

    const ALL: [Sender; 4] = [
        Sender {
            format: WebhookFormat::Standard,
        },
        Sender {
            format: WebhookFormat::Github,
        },
        Sender {
            format: WebhookFormat::Slack,
        },
        Sender {
            format: WebhookFormat::Stripe,
        },
    ];

    #[test]
    fn api_9_valid_signature_is_accepted_in_every_format() {
        for s in ALL {
            let v = s.check(&s.signed(NOW, BODY), BODY);
            assert!(v.is_ok(), "{:?}: {v:?}", s.format);
        }
    }

    #[test]
    fn api_9_delivery_ids_per_format() {
        let std = ALL[0].check(&ALL[0].signed(NOW, BODY), BODY).unwrap();
        assert_eq!(
            std,
            Verified {
                delivery_id: "msg_1".into(),
                timestamp: Some(NOW)
            }
        );
        let gh = ALL[1].check(&ALL[1].signed(NOW, BODY), BODY).unwrap();
        let gh_sig = ALL[1].signature(&ALL[1].secret(), NOW, BODY);
        assert_eq!(
            gh,
            Verified {
                // The signed part, not the unsigned X-GitHub-Delivery header.
                delivery_id: format!("gh:{}", hex_lower(&gh_sig)),
                timestamp: None
            }
        );
        let sl = ALL[2].check(&ALL[2].signed(NOW, BODY), BODY).unwrap();
        let sig = ALL[2].signature(&ALL[2].secret(), NOW, BODY);
        assert_eq!(sl.delivery_id, hex_lower(&sig));
        assert_eq!(sl.timestamp, Some(NOW));
        let st = ALL[3].check(&ALL[3].signed(NOW, BODY), BODY).unwrap();
        assert_eq!(
            st.delivery_id,
            format!("{NOW}.{}", hex_lower(&Sha256::digest(BODY)))
        );
    }

    #[test]
    fn api_9_stripe_delivery_id_survives_reordering_and_dropping_signatures() {
        let s = ALL[3];
        let a = s.signature(&s.secret(), NOW, BODY);
        let b = s.signature(&s.other_secret(), NOW, BODY);
        let both = [s.secret(), s.other_secret()];
        let ids: Vec<String> = [
            vec![a.clone(), b.clone()],
            vec![b.clone(), a.clone()],
            vec![b],
        ]
        .iter()
        .map(|sigs| {
            verify(s.format, &both, &s.headers_with(NOW, sigs), BODY, NOW)
                .unwrap()
                .delivery_id
        })
        .collect();
        assert_eq!(ids[0], ids[1]);
        assert_eq!(ids[0], ids[2]);
    }

    #[test]
    fn api_9_known_vectors_from_the_format_owners() {
        // Standard Webhooks' published example.
        let h = headers(&[
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("webhook-timestamp", "1614265330"),
            (
                "webhook-signature",
                "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
            ),
        ]);
        let body = br#"{"test": 2432232314}"#;
        let secret = b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_vec();
        let v = verify(WebhookFormat::Standard, &[secret], &h, body, 1_614_265_330).unwrap();
        assert_eq!(v.delivery_id, "msg_p5jXN8AQM9LWM0D4loKWxJek");
        // GitHub's documented example.
        let h = headers(&[
            (
                "x-hub-signature-256",
                "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            ),
            ("x-github-delivery", "d1"),
        ]);
        let secret = b"It's a Secret to Everybody".to_vec();
        assert!(verify(WebhookFormat::Github, &[secret], &h, b"Hello, World!", 0).is_ok());
    }

    #[test]
    fn api_9_tampered_body_is_refused() {
        for s in ALL {
            let h = s.signed(NOW, BODY);
            let tampered = br#"{"name":"eve","count":3}"#;
            assert_eq!(
                s.check(&h, tampered),
                Err(WebhookRefusal::SignatureMismatch),
                "{:?}",
                s.format
            );
            assert_eq!(
                s.check(&h, &cat(&[BODY, b"\n"])),
                Err(WebhookRefusal::SignatureMismatch),
                "{:?}: trailing newline",
                s.format
            );
        }
    }

    #[test]
    fn api_9_reserialised_json_is_refused() {
        for s in ALL {
            let h = s.signed(NOW, BODY);
            let a: serde_json::Value = serde_json::from_slice(BODY).unwrap();
            let b: serde_json::Value = serde_json::from_slice(RESPACED).unwrap();
            assert_eq!(a, b, "positive control: the same JSON value");
            assert_eq!(
                s.check(&h, RESPACED),
                Err(WebhookRefusal::SignatureMismatch),
                "{:?}",
                s.format
            );
            let compact = serde_json::to_vec(&b).unwrap();
            assert_ne!(compact.as_slice(), BODY, "serde reorders keys");
            assert_eq!(
                s.check(&h, &compact),
                Err(WebhookRefusal::SignatureMismatch)
            );
        }
    }

    #[test]
    fn api_9_timestamp_tolerance_is_300_seconds_both_ways() {
        for s in ALL.into_iter().filter(|s| s.has_timestamp()) {
            for skew in [-299, 299, -300, 300, 0] {
                let ts = NOW + skew;
                assert!(
                    s.check(&s.signed(ts, BODY), BODY).is_ok(),
                    "{:?} skew {skew}",
                    s.format
                );
            }
            assert_eq!(
                s.check(&s.signed(NOW - 301, BODY), BODY),
                Err(WebhookRefusal::TimestampTooOld),
                "{:?}",
                s.format
            );
            assert_eq!(
                s.check(&s.signed(NOW + 301, BODY), BODY),
                Err(WebhookRefusal::TimestampTooNew),
                "{:?}",
                s.format
            );
            assert_eq!(
                s.check(&s.signed(0, BODY), BODY),
                Err(WebhookRefusal::TimestampTooOld)
            );
        }
    }

    #[test]
    fn api_9_github_has_no_timestamp_window() {
        let s = ALL[1];
        assert!(verify(s.format, &[s.secret()], &s.signed(0, BODY), BODY, i64::MAX).is_ok());
    }

    #[test]
    fn api_9_one_of_several_signatures_suffices() {
        for s in [ALL[0], ALL[3]] {
            let good = s.signature(&s.secret(), NOW, BODY);
            let other = s.signature(&s.other_secret(), NOW, BODY);
            for sigs in [
                vec![other.clone(), good.clone()],
                vec![good.clone(), other.clone()],
            ] {
                assert!(
                    s.check(&s.headers_with(NOW, &sigs), BODY).is_ok(),
                    "{:?}",
                    s.format
                );
            }
            assert_eq!(
                s.check(&s.headers_with(NOW, &[other.clone(), other]), BODY),
                Err(WebhookRefusal::SignatureMismatch)
            );
        }
    }

    #[test]
    fn api_9_any_of_several_secrets_suffices_for_rotation() {
        for s in ALL {
            let h = s.signed(NOW, BODY);
            for secrets in [
                vec![s.other_secret(), s.secret()],
                vec![s.secret(), s.other_secret()],
            ] {
                assert!(verify(s.format, &secrets, &h, BODY, NOW).is_ok());
            }
        }
    }

    #[test]
    fn api_9_wrong_secret_is_refused() {
        for s in ALL {
            let h = s.signed(NOW, BODY);
            assert_eq!(
                verify(s.format, &[s.other_secret()], &h, BODY, NOW),
                Err(WebhookRefusal::SignatureMismatch),
                "{:?}",
                s.format
            );
        }
    }

    #[test]
    fn api_9_no_usable_secret_is_refused() {
        for s in ALL {
            let h = s.signed(NOW, BODY);
            assert_eq!(
                verify(s.format, &[] as &[&[u8]], &h, BODY, NOW),
                Err(WebhookRefusal::NoUsableSecret)
            );
            assert_eq!(
                verify(s.format, &[Vec::new()], &h, BODY, NOW),
                Err(WebhookRefusal::NoUsableSecret)
            );
        }
        let s = ALL[0];
        assert_eq!(
            verify(
                s.format,
                &[b"whsec_!!!not base64!!!".to_vec()],
                &s.signed(NOW, BODY),
                BODY,
                NOW
            ),
            Err(WebhookRefusal::NoUsableSecret)
        );
    }

    #[test]
    fn api_9_each_missing_header_is_refused() {
        for s in ALL {
            for name in s.required_headers() {
                let mut h = s.signed(NOW, BODY);
                h.remove(*name);
                assert_eq!(
                    s.check(&h, BODY),
                    Err(WebhookRefusal::MissingHeader(name)),
                    "{:?} without {name}",
                    s.format
                );
                let mut h = s.signed(NOW, BODY);
                h.insert(
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_static(""),
                );
                assert_eq!(
                    s.check(&h, BODY),
                    Err(WebhookRefusal::MissingHeader(name)),
                    "{:?} with an empty {name}",
                    s.format
                );
            }
            assert_eq!(
                s.check(&HeaderMap::new(), BODY).map_err(|e| e.code()),
                Err("missing_header")
            );
        }
    }

    #[test]
    fn api_9_repeated_signature_header_is_refused() {
        let names = [
            "webhook-signature",
            "x-hub-signature-256",
            "x-slack-signature",
            "stripe-signature",
        ];
        for (s, name) in ALL.into_iter().zip(names) {
            let mut h = s.signed(NOW, BODY);
            let v = h.get(name).unwrap().clone();
            h.append(HeaderName::from_static(name), v);
            assert_eq!(
                s.check(&h, BODY),
                Err(WebhookRefusal::MalformedHeader(name)),
                "{:?}",
                s.format
            );
        }
    }

    /// Replaces one header's value and expects a malformed-header refusal
    /// naming it.
    fn garbage(s: Sender, name: &'static str, value: &[u8]) {
        let mut h = s.signed(NOW, BODY);
        h.insert(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value).unwrap(),
        );
        assert_eq!(
            s.check(&h, BODY),
            Err(WebhookRefusal::MalformedHeader(name)),
            "{:?}: {name} = {:?}",
            s.format,
            String::from_utf8_lossy(value)
        );
    }

    #[test]
    fn api_9_garbage_header_values_are_refused() {
        let [standard, github, slack, stripe] = ALL;
        let good_b64 = B64.encode(standard.signature(&standard.secret(), NOW, BODY));
        let good_hex = hex_lower(&github.signature(&github.secret(), NOW, BODY));
        let long_id = "x".repeat(MAX_DELIVERY_ID + 1);
        // Standard Webhooks.
        for ts in [
            "abc",
            "-5",
            "1.5",
            "+1800000000",
            "99999999999999999999",
            "18e8",
        ] {
            garbage(standard, "webhook-timestamp", ts.as_bytes());
        }
        garbage(standard, "webhook-signature", b"v1,***notbase64***");
        garbage(standard, "webhook-signature", good_b64.as_bytes());
        garbage(standard, "webhook-signature", b"v2,abcd");
        garbage(
            standard,
            "webhook-signature",
            format!("v1a,{good_b64}").as_bytes(),
        );
        garbage(standard, "webhook-id", long_id.as_bytes());
        garbage(standard, "webhook-id", b"msg\xff1");
        // GitHub.
        garbage(github, "x-hub-signature-256", good_hex.as_bytes());
        garbage(
            github,
            "x-hub-signature-256",
            format!("sha1={good_hex}").as_bytes(),
        );
        garbage(github, "x-hub-signature-256", b"sha256=zz");
        garbage(
            github,
            "x-hub-signature-256",
            format!("sha256={}", &good_hex[..62]).as_bytes(),
        );
        garbage(
            github,
            "x-hub-signature-256",
            format!("sha256={}g", &good_hex[..63]).as_bytes(),
        );
        garbage(github, "x-github-delivery", long_id.as_bytes());
        garbage(github, "x-github-delivery", b"with space");
        // Slack.
        garbage(slack, "x-slack-request-timestamp", b"yesterday");
        garbage(slack, "x-slack-request-timestamp", b"-1");
        garbage(
            slack,
            "x-slack-signature",
            format!("v1={good_hex}").as_bytes(),
        );
        garbage(slack, "x-slack-signature", b"v0=nothex");
        // Stripe.
        garbage(
            stripe,
            "stripe-signature",
            format!("v1={good_hex}").as_bytes(),
        );
        garbage(stripe, "stripe-signature", format!("t={NOW}").as_bytes());
        garbage(
            stripe,
            "stripe-signature",
            format!("t=now,v1={good_hex}").as_bytes(),
        );
        garbage(
            stripe,
            "stripe-signature",
            format!("t={NOW},t={NOW},v1={good_hex}").as_bytes(),
        );
        garbage(
            stripe,
            "stripe-signature",
            format!("t={NOW},v1=xyz").as_bytes(),
        );
        garbage(stripe, "stripe-signature", b"garbage");
        garbage(
            stripe,
            "stripe-signature",
            format!("t={NOW},v0={good_hex}").as_bytes(),
        );
    }

    #[test]
    fn api_9_uppercase_hex_verifies_and_slack_id_is_normalised() {
        let s = ALL[2];
        let sig = s.signature(&s.secret(), NOW, BODY);
        let h = headers(&[
            ("x-slack-request-timestamp", &NOW.to_string()),
            (
                "x-slack-signature",
                &format!("v0={}", hex_lower(&sig).to_uppercase()),
            ),
        ]);
        assert_eq!(s.check(&h, BODY).unwrap().delivery_id, hex_lower(&sig));
    }

    #[test]
    fn api_9_precheck_refuses_garbage_without_secrets() {
        for s in ALL {
            assert!(precheck(s.format, &s.signed(NOW, BODY), NOW).is_ok());
            assert!(precheck(s.format, &HeaderMap::new(), NOW).is_err());
        }
        assert_eq!(
            precheck(WebhookFormat::Slack, &ALL[2].signed(NOW - 1000, BODY), NOW),
            Err(WebhookRefusal::TimestampTooOld)
        );
    }

    #[test]
    fn api_9_refusal_codes_are_stable() {
        let all = [
            (WebhookRefusal::MissingHeader("x"), "missing_header"),
            (WebhookRefusal::MalformedHeader("x"), "malformed_header"),
            (WebhookRefusal::TimestampTooOld, "timestamp_too_old"),
            (WebhookRefusal::TimestampTooNew, "timestamp_too_new"),
            (WebhookRefusal::NoUsableSecret, "no_usable_secret"),
            (WebhookRefusal::SignatureMismatch, "signature_mismatch"),
        ];
        for (r, code) in all {
            assert_eq!(r.code(), code);
            assert!(!r.to_string().is_empty());
        }
    }
}
