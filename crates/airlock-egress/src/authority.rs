//! Strict authority parsing (NET-4).
//!
//! Turns the `host[:port]` of a CONNECT request, or the authority of a plain-HTTP absolute-form
//! URL, into an [`Authority`]. It rejects rather than normalises: anything two parsers might
//! read differently (userinfo, percent-encoding, backslashes, control characters, non-ASCII,
//! trailing dots, non-canonical ports, unbracketed IPv6) is an error, so the host the policy
//! checks is the host the proxy dials. Every spelling of an IPv4 literal that `inet_aton` (or a
//! WHATWG URL parser) accepts becomes [`Host::Ip`], never [`Host::Name`], so `0x7f.1` can never
//! match a name rule.
//!
//! No I/O, no DNS and no policy here: [`special_use`] flags names that must be denied before any
//! lookup, and addresses are classified by [`crate::classify`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest host name accepted (RFC 1035, without the trailing dot).
pub const MAX_NAME_LEN: usize = 253;
/// The longest label accepted (RFC 1035).
pub const MAX_LABEL_LEN: usize = 63;

/// A parsed host: a validated lowercase DNS name, or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Host {
    /// ASCII, lowercase, labels of 1..=63 `[a-z0-9-]` not starting or ending with `-`, at most
    /// 253 characters, no trailing dot, last label not numeric.
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    /// URI host syntax: IPv6 literals in brackets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(ip)) => f.write_str(Ipv4Text::new(*ip).as_str()),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// An IPv4 address in dotted decimal, the text of `Ipv4Addr`'s `Display`, written without the
/// formatting machinery: the proxy writes the address of every forwarded request several times
/// (the decision, its rule's label, the log lines), and `Display` cost more than a thousand
/// instructions each time (BENCHMARKS, "Where a plain request's instructions went").
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Text {
    buf: [u8; 15],
    len: usize,
}

impl Ipv4Text {
    pub fn new(ip: Ipv4Addr) -> Self {
        let mut buf = [0u8; 15];
        let mut len = 0;
        let mut push = |b: u8| {
            // At most 4 × 3 digits and 3 dots: 15 bytes.
            if let Some(slot) = buf.get_mut(len) {
                *slot = b;
                len += 1;
            }
        };
        for (i, octet) in ip.octets().into_iter().enumerate() {
            if i > 0 {
                push(b'.');
            }
            if octet >= 100 {
                push(b'0' + octet / 100);
            }
            if octet >= 10 {
                push(b'0' + octet / 10 % 10);
            }
            push(b'0' + octet % 10);
        }
        Self { buf, len }
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII digits and dots are ever written.
        std::str::from_utf8(self.buf.get(..self.len).unwrap_or_default()).unwrap_or_default()
    }
}

/// An address as `IpAddr`'s `Display` writes it (IPv6 without brackets).
pub fn ip_string(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => Ipv4Text::new(v4).as_str().to_string(),
        IpAddr::V6(v6) => v6.to_string(),
    }
}

/// A parsed `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Authority {
    pub host: Host,
    pub port: u16,
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.host, f)?;
        f.write_str(":")?;
        f.write_str(itoa::Buffer::new().format(self.port))
    }
}

/// Why an authority or URL was rejected. Each variant has a stable reason code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthorityError {
    #[error("empty authority")]
    Empty,
    #[error("non-ascii character")]
    NonAscii,
    #[error("control character")]
    ControlChar,
    #[error("whitespace")]
    Whitespace,
    #[error("userinfo is not allowed")]
    Userinfo,
    #[error("percent-encoding is not allowed in the authority")]
    PercentEncoded,
    #[error("backslash is not allowed")]
    Backslash,
    #[error("empty host")]
    EmptyHost,
    #[error("invalid host")]
    BadHost,
    #[error("empty label in host name")]
    EmptyLabel,
    #[error("label longer than 63 characters")]
    LabelTooLong,
    #[error("host name longer than 253 characters")]
    TooLong,
    #[error("trailing dot in host name")]
    TrailingDot,
    #[error("invalid ipv6 literal")]
    BadIpv6,
    #[error("ipv6 zone id is not allowed")]
    Ipv6ZoneId,
    #[error("ipv6 literal must be in brackets")]
    UnbracketedIpv6,
    #[error("missing port")]
    MissingPort,
    #[error("invalid port (decimal 1-65535, no sign, no leading zero)")]
    BadPort,
    #[error("only http:// urls are accepted")]
    BadScheme,
    #[error("fragment is not allowed")]
    Fragment,
    #[error("invalid path")]
    BadPath,
}

impl AuthorityError {
    /// A stable, machine-readable reason code.
    pub fn reason(&self) -> &'static str {
        match self {
            AuthorityError::Empty => "authority_empty",
            AuthorityError::NonAscii => "authority_non_ascii",
            AuthorityError::ControlChar => "authority_control_char",
            AuthorityError::Whitespace => "authority_whitespace",
            AuthorityError::Userinfo => "authority_userinfo",
            AuthorityError::PercentEncoded => "authority_percent_encoded",
            AuthorityError::Backslash => "authority_backslash",
            AuthorityError::EmptyHost => "authority_empty_host",
            AuthorityError::BadHost => "authority_bad_host",
            AuthorityError::EmptyLabel => "authority_empty_label",
            AuthorityError::LabelTooLong => "authority_label_too_long",
            AuthorityError::TooLong => "authority_too_long",
            AuthorityError::TrailingDot => "authority_trailing_dot",
            AuthorityError::BadIpv6 => "authority_bad_ipv6",
            AuthorityError::Ipv6ZoneId => "authority_ipv6_zone_id",
            AuthorityError::UnbracketedIpv6 => "authority_unbracketed_ipv6",
            AuthorityError::MissingPort => "authority_missing_port",
            AuthorityError::BadPort => "authority_bad_port",
            AuthorityError::BadScheme => "url_bad_scheme",
            AuthorityError::Fragment => "url_fragment",
            AuthorityError::BadPath => "url_bad_path",
        }
    }
}

/// Parses `host:port`, `[ipv6]:port`, or (only when `default_port` is given) a bare host.
pub fn parse_authority(s: &str, default_port: Option<u16>) -> Result<Authority, AuthorityError> {
    if s.is_empty() {
        return Err(AuthorityError::Empty);
    }
    scan_authority(s)?;
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or(AuthorityError::BadIpv6)?;
        let port = if after.is_empty() {
            None
        } else {
            Some(after.strip_prefix(':').ok_or(AuthorityError::BadIpv6)?)
        };
        let ip: Ipv6Addr = inside.parse().map_err(|_| AuthorityError::BadIpv6)?;
        (Host::Ip(IpAddr::V6(ip)), port)
    } else {
        // `::1:443` is both an address and, to a sloppy parser, a host and a port.
        if s.parse::<Ipv6Addr>().is_ok() {
            return Err(AuthorityError::UnbracketedIpv6);
        }
        // Split at the first colon: `host:443:443` leaves `443:443`, which is no port.
        let (host, port) = match s.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (s, None),
        };
        (parse_host(host)?, port)
    };
    let port = match port {
        Some(port) => parse_port(port)?,
        None => default_port.ok_or(AuthorityError::MissingPort)?,
    };
    Ok(Authority { host, port })
}

/// Parses a plain-HTTP absolute-form request target, `http://host[:port][/path][?query]`
/// (scheme case-insensitive, default port 80), into the authority and the origin-form target
/// to send upstream (always starting with `/`; an empty path becomes `/`).
pub fn parse_absolute_http_url(s: &str) -> Result<(Authority, String), AuthorityError> {
    let (scheme, rest) = s.split_once("://").ok_or(AuthorityError::BadScheme)?;
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(AuthorityError::BadScheme);
    }
    // RFC 3986: the authority ends at the first `/`, `?` or `#`. A backslash does not end it
    // (WHATWG would say it does): it stays inside and is rejected there.
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, target) = rest
        .split_at_checked(end)
        .ok_or(AuthorityError::BadScheme)?;
    let authority = parse_authority(authority, Some(80))?;
    scan_target(target)?;
    let target = match target.as_bytes() {
        [] => "/".to_string(),
        [b'?', ..] => format!("/{target}"),
        // `//host/...` as an origin-form target is read as a network-path reference by some
        // servers and frameworks: another way to name a second host.
        [b'/', b'/', ..] => return Err(AuthorityError::BadPath),
        [b'/', ..] => target.to_string(),
        _ => return Err(AuthorityError::BadPath),
    };
    Ok((authority, target))
}

/// Special-use suffixes: a name equal to one, or ending in `.` + one, is denied before any
/// lookup. Only the system resolver or a local network could answer for them.
pub const SPECIAL_USE_SUFFIXES: &[&str] = &[
    // RFC 6761 / RFC 6762 / RFC 7686 / RFC 9476 special-use domain names.
    "localhost",
    "local",
    "test",
    "invalid",
    "example",
    "onion",
    "alt",
    // Reverse zones, `home.arpa` (RFC 8375), `ipv4only.arpa`: nothing to fetch there.
    "arpa",
    // Reserved by ICANN for private use (2024): cloud metadata lives under it
    // (`metadata.google.internal`).
    "internal",
    // Never delegated and used only inside private networks: router and distribution defaults
    // (`lan`, `localdomain`) and the names ICANN declined to delegate for collision risk
    // (`home`, `corp`, `mail`, board resolution 2018.02.04.12).
    "lan",
    "localdomain",
    "home",
    "corp",
    "mail",
];

/// The reason a (validated, lowercase) name must be denied before any lookup, or `None`.
/// Returns `"special_use_name"` for [`SPECIAL_USE_SUFFIXES`] and `"single_label_name"` for a
/// name without a dot (a resolver might complete it from a search list).
pub fn special_use(name: &str) -> Option<&'static str> {
    // Validated names have no trailing dot; should one arrive anyway, match without it.
    let name = name.strip_suffix('.').unwrap_or(name);
    if SPECIAL_USE_SUFFIXES
        .iter()
        .any(|suffix| has_label_suffix(name, suffix))
    {
        return Some("special_use_name");
    }
    if !name.contains('.') {
        return Some("single_label_name");
    }
    None
}

/// Parses an IPv4 literal in any spelling `inet_aton` accepts: one to four dot-separated
/// parts, each decimal, octal (leading `0`) or hexadecimal (`0x`/`0X`); all parts but the
/// last are one byte, the last fills the remaining bytes (`127.1` is `127.0.0.1`). Returns
/// `None` on anything else, including a part that overflows.
pub fn parse_ipv4_any_spelling(s: &str) -> Option<Ipv4Addr> {
    let mut parts = [0u32; 4];
    let mut count = 0usize;
    for part in s.split('.') {
        *parts.get_mut(count)? = parse_ipv4_part(part)?;
        count += 1;
    }
    let (last, leading) = parts.get(..count)?.split_last()?;
    let mut addr: u32 = 0;
    for (i, &part) in leading.iter().enumerate() {
        let byte = u8::try_from(part).ok()?;
        addr |= u32::from(byte) << (24 - 8 * i);
    }
    // With `n` leading bytes, the last part has `32 - 8n` bits.
    let last_bits = 32 - 8 * leading.len();
    if u64::from(*last) >> last_bits != 0 {
        return None;
    }
    Some(Ipv4Addr::from_bits(addr | last))
}

fn parse_ipv4_part(part: &str) -> Option<u32> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 {
            match part.strip_prefix('0') {
                Some(octal) => (octal, 8),
                None => (part, 10),
            }
        } else {
            (part, 10)
        };
    // `""` and a bare `0x` are not numbers (glibc agrees; WHATWG would read `0x` as 0, and the
    // host is rejected either way).
    if digits.is_empty() {
        return None;
    }
    let mut value: u32 = 0;
    for b in digits.bytes() {
        let digit = char::from(b).to_digit(radix)?;
        value = value.checked_mul(radix)?.checked_add(digit)?;
    }
    Some(value)
}

/// Rejects the bytes no authority may contain; the first offender decides the error.
fn scan_authority(s: &str) -> Result<(), AuthorityError> {
    let mut in_brackets = false;
    for b in s.bytes() {
        match b {
            b'[' => in_brackets = true,
            b']' => in_brackets = false,
            b'%' if in_brackets => return Err(AuthorityError::Ipv6ZoneId),
            b'%' => return Err(AuthorityError::PercentEncoded),
            b'@' => return Err(AuthorityError::Userinfo),
            _ => scan_common(b)?,
        }
    }
    Ok(())
}

/// Rejects the bytes no request target may contain (percent-encoding is fine in a path).
fn scan_target(s: &str) -> Result<(), AuthorityError> {
    for b in s.bytes() {
        match b {
            b'#' => return Err(AuthorityError::Fragment),
            _ => scan_common(b)?,
        }
    }
    Ok(())
}

fn scan_common(b: u8) -> Result<(), AuthorityError> {
    match b {
        0x80..=0xff => Err(AuthorityError::NonAscii),
        b' ' => Err(AuthorityError::Whitespace),
        b'\\' => Err(AuthorityError::Backslash),
        _ if b.is_ascii_control() => Err(AuthorityError::ControlChar),
        _ => Ok(()),
    }
}

/// A host outside brackets: an IPv4 literal in any spelling, or a strict DNS name.
fn parse_host(host: &str) -> Result<Host, AuthorityError> {
    if host.is_empty() {
        return Err(AuthorityError::EmptyHost);
    }
    if host.ends_with('.') {
        return Err(AuthorityError::TrailingDot);
    }
    if host.len() > MAX_NAME_LEN {
        return Err(AuthorityError::TooLong);
    }
    if host.split('.').any(str::is_empty) {
        return Err(AuthorityError::EmptyLabel);
    }
    // As in the WHATWG URL standard: a host whose last label is a number is an IPv4 literal
    // or nothing. No valid name ends in a numeric label, so this cannot reject a real name.
    let last = host.rsplit('.').next().unwrap_or(host);
    if is_numeric_label(last) {
        return parse_ipv4_any_spelling(host)
            .map(|ip| Host::Ip(IpAddr::V4(ip)))
            .ok_or(AuthorityError::BadHost);
    }
    for label in host.split('.') {
        if label.len() > MAX_LABEL_LEN {
            return Err(AuthorityError::LabelTooLong);
        }
        let ldh = label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ldh || label.starts_with('-') || label.ends_with('-') {
            return Err(AuthorityError::BadHost);
        }
    }
    Ok(Host::Name(host.to_ascii_lowercase()))
}

/// All decimal digits, or `0x`/`0X` followed by hex digits (possibly none).
fn is_numeric_label(label: &str) -> bool {
    if let Some(hex) = label
        .strip_prefix("0x")
        .or_else(|| label.strip_prefix("0X"))
    {
        return hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    !label.is_empty() && label.bytes().all(|b| b.is_ascii_digit())
}

/// A canonical port: 1..=65535 in decimal digits, no sign, no leading zero.
fn parse_port(port: &str) -> Result<u16, AuthorityError> {
    let canonical = !port.is_empty()
        && port.len() <= 5
        && !port.starts_with('0')
        && port.bytes().all(|b| b.is_ascii_digit());
    if !canonical {
        return Err(AuthorityError::BadPort);
    }
    port.parse().map_err(|_| AuthorityError::BadPort)
}

/// Whether `name` is `suffix` or ends in `.suffix` (ASCII case-insensitive, byte-wise so that
/// no input can split a character).
fn has_label_suffix(name: &str, suffix: &str) -> bool {
    let (name, suffix) = (name.as_bytes(), suffix.as_bytes());
    let Some(start) = name.len().checked_sub(suffix.len()) else {
        return false;
    };
    let tail_matches = name
        .get(start..)
        .is_some_and(|tail| tail.eq_ignore_ascii_case(suffix));
    tail_matches && (start == 0 || name.get(start - 1) == Some(&b'.'))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    /// The expected outcome of one row.
    #[derive(Debug, Clone, Copy)]
    enum Want {
        /// Rejected with this reason code.
        Err(&'static str),
        /// An IP literal (as `std` spells it) and port.
        Ip(&'static str, u16),
        /// An ordinary name and port; `special_use` says nothing.
        Name(&'static str, u16),
        /// A name that parses but `special_use` denies with this reason.
        Special(&'static str, &'static str),
    }

    use Want::{Err as E, Ip, Name, Special};

    #[test]
    fn ipv4_text_is_display() {
        // Every octet value in every position: 1-, 2- and 3-digit octets and their borders.
        for v in 0..=255u8 {
            for ip in [
                Ipv4Addr::new(v, 0, 0, 0),
                Ipv4Addr::new(1, v, 10, 100),
                Ipv4Addr::new(255, 99, v, 9),
                Ipv4Addr::new(0, 255, 100, v),
            ] {
                assert_eq!(Ipv4Text::new(ip).as_str(), ip.to_string());
                assert_eq!(ip_string(IpAddr::V4(ip)), ip.to_string());
            }
        }
        let v6: Ipv6Addr = "2001:db8::1".parse().unwrap_or(Ipv6Addr::LOCALHOST);
        assert_eq!(ip_string(IpAddr::V6(v6)), "2001:db8::1");
        for (host, port, text) in [
            (
                Host::Ip(
                    "10.0.0.1"
                        .parse()
                        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
                ),
                80,
                "10.0.0.1:80",
            ),
            (Host::Ip(IpAddr::V6(v6)), 443, "[2001:db8::1]:443"),
            (Host::Name("a.example".into()), 65535, "a.example:65535"),
        ] {
            assert_eq!(Authority { host, port }.to_string(), text);
        }
    }

    const D: Option<u16> = Some(443);
    const N: Option<u16> = None;
    const SPECIAL: &str = "special_use_name";
    const SINGLE: &str = "single_label_name";

    /// Hostile authorities, category by category, then positive controls.
    fn authority_rows() -> Vec<(String, Option<u16>, Want)> {
        let rows: Vec<(&str, Option<u16>, Want)> = vec![
            // Userinfo: the host a parser sees depends on which `@` it honours.
            ("user@host:443", N, E("authority_userinfo")),
            ("a:b@evil.com:443", N, E("authority_userinfo")),
            ("evil.com@good.com", D, E("authority_userinfo")),
            ("@evil.com:443", N, E("authority_userinfo")),
            ("good.com:443@evil.com:443", N, E("authority_userinfo")),
            ("[::1]@evil.com", D, E("authority_userinfo")),
            ("good.com@", D, E("authority_userinfo")),
            // Percent-encoding, and zone ids (which arrive as `%25`).
            ("%6cocalhost", D, E("authority_percent_encoded")),
            ("127.0.0.1%2f", D, E("authority_percent_encoded")),
            (
                "evil.com%2f.good.com:443",
                N,
                E("authority_percent_encoded"),
            ),
            ("example.com:%34%34%33", N, E("authority_percent_encoded")),
            ("%31%32%37.0.0.1", D, E("authority_percent_encoded")),
            (
                "user%40good.com@evil.com",
                D,
                E("authority_percent_encoded"),
            ),
            ("[fe80::1%25eth0]:443", N, E("authority_ipv6_zone_id")),
            ("[fe80::1%eth0]:443", N, E("authority_ipv6_zone_id")),
            ("[fe80::1%251]", D, E("authority_ipv6_zone_id")),
            // Backslash: WHATWG reads it as `/`, others as a host character.
            ("evil.com\\@good.com", D, E("authority_backslash")),
            ("evil.com\\good.com:443", N, E("authority_backslash")),
            ("\\\\evil.com", D, E("authority_backslash")),
            ("[::1\\]:443", N, E("authority_backslash")),
            // Control characters and spaces (request smuggling, truncation at NUL).
            ("example.com\0.evil.com", D, E("authority_control_char")),
            ("evil.com\r\nHost: good.com", D, E("authority_control_char")),
            ("example.com\t:443", N, E("authority_control_char")),
            ("example.com\x7f", D, E("authority_control_char")),
            ("example.com\n", D, E("authority_control_char")),
            ("exa\x1bmple.com", D, E("authority_control_char")),
            (" example.com:443", N, E("authority_whitespace")),
            ("example.com :443", N, E("authority_whitespace")),
            ("example.com:44 3", N, E("authority_whitespace")),
            ("exa mple.com", D, E("authority_whitespace")),
            // Non-ASCII: IDN homographs, full-width and ideographic dots, invisible characters.
            ("ехаmple.com", D, E("authority_non_ascii")),
            ("ex\u{0430}mple.com:443", N, E("authority_non_ascii")),
            ("example\u{3002}com", D, E("authority_non_ascii")),
            ("example\u{ff0e}com", D, E("authority_non_ascii")),
            ("\u{ff45}xample.com", D, E("authority_non_ascii")),
            ("example.com\u{200b}", D, E("authority_non_ascii")),
            ("bücher.de", D, E("authority_non_ascii")),
            (
                "example.com:\u{ff14}\u{ff14}\u{ff13}",
                N,
                E("authority_non_ascii"),
            ),
            (
                "127\u{3002}0\u{3002}0\u{3002}1",
                D,
                E("authority_non_ascii"),
            ),
            ("\u{a0}example.com", D, E("authority_non_ascii")),
            ("localhost\u{2024}example.com", D, E("authority_non_ascii")),
            // Punycode is ASCII and passes as-is (no IDN decoding): rules match it exactly.
            ("xn--80ak6aa92e.com:443", N, Name("xn--80ak6aa92e.com", 443)),
            // 127.0.0.1 in every inet_aton spelling.
            ("127.0.0.1", D, Ip("127.0.0.1", 443)),
            ("127.0.0.1:80", N, Ip("127.0.0.1", 80)),
            ("2130706433", D, Ip("127.0.0.1", 443)),
            ("0177.0.0.1", D, Ip("127.0.0.1", 443)),
            ("0x7f.1", D, Ip("127.0.0.1", 443)),
            ("127.1", D, Ip("127.0.0.1", 443)),
            ("127.0.1", D, Ip("127.0.0.1", 443)),
            ("0x7f000001", D, Ip("127.0.0.1", 443)),
            ("0X7F000001", D, Ip("127.0.0.1", 443)),
            ("017700000001", D, Ip("127.0.0.1", 443)),
            ("0x7F.0.0.1", D, Ip("127.0.0.1", 443)),
            ("0X7f.0X0.0x0.0x1", D, Ip("127.0.0.1", 443)),
            ("0177.1:8080", N, Ip("127.0.0.1", 8080)),
            ("0x0000007f.1", D, Ip("127.0.0.1", 443)),
            ("00000177.0.0.1", D, Ip("127.0.0.1", 443)),
            ("127.000.000.001", D, Ip("127.0.0.1", 443)),
            ("127.0x0.0.01", D, Ip("127.0.0.1", 443)),
            // 10.0.0.1.
            ("167772161", D, Ip("10.0.0.1", 443)),
            ("012.0.0.1", D, Ip("10.0.0.1", 443)),
            ("0xa.0.0.1", D, Ip("10.0.0.1", 443)),
            ("10.1", D, Ip("10.0.0.1", 443)),
            ("0xa000001", D, Ip("10.0.0.1", 443)),
            ("01200000001", D, Ip("10.0.0.1", 443)),
            ("012.1:22", N, Ip("10.0.0.1", 22)),
            // 169.254.169.254.
            ("169.254.169.254:80", N, Ip("169.254.169.254", 80)),
            ("2852039166", D, Ip("169.254.169.254", 443)),
            ("0xa9fea9fe", D, Ip("169.254.169.254", 443)),
            ("0251.0376.0251.0376", D, Ip("169.254.169.254", 443)),
            ("169.254.43518", D, Ip("169.254.169.254", 443)),
            ("169.16689662", D, Ip("169.254.169.254", 443)),
            ("0xa9.0xfe.0xa9.0xfe", D, Ip("169.254.169.254", 443)),
            ("025177524776", D, Ip("169.254.169.254", 443)),
            // 0.0.0.0 (Linux connects it to the local host).
            ("0", D, Ip("0.0.0.0", 443)),
            ("0.0.0.0", D, Ip("0.0.0.0", 443)),
            ("0x0", D, Ip("0.0.0.0", 443)),
            ("00", D, Ip("0.0.0.0", 443)),
            ("0.0", D, Ip("0.0.0.0", 443)),
            // Numeric-looking hosts that are no IPv4 address: never a name either.
            ("4294967296", D, E("authority_bad_host")),
            ("99999999999999999999999", D, E("authority_bad_host")),
            ("256.0.0.1", D, E("authority_bad_host")),
            ("127.0.0.256", D, E("authority_bad_host")),
            ("127.0.65536", D, E("authority_bad_host")),
            ("1.2.3.4.5", D, E("authority_bad_host")),
            ("08.0.0.1", D, E("authority_bad_host")),
            ("0x.0.0.1", D, E("authority_bad_host")),
            ("1.2.3.0x", D, E("authority_bad_host")),
            ("0xg.0.0.1", D, E("authority_bad_host")),
            ("+127.0.0.1", D, E("authority_bad_host")),
            ("example.123", D, E("authority_bad_host")),
            ("foo.0x10", D, E("authority_bad_host")),
            ("1.2.3.-1", D, E("authority_bad_host")),
            ("127.0.0.1.", D, E("authority_trailing_dot")),
            ("127..1", D, E("authority_empty_label")),
            // IPv6 literals: parsed, never normalised into IPv4 here (classification does that).
            ("[::1]", D, Ip("::1", 443)),
            ("[::1]:8443", N, Ip("::1", 8443)),
            ("[::ffff:127.0.0.1]:443", N, Ip("::ffff:7f00:1", 443)),
            ("[::ffff:7f00:1]:443", N, Ip("::ffff:127.0.0.1", 443)),
            ("[::FFFF:127.0.0.1]", D, Ip("::ffff:127.0.0.1", 443)),
            ("[0:0:0:0:0:0:0:1]:443", N, Ip("::1", 443)),
            (
                "[0000:0000:0000:0000:0000:0000:0000:0001]",
                D,
                Ip("::1", 443),
            ),
            ("[::127.0.0.1]", D, Ip("::7f00:1", 443)),
            ("[::ffff:0:127.0.0.1]", D, Ip("::ffff:0:7f00:1", 443)),
            ("[64:ff9b::7f00:1]:443", N, Ip("64:ff9b::127.0.0.1", 443)),
            (
                "[64:ff9b::169.254.169.254]",
                D,
                Ip("64:ff9b::a9fe:a9fe", 443),
            ),
            ("[2002:7f00:1::]:443", N, Ip("2002:7f00:1::", 443)),
            (
                "[2001:0:4136:e378:8000:63bf:80ff:fffe]:443",
                N,
                Ip("2001:0:4136:e378:8000:63bf:80ff:fffe", 443),
            ),
            ("[fd00:ec2::254]:80", N, Ip("fd00:ec2::254", 80)),
            ("[::]", D, Ip("::", 443)),
            ("::1", D, E("authority_unbracketed_ipv6")),
            ("::1:443", N, E("authority_unbracketed_ipv6")),
            ("2001:db8::1:443", N, E("authority_unbracketed_ipv6")),
            ("::ffff:127.0.0.1", D, E("authority_unbracketed_ipv6")),
            ("[::1", D, E("authority_bad_ipv6")),
            ("[::1]443", N, E("authority_bad_ipv6")),
            ("[127.0.0.1]:443", N, E("authority_bad_ipv6")),
            ("[]:443", N, E("authority_bad_ipv6")),
            ("[::1]]:443", N, E("authority_bad_ipv6")),
            ("[[::1]]:443", N, E("authority_bad_ipv6")),
            ("[::g]:443", N, E("authority_bad_ipv6")),
            ("[v1.fe80::1]:443", N, E("authority_bad_ipv6")),
            ("[example.com]:443", N, E("authority_bad_ipv6")),
            ("[::1]:", D, E("authority_bad_port")),
            ("[::1]:0443", N, E("authority_bad_port")),
            ("example.com]", D, E("authority_bad_host")),
            // Ports: canonical decimal 1..=65535 only.
            ("example.com:", D, E("authority_bad_port")),
            ("example.com:0", N, E("authority_bad_port")),
            ("example.com:00", N, E("authority_bad_port")),
            ("example.com:65536", N, E("authority_bad_port")),
            ("example.com:0443", N, E("authority_bad_port")),
            ("example.com:+443", N, E("authority_bad_port")),
            ("example.com:-1", N, E("authority_bad_port")),
            ("example.com:443:443", N, E("authority_bad_port")),
            (
                "example.com:99999999999999999999",
                N,
                E("authority_bad_port"),
            ),
            ("example.com:0x1bb", N, E("authority_bad_port")),
            ("example.com:443a", N, E("authority_bad_port")),
            ("example.com", N, E("authority_missing_port")),
            ("[::1]", N, E("authority_missing_port")),
            ("example.com:65535", N, Name("example.com", 65535)),
            ("example.com:1", N, Name("example.com", 1)),
            // Trailing dots, empty labels, lengths, characters.
            ("localhost.", D, E("authority_trailing_dot")),
            ("example.com.", D, E("authority_trailing_dot")),
            ("example.com.:443", N, E("authority_trailing_dot")),
            (".", D, E("authority_trailing_dot")),
            ("a..b", D, E("authority_empty_label")),
            (".example.com", D, E("authority_empty_label")),
            ("-example.com", D, E("authority_bad_host")),
            ("example-.com", D, E("authority_bad_host")),
            ("exa_mple.com", D, E("authority_bad_host")),
            ("example.com/", D, E("authority_bad_host")),
            ("example.com?x", D, E("authority_bad_host")),
            ("example.com#x", D, E("authority_bad_host")),
            ("*.example.com", D, E("authority_bad_host")),
            ("ex\"ample.com", D, E("authority_bad_host")),
            ("example.com;evil.com", D, E("authority_bad_host")),
            (":443", N, E("authority_empty_host")),
            ("", D, E("authority_empty")),
            ("EXAMPLE.COM:443", N, Name("example.com", 443)),
            // Special-use names: parse, then `special_use` denies them before any lookup.
            ("localhost", D, Special("localhost", SPECIAL)),
            ("LocalHost:443", N, Special("localhost", SPECIAL)),
            ("foo.localhost", D, Special("foo.localhost", SPECIAL)),
            ("printer.local", D, Special("printer.local", SPECIAL)),
            (
                "metadata.google.internal:80",
                N,
                Special("metadata.google.internal", SPECIAL),
            ),
            ("router.home.arpa", D, Special("router.home.arpa", SPECIAL)),
            (
                "1.0.0.127.in-addr.arpa",
                D,
                Special("1.0.0.127.in-addr.arpa", SPECIAL),
            ),
            ("ipv4only.arpa", D, Special("ipv4only.arpa", SPECIAL)),
            (
                "duckduckgogg42xjoc72x3sjasowoarfbgcmvfimaftt6twagswzczad.onion",
                D,
                Special(
                    "duckduckgogg42xjoc72x3sjasowoarfbgcmvfimaftt6twagswzczad.onion",
                    SPECIAL,
                ),
            ),
            ("www.test", D, Special("www.test", SPECIAL)),
            ("a.invalid", D, Special("a.invalid", SPECIAL)),
            ("www.example", D, Special("www.example", SPECIAL)),
            ("nas.lan", D, Special("nas.lan", SPECIAL)),
            ("host.localdomain", D, Special("host.localdomain", SPECIAL)),
            ("dc01.corp", D, Special("dc01.corp", SPECIAL)),
            ("nas.home", D, Special("nas.home", SPECIAL)),
            ("x.alt", D, Special("x.alt", SPECIAL)),
            ("intranet", D, Special("intranet", SINGLE)),
            ("metadata", D, Special("metadata", SINGLE)),
            ("com", D, Special("com", SINGLE)),
            // Not special: the suffix must be a whole label, and names that merely look local
            // are resolved and then classified (NET-5).
            (
                "localhost.example.com",
                D,
                Name("localhost.example.com", 443),
            ),
            ("mylocal.com", D, Name("mylocal.com", 443)),
            ("internal.example.org", D, Name("internal.example.org", 443)),
            ("127.0.0.1.nip.io", D, Name("127.0.0.1.nip.io", 443)),
            (
                "0x7f.0.0.1.example.com",
                D,
                Name("0x7f.0.0.1.example.com", 443),
            ),
            // Positive controls: the checks can also say yes.
            ("api.openai.com:443", N, Name("api.openai.com", 443)),
            ("example.com", D, Name("example.com", 443)),
            ("[2606:4700::1111]:443", N, Ip("2606:4700::1111", 443)),
            (
                "sub-domain.example.co.uk:8443",
                N,
                Name("sub-domain.example.co.uk", 8443),
            ),
            ("xn--bcher-kva.de:443", N, Name("xn--bcher-kva.de", 443)),
            ("8.8.8.8:53", N, Ip("8.8.8.8", 53)),
            ("a.b", D, Name("a.b", 443)),
            ("1password.com", D, Name("1password.com", 443)),
            ("123.example.com", D, Name("123.example.com", 443)),
        ];
        let mut rows: Vec<(String, Option<u16>, Want)> = rows
            .into_iter()
            .map(|(s, port, want)| (s.to_string(), port, want))
            .collect();
        // Length limits, at and just past each boundary.
        let label63 = "a".repeat(63);
        let label64 = "a".repeat(64);
        // 4 labels of 61 + 3 dots = 247; plus ".abcde" = 253.
        let name253 = format!("{0}.{0}.{0}.{0}.abcde", "b".repeat(61));
        let name254 = format!("{0}.{0}.{0}.{0}.abcdef", "b".repeat(61));
        assert_eq!((name253.len(), name254.len()), (253, 254));
        rows.push((
            format!("{label63}.com"),
            D,
            Want::Name(leak(format!("{label63}.com")), 443),
        ));
        rows.push((format!("{label64}.com"), D, E("authority_label_too_long")));
        rows.push((name253.clone(), D, Want::Name(leak(name253), 443)));
        rows.push((name254, D, E("authority_too_long")));
        rows.push(("a.".repeat(200) + "com", D, E("authority_too_long")));
        rows
    }

    fn leak(s: String) -> &'static str {
        Box::leak(s.into_boxed_str())
    }

    fn check(input: &str, got: Result<Authority, AuthorityError>, want: Want) {
        match (got, want) {
            (Err(err), E(reason)) => assert_eq!(err.reason(), reason, "{input:?}"),
            (Ok(auth), Ip(ip, port)) => {
                let ip: IpAddr = ip.parse().unwrap();
                assert_eq!(
                    auth,
                    Authority {
                        host: Host::Ip(ip),
                        port
                    },
                    "{input:?}"
                );
            }
            (Ok(auth), Name(name, port)) => {
                let want = Authority {
                    host: Host::Name(name.to_string()),
                    port,
                };
                assert_eq!(auth, want, "{input:?}");
                assert_eq!(special_use(name), None, "{input:?}");
            }
            (Ok(auth), Special(name, reason)) => {
                assert_eq!(auth.host, Host::Name(name.to_string()), "{input:?}");
                assert_eq!(special_use(name), Some(reason), "{input:?}");
            }
            (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn net_4_hostile_authority_table() {
        let rows = authority_rows();
        assert!(rows.len() >= 150, "{}", rows.len());
        for (input, default_port, want) in rows {
            check(&input, parse_authority(&input, default_port), want);
        }
    }

    /// Plain-HTTP absolute-form targets: (url, outcome, origin-form target when accepted).
    #[test]
    fn net_4_absolute_http_url_table() {
        let rows: &[(&str, Want, &str)] = &[
            (
                "http://example.com/path?q=1",
                Name("example.com", 80),
                "/path?q=1",
            ),
            ("HTTP://Example.COM", Name("example.com", 80), "/"),
            ("http://example.com?x=1", Name("example.com", 80), "/?x=1"),
            (
                "http://example.com:8080/a%20b",
                Name("example.com", 8080),
                "/a%20b",
            ),
            (
                "http://example.com/users/@me",
                Name("example.com", 80),
                "/users/@me",
            ),
            ("http://[::1]:8080/", Ip("::1", 8080), "/"),
            ("http://2130706433/", Ip("127.0.0.1", 80), "/"),
            ("http://0x7f.1:8080/x", Ip("127.0.0.1", 8080), "/x"),
            (
                "http://[::ffff:169.254.169.254]/latest/meta-data/",
                Ip("::ffff:a9fe:a9fe", 80),
                "/latest/meta-data/",
            ),
            ("http://localhost/", Special("localhost", SPECIAL), "/"),
            (
                "http://metadata.google.internal/computeMetadata/v1/",
                Special("metadata.google.internal", SPECIAL),
                "/computeMetadata/v1/",
            ),
            ("https://example.com/", E("url_bad_scheme"), ""),
            ("ftp://example.com/", E("url_bad_scheme"), ""),
            ("example.com/path", E("url_bad_scheme"), ""),
            ("http:/example.com/", E("url_bad_scheme"), ""),
            ("http:example.com", E("url_bad_scheme"), ""),
            ("//example.com/", E("url_bad_scheme"), ""),
            (" http://example.com/", E("url_bad_scheme"), ""),
            ("http+unix://x/", E("url_bad_scheme"), ""),
            ("http://user:pass@example.com/", E("authority_userinfo"), ""),
            ("http://example.com@evil.com/", E("authority_userinfo"), ""),
            ("http://evil.com\\@good.com/", E("authority_backslash"), ""),
            ("http://evil.com#@good.com/", E("url_fragment"), ""),
            ("http://example.com/#frag", E("url_fragment"), ""),
            (
                "http://example.com/path with space",
                E("authority_whitespace"),
                "",
            ),
            (
                "http://example.com/\r\nX-Injected: 1",
                E("authority_control_char"),
                "",
            ),
            ("http://example.com/\u{fc}", E("authority_non_ascii"), ""),
            ("http://example.com/a\\b", E("authority_backslash"), ""),
            ("http:///path", E("authority_empty"), ""),
            ("http://:80/", E("authority_empty_host"), ""),
            ("http://example.com:/", E("authority_bad_port"), ""),
            ("http://example.com:80:80/", E("authority_bad_port"), ""),
            ("http://example.com.:80/", E("authority_trailing_dot"), ""),
            ("http://%6cocalhost/", E("authority_percent_encoded"), ""),
            ("http://[fe80::1%25eth0]/", E("authority_ipv6_zone_id"), ""),
            ("http://example.com//evil.com/", E("url_bad_path"), ""),
            ("http://256.256.256.256/", E("authority_bad_host"), ""),
        ];
        for &(url, want, target) in rows {
            match parse_absolute_http_url(url) {
                Ok((auth, got_target)) => {
                    assert_eq!(got_target, target, "{url:?}");
                    check(url, Ok(auth), want);
                }
                Err(err) => check(url, Err(err), want),
            }
        }
    }

    #[test]
    fn net_4_reason_codes_are_distinct_snake_case() {
        use AuthorityError::*;
        let all = [
            Empty,
            NonAscii,
            ControlChar,
            Whitespace,
            Userinfo,
            PercentEncoded,
            Backslash,
            EmptyHost,
            BadHost,
            EmptyLabel,
            LabelTooLong,
            TooLong,
            TrailingDot,
            BadIpv6,
            Ipv6ZoneId,
            UnbracketedIpv6,
            MissingPort,
            BadPort,
            BadScheme,
            Fragment,
            BadPath,
        ];
        let mut seen = HashSet::new();
        for err in all {
            let reason = err.reason();
            assert!(seen.insert(reason), "duplicate {reason}");
            assert!(
                reason
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{reason}"
            );
            let msg = err.to_string();
            assert!(!msg.ends_with('.') && msg == msg.to_lowercase(), "{msg}");
        }
    }

    #[test]
    fn net_4_display_and_json_forms() {
        let v6 = parse_authority("[2606:4700::1111]:443", None).unwrap();
        assert_eq!(v6.to_string(), "[2606:4700::1111]:443");
        let v4 = parse_authority("0x7f.1", Some(80)).unwrap();
        assert_eq!(v4.to_string(), "127.0.0.1:80");
        let name = parse_authority("Example.com", Some(443)).unwrap();
        assert_eq!(
            serde_json::to_value(&name).unwrap(),
            serde_json::json!({"host": {"kind": "name", "value": "example.com"}, "port": 443})
        );
        assert_eq!(
            serde_json::to_value(&v4).unwrap(),
            serde_json::json!({"host": {"kind": "ip", "value": "127.0.0.1"}, "port": 80})
        );
    }

    #[test]
    fn net_4_special_use_matches_whole_labels_case_insensitively() {
        assert_eq!(special_use("Printer.LOCAL"), Some(SPECIAL));
        assert_eq!(special_use("localhost."), Some(SPECIAL));
        assert_eq!(special_use("notlocal.com"), None);
        assert_eq!(special_use("local.com"), None);
        assert_eq!(special_use(""), Some(SINGLE));
        assert_eq!(special_use("ünïcode"), Some(SINGLE));
    }

    /// An IPv4 address spelled as one, two, three or four parts, each in a given radix.
    fn spell(bits: u32, parts: usize, radixes: [u8; 4]) -> String {
        let bytes = bits.to_be_bytes();
        let mut values: Vec<u32> = bytes[..parts - 1].iter().map(|&b| u32::from(b)).collect();
        let rest = bytes[parts - 1..]
            .iter()
            .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
        values.push(rest);
        values
            .iter()
            .zip(radixes)
            .map(|(&v, radix)| match radix % 3 {
                0 => format!("{v}"),
                1 => format!("0{v:o}"),
                _ => format!("0x{v:x}"),
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn net_4_prop_every_ipv4_spelling_is_an_ip_never_a_name(
            bits in any::<u32>(),
            parts in 1usize..=4,
            radixes in any::<[u8; 4]>(),
        ) {
            let spelled = spell(bits, parts, radixes);
            let want = Ipv4Addr::from_bits(bits);
            prop_assert_eq!(parse_ipv4_any_spelling(&spelled), Some(want), "{}", spelled);
            let got = parse_authority(&spelled, Some(443));
            prop_assert_eq!(got, Ok(Authority { host: Host::Ip(IpAddr::V4(want)), port: 443 }));
        }

        #[test]
        fn net_4_prop_dotted_quads_agree_with_std(s in "[0-9]{1,4}(\\.[0-9]{1,4}){3}") {
            if let Ok(ip) = s.parse::<Ipv4Addr>() {
                prop_assert_eq!(parse_ipv4_any_spelling(&s), Some(ip));
            }
        }

        #[test]
        fn net_4_prop_never_panics(s in any::<String>()) {
            let _ = parse_authority(&s, Some(443));
            let _ = parse_authority(&s, None);
            let _ = parse_absolute_http_url(&s);
            let _ = parse_ipv4_any_spelling(&s);
            let _ = special_use(&s);
        }

        /// What is accepted is canonical: printing it and parsing again gives the same value,
        /// and no name looks like an address.
        #[test]
        fn net_4_prop_accepted_authorities_are_canonical(
            s in "(\\[[0-9a-fA-F:.]{0,20}\\]|[a-zA-Z0-9.x-]{0,30})(:[0-9+-]{0,6})?",
        ) {
            if let Ok(auth) = parse_authority(&s, Some(443)) {
                prop_assert_eq!(parse_authority(&auth.to_string(), None), Ok(auth.clone()));
                if let Host::Name(name) = &auth.host {
                    prop_assert!(parse_ipv4_any_spelling(name).is_none(), "{}", name);
                    prop_assert!(!name.bytes().any(|b| b.is_ascii_uppercase()), "{}", name);
                    let last = name.rsplit('.').next().unwrap();
                    prop_assert!(!is_numeric_label(last), "{}", name);
                }
            }
        }
    }
}
