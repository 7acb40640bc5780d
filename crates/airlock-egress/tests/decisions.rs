//! The decision pipeline against hostile input (NET-2 … NET-5), with a
//! scripted resolver. Table-driven; each row names what it attacks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use airlock_egress::Egress;
use airlock_egress::decide::{self, Mode};
use airlock_egress::policy::{EnvAndFiles, Policy};
use airlock_egress::proxy::NullLog;
use airlock_egress::resolve::{ResolveError, ScriptedResolver};

const POLICY: &str = r#"
[[allow]]
host = "api.example.org"

[[allow]]
host = "*.cdn.example.net"
ports = [443, 8443]

[[allow]]
host = "plain.example.org"
ports = [80]
http = true

[[allow]]
host = "rebind.example.org"

[[allow]]
host = "mixed.example.org"

[[allow]]
host = "private.example.org"

[[allow]]
host = "mapped.example.org"

[[allow]]
host = "nat64.example.org"

[[allow]]
host = "nxdomain.example.org"

[[allow]]
host = "slow.example.org"

[[allow]]
host = "meta.example.org"

[[allow]]
host = "lab.example.org"
ports = [8080]

[[allow]]
cidr = "127.0.0.0/8"
ports = [8080]

[[allow]]
cidr = "192.0.2.10/32"
ports = [443]

[hosts]
"lab.example.org" = ["127.0.0.1"]
"airgap.example.org" = ["10.1.2.3"]
"#;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn resolver() -> ScriptedResolver {
    ScriptedResolver::new()
        .answer("api.example.org", Ok(vec![ip("93.184.215.14")]))
        .answer(
            "a.cdn.example.net",
            Ok(vec![ip("151.101.1.1"), ip("2a04:4e42::1")]),
        )
        .answer("plain.example.org", Ok(vec![ip("93.184.215.15")]))
        .answer("rebind.example.org", Ok(vec![ip("93.184.215.16")]))
        .answer("rebind.example.org", Ok(vec![ip("127.0.0.1")]))
        .answer(
            "mixed.example.org",
            Ok(vec![ip("93.184.215.17"), ip("10.0.0.5")]),
        )
        .answer("private.example.org", Ok(vec![ip("192.168.1.10")]))
        .answer("mapped.example.org", Ok(vec![ip("::ffff:127.0.0.1")]))
        .answer("nat64.example.org", Ok(vec![ip("64:ff9b::a9fe:a9fe")]))
        .answer("nxdomain.example.org", Err(ResolveError::NxDomain))
        .answer("slow.example.org", Err(ResolveError::Timeout))
        .answer("meta.example.org", Ok(vec![ip("169.254.169.254")]))
}

fn policy() -> Policy {
    Policy::from_toml(POLICY, &EnvAndFiles).unwrap()
}

fn run(raw: &str, mode: Mode) -> decide::Decision {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let p = policy();
    let r = resolver();
    rt.block_on(decide::decide_raw(Some(&p), &r, raw, mode))
}

/// (target, mode, expected reason). `allowed` rows are positive controls.
const TABLE: &[(&str, Mode, &str)] = &[
    // Positive controls.
    ("api.example.org:443", Mode::Connect, "allowed"),
    ("a.cdn.example.net:8443", Mode::Connect, "allowed"),
    ("plain.example.org:80", Mode::PlainHttp, "allowed"),
    ("127.0.0.1:8080", Mode::Connect, "allowed"),
    ("192.0.2.10:443", Mode::Connect, "allowed"),
    ("lab.example.org:8080", Mode::Connect, "allowed"),
    // Rules: default deny, ports, suffix boundaries, plain HTTP.
    ("evil.example.com:443", Mode::Connect, "no_matching_rule"),
    ("api.example.org:8443", Mode::Connect, "port_not_allowed"),
    ("api.example.org:80", Mode::Connect, "port_not_allowed"),
    ("cdn.example.net:443", Mode::Connect, "no_matching_rule"),
    ("xcdn.example.net:443", Mode::Connect, "no_matching_rule"),
    (
        "a.cdn.example.net.evil.com:443",
        Mode::Connect,
        "no_matching_rule",
    ),
    (
        "api.example.org.evil.com:443",
        Mode::Connect,
        "no_matching_rule",
    ),
    ("evilapi.example.org:443", Mode::Connect, "no_matching_rule"),
    (
        "api.example.org:443",
        Mode::PlainHttp,
        "plain_http_not_allowed",
    ),
    ("127.0.0.1:8080", Mode::PlainHttp, "plain_http_not_allowed"),
    ("airgap.example.org:443", Mode::Connect, "no_matching_rule"),
    // Special-use names, denied before any lookup.
    ("localhost:443", Mode::Connect, "*"),
    ("foo.localhost:443", Mode::Connect, "*"),
    ("printer.local:443", Mode::Connect, "*"),
    ("metadata.google.internal:443", Mode::Connect, "*"),
    ("router.home.arpa:443", Mode::Connect, "*"),
    ("intranet:443", Mode::Connect, "*"),
    ("1.0.0.127.in-addr.arpa:443", Mode::Connect, "*"),
    // IP literals in every spelling never match a name rule.
    ("127.0.0.1:443", Mode::Connect, "ip_literal_not_allowed"),
    ("2130706433:443", Mode::Connect, "ip_literal_not_allowed"),
    ("0177.0.0.1:443", Mode::Connect, "ip_literal_not_allowed"),
    ("0x7f.0.0.1:443", Mode::Connect, "ip_literal_not_allowed"),
    ("0x7f000001:443", Mode::Connect, "ip_literal_not_allowed"),
    ("127.1:443", Mode::Connect, "ip_literal_not_allowed"),
    ("10.0.0.1:443", Mode::Connect, "ip_literal_not_allowed"),
    ("93.184.215.14:443", Mode::Connect, "ip_literal_not_allowed"),
    ("[::1]:443", Mode::Connect, "ip_literal_not_allowed"),
    (
        "[::ffff:127.0.0.1]:443",
        Mode::Connect,
        "ip_literal_not_allowed",
    ),
    (
        "[::ffff:7f00:1]:443",
        Mode::Connect,
        "ip_literal_not_allowed",
    ),
    (
        "[64:ff9b::7f00:1]:443",
        Mode::Connect,
        "ip_literal_not_allowed",
    ),
    (
        "[2002:7f00:1::]:443",
        Mode::Connect,
        "ip_literal_not_allowed",
    ),
    ("[fe80::1]:443", Mode::Connect, "ip_literal_not_allowed"),
    ("0:443", Mode::Connect, "ip_literal_not_allowed"),
    ("0.0.0.0:443", Mode::Connect, "ip_literal_not_allowed"),
    // Metadata: never, whatever the spelling or rule.
    ("169.254.169.254:80", Mode::Connect, "metadata_address"),
    ("0xa9fea9fe:80", Mode::Connect, "metadata_address"),
    ("2852039166:80", Mode::Connect, "metadata_address"),
    ("0251.0376.0251.0376:80", Mode::Connect, "metadata_address"),
    ("168.63.129.16:80", Mode::Connect, "metadata_address"),
    ("100.100.100.200:80", Mode::Connect, "metadata_address"),
    ("[fd00:ec2::254]:80", Mode::Connect, "metadata_address"),
    // Strict authority parsing: rejected, not normalised.
    ("user@api.example.org:443", Mode::Connect, "*"),
    ("api.example.org@evil.com:443", Mode::Connect, "*"),
    ("api.example.org%2f:443", Mode::Connect, "*"),
    ("%61pi.example.org:443", Mode::Connect, "*"),
    ("api.example.org\\@evil.com:443", Mode::Connect, "*"),
    ("api.example.org.:443", Mode::Connect, "*"),
    ("API.EXAMPLE.ORG:0443", Mode::Connect, "*"),
    ("api.example.org:+443", Mode::Connect, "*"),
    ("api.example.org:65536", Mode::Connect, "*"),
    ("api.example.org:", Mode::Connect, "*"),
    ("api.example.org", Mode::Connect, "*"),
    ("api.example.org:443:443", Mode::Connect, "*"),
    ("api.exa\u{0}mple.org:443", Mode::Connect, "*"),
    ("api.example.org :443", Mode::Connect, "*"),
    ("аpi.example.org:443", Mode::Connect, "*"),
    ("api。example。org:443", Mode::Connect, "*"),
    ("[fe80::1%25eth0]:443", Mode::Connect, "*"),
    ("a..example.org:443", Mode::Connect, "*"),
    ("", Mode::Connect, "*"),
    // DNS answers are classified; any bad answer denies the name.
    ("private.example.org:443", Mode::Connect, "private_address"),
    ("mixed.example.org:443", Mode::Connect, "private_address"),
    ("mapped.example.org:443", Mode::Connect, "loopback_address"),
    ("nat64.example.org:443", Mode::Connect, "metadata_address"),
    ("meta.example.org:443", Mode::Connect, "metadata_address"),
    ("nxdomain.example.org:443", Mode::Connect, "dns_nxdomain"),
    ("slow.example.org:443", Mode::Connect, "dns_timeout"),
];

#[test]
fn net_4_net_5_hostile_targets_table() {
    let mut failures = Vec::new();
    for (raw, mode, want) in TABLE {
        let d = run(raw, *mode);
        let ok = match *want {
            "*" => !d.allow,
            "allowed" => d.allow && d.reason == "allowed",
            w => !d.allow && d.reason == w,
        };
        if !ok {
            failures.push(format!(
                "{raw:?} ({mode:?}): got {} {}, want {want}",
                if d.allow { "allow" } else { "deny" },
                d.reason
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} rows wrong:\n{}",
        failures.len(),
        TABLE.len(),
        failures.join("\n")
    );
    assert!(TABLE.len() >= 70);
}

#[test]
fn net_5_rebinding_cannot_redirect_the_connection() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let p = policy();
    let r = resolver();
    let d = rt.block_on(decide::decide_raw(
        Some(&p),
        &r,
        "rebind.example.org:443",
        Mode::Connect,
    ));
    // The resolver was asked once; the decision carries the checked address,
    // which is all the proxy connects to.
    assert!(d.allow, "{d:?}");
    assert_eq!(d.resolved, vec![ip("93.184.215.16")]);
    assert_eq!(r.calls(), vec!["rebind.example.org".to_string()]);
    // A second request asks again and gets (and refuses) the rebound answer.
    let d2 = rt.block_on(decide::decide_raw(
        Some(&p),
        &r,
        "rebind.example.org:443",
        Mode::Connect,
    ));
    assert_eq!((d2.allow, d2.reason), (false, "loopback_address"));
}

#[test]
fn net_5_static_hosts_answers_are_still_classified() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut p = policy();
    p.add_allow("airgap.example.org").unwrap();
    let r = ScriptedResolver::new();
    let d = rt.block_on(decide::decide_raw(
        Some(&p),
        &r,
        "airgap.example.org:443",
        Mode::Connect,
    ));
    assert_eq!(
        (d.allow, d.reason),
        (false, "private_address"),
        "10.1.2.3 needs an explicit CIDR rule"
    );
    assert!(
        r.calls().is_empty(),
        "the hosts map answers without the resolver"
    );
    p.add_allow("10.1.2.0/24").unwrap(); // explicit CIDR: positive control
    let d = rt.block_on(decide::decide_raw(
        Some(&p),
        &r,
        "airgap.example.org:443",
        Mode::Connect,
    ));
    assert!(d.allow, "{d:?}");
}

#[test]
fn net_2_no_policy_denies_everything() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = resolver();
    for raw in ["api.example.org:443", "127.0.0.1:8080", "garbage"] {
        let d = rt.block_on(decide::decide_raw(None, &r, raw, Mode::Connect));
        assert_eq!((d.allow, d.reason), (false, "no_policy"));
    }
}

#[test]
fn net_2_invalid_policies_are_refused_at_load() {
    let bad = [
        ("unknown top-level field", "allowed = []\n"),
        (
            "unknown rule field",
            "[[allow]]\nhost = \"a.example.org\"\nport = 443\n",
        ),
        ("star", "[[allow]]\nhost = \"*\"\n"),
        ("star tld", "[[allow]]\nhost = \"*.com\"\n"),
        ("ip as host", "[[allow]]\nhost = \"10.0.0.1\"\n"),
        ("special-use host", "[[allow]]\nhost = \"localhost\"\n"),
        ("metadata cidr", "[[allow]]\ncidr = \"169.254.0.0/16\"\n"),
        ("everything cidr", "[[allow]]\ncidr = \"0.0.0.0/0\"\n"),
        ("v6 metadata cidr", "[[allow]]\ncidr = \"fd00::/8\"\n"),
        ("host bits", "[[allow]]\ncidr = \"10.0.0.1/8\"\n"),
        (
            "both",
            "[[allow]]\nhost = \"a.example.org\"\ncidr = \"10.0.0.0/8\"\n",
        ),
        ("neither", "[[allow]]\nports = [443]\n"),
        (
            "port zero",
            "[[allow]]\nhost = \"a.example.org\"\nports = [0]\n",
        ),
        ("not toml", "{{{"),
        (
            "hosts value",
            "[hosts]\n\"a.example.org\" = [\"not-an-ip\"]\n",
        ),
        (
            "channel without secret",
            "[channels.x]\nupstream = \"https://api.example.org\"\nheader = \"Authorization\"\nvalue = \"Bearer literal\"\n",
        ),
        (
            "channel secret missing",
            "[channels.x]\nupstream = \"https://api.example.org\"\nheader = \"Authorization\"\nvalue = \"Bearer ${env:AIRLOCK_TEST_SURELY_UNSET_VAR}\"\n",
        ),
        (
            "channel plain http",
            "[channels.x]\nupstream = \"http://api.example.org\"\nheader = \"Authorization\"\nvalue = \"${env:PATH}\"\n",
        ),
        (
            "channel with path",
            "[channels.x]\nupstream = \"https://api.example.org/v1\"\nheader = \"Authorization\"\nvalue = \"${env:PATH}\"\n",
        ),
        (
            "channel trace",
            "[channels.x]\nupstream = \"https://api.example.org\"\nheader = \"Authorization\"\nvalue = \"${env:PATH}\"\nmethods = [\"TRACE\"]\n",
        ),
    ];
    for (what, text) in bad {
        assert!(
            Policy::from_toml(text, &EnvAndFiles).is_err(),
            "{what} was accepted"
        );
    }
    // Positive control: a sound policy with a channel loads.
    let good = "[[allow]]\nhost = \"*.example.org\"\n[channels.x]\nupstream = \"https://api.example.org\"\nheader = \"Authorization\"\nvalue = \"Bearer ${env:PATH}\"\n";
    let p = Policy::from_toml(good, &EnvAndFiles).unwrap();
    assert!(
        format!("{:?}", p.channels["x"]).contains("[REDACTED]"),
        "credentials never print"
    );
}

/// A loopback HTTP listener that answers every connection with `name` and counts them.
fn named_listener(l: std::net::TcpListener, name: &'static str) -> Arc<AtomicUsize> {
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            c.fetch_add(1, Ordering::SeqCst);
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let mut s = s;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{name}",
                name.len()
            );
        }
    });
    count
}

/// Reads what is left of a connection.
fn rest(s: &mut TcpStream) -> String {
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// NET-5 through the proxy's real connect path (CONNECT and plain HTTP): the scripted
/// resolver answers the checked address first and a loopback address on every later query,
/// as a rebinding DNS server would; a real listener waits on each. The proxy reaches only the
/// checked one, asking the resolver once per request. Controls: a later request gets (and
/// refuses) the rebound answer, and the rebound listener answers anyone who reaches it.
#[test]
fn net_5_rebinding_through_the_proxy_reaches_only_the_checked_address() {
    // The checked address 127.0.0.2 (allowed by an explicit CIDR rule) and the rebound
    // 127.0.0.1 (loopback: refused) listen on the same port.
    let (good, bad, port) = loop {
        let good = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        let port = good.local_addr().unwrap().port();
        if let Ok(bad) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            break (good, bad, port);
        }
    };
    let good = named_listener(good, "checked");
    let bad = named_listener(bad, "rebound");
    let policy = format!(
        "[[allow]]\nhost = \"*.rebind.example.org\"\nports = [{port}]\nhttp = true\n\
         [[allow]]\ncidr = \"127.0.0.2/32\"\nports = [{port}]\nhttp = true\n"
    );
    // One name per request kind, each rebinding after its first answer.
    let resolver = Arc::new(
        ScriptedResolver::new()
            .answer("tunnel.rebind.example.org", Ok(vec![ip("127.0.0.2")]))
            .answer("tunnel.rebind.example.org", Ok(vec![ip("127.0.0.1")]))
            .answer("plain.rebind.example.org", Ok(vec![ip("127.0.0.2")]))
            .answer("plain.rebind.example.org", Ok(vec![ip("127.0.0.1")])),
    );
    let egress = Egress::new(
        Policy::from_toml(&policy, &EnvAndFiles),
        resolver.clone(),
        Arc::new(NullLog),
    )
    .unwrap();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_port = l.local_addr().unwrap().port();
    let _served = egress
        .serve_sandbox(l, "rebind", None, &format!("127.0.0.1:{proxy_port}"))
        .unwrap();
    let connect = || {
        let s = TcpStream::connect(("127.0.0.1", proxy_port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s
    };

    // CONNECT: the tunnel reaches the checked address.
    let mut s = connect();
    write!(
        s,
        "CONNECT tunnel.rebind.example.org:{port} HTTP/1.1\r\nHost: x\r\n\r\n"
    )
    .unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let mut line = String::new();
    while r.read_line(&mut line).unwrap() > 0 && line != "\r\n" {
        line.clear();
    }
    write!(s, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = r.read_to_string(&mut answer);
    assert!(answer.ends_with("checked"), "{answer}");
    // Plain HTTP: the same.
    let mut s = connect();
    write!(s, "GET http://plain.rebind.example.org:{port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let answer = rest(&mut s);
    assert!(answer.ends_with("checked"), "{answer}");
    assert_eq!(
        bad.load(Ordering::SeqCst),
        0,
        "the proxy reached the rebound address"
    );
    assert_eq!(good.load(Ordering::SeqCst), 2);
    assert_eq!(resolver.calls().len(), 2, "one lookup per request");

    // Control: the next request sees the rebound answer and is refused before connecting.
    let mut s = connect();
    write!(
        s,
        "CONNECT tunnel.rebind.example.org:{port} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let answer = rest(&mut s);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("loopback_address"), "{answer}");
    assert_eq!(bad.load(Ordering::SeqCst), 0);
    // Control: the rebound listener is live; reaching it would have been seen.
    let mut direct = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(direct, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(rest(&mut direct).ends_with("rebound"));
    assert_eq!(bad.load(Ordering::SeqCst), 1);
}
