//! The blob store every node sees (DUR-5) against a real S3-compatible
//! server: moto's server mode (`moto[server]`, installed into
//! `target/pydeps-moto` by scripts/test), started on loopback by each test.
//! Two `airlock up` on one PostgreSQL database with their own data
//! directories share artifacts and uploads through the bucket; a blob
//! damaged in the bucket is never served as complete.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::both_users;
use crate::suite::runs::{Env, PgDb, Server};
use crate::suite::support::*;

const SKIP: &str = "AIRLOCK_TEST_SKIP_S3";
const BUCKET: &str = "airlock-blobs";

fn pydeps() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/pydeps-moto")
}

/// moto's S3 server on a loopback port, stopped (by its own pid) on drop.
struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    /// Started with the bucket made, or `None` when moto is missing and
    /// the skip variable is set (missing without it fails the test).
    fn start() -> Option<Self> {
        if !pydeps().join("moto").is_dir() {
            if std::env::var_os(SKIP).is_some() {
                eprintln!("skipped: no moto in {} ({SKIP})", pydeps().display());
                return None;
            }
            panic!(
                "moto's S3 server is not in {}: run scripts/test (it installs it), or set {SKIP}=1",
                pydeps().display()
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("python3")
            .args([
                "-m",
                "moto.server",
                "-H",
                "127.0.0.1",
                "-p",
                &port.to_string(),
            ])
            .env("PYTHONPATH", pydeps())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let m = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while m.http("GET", "/", b"").0 != 200 {
            assert!(Instant::now() < deadline, "moto did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        let (c, body) = m.http("PUT", &format!("/{BUCKET}"), b"");
        assert_eq!(c, 200, "{}", String::from_utf8_lossy(&body));
        Some(m)
    }

    /// One plain HTTP request (moto does not check signatures).
    fn http(&self, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return (0, Vec::new());
        };
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            self.port,
            body.len()
        );
        if s.write_all(head.as_bytes()).is_err() || s.write_all(body).is_err() {
            return (0, Vec::new());
        }
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out);
        let code = text
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = out
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| out[i + 4..].to_vec())
            .unwrap_or_default();
        (code, body)
    }

    /// Overwrites blob `digest`'s object with `bytes` through the S3 API
    /// (boto3, signed like any client; moto refuses unsigned writes over
    /// an object a signed client made).
    fn overwrite(&self, digest: &str, bytes: &[u8]) {
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import sys, boto3\n\
                 s3 = boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', \
                 aws_access_key_id='testing', aws_secret_access_key='testing')\n\
                 s3.put_object(Bucket=sys.argv[2], Key=sys.argv[3], Body=sys.stdin.buffer.read())\n",
                &format!("http://127.0.0.1:{}", self.port),
                BUCKET,
                &format!("airlock/sha256/{}/{digest}", &digest[..2]),
            ])
            .env("PYTHONPATH", pydeps())
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(bytes).unwrap();
        assert!(child.wait().unwrap().success(), "boto3 put_object failed");
    }

    /// What a node needs to use the bucket (credentials are moto's dummies).
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AIRLOCK_BLOB_STORE", format!("s3://{BUCKET}/airlock")),
            ("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.port)),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            (
                "AWS_SECRET_ACCESS_KEY",
                "testing-secret-never-logged".into(),
            ),
        ]
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn with<'a>(
    base: &'a [(&'static str, String)],
    more: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut v: Vec<(&str, &str)> = base.iter().map(|(k, v)| (*k, v.as_str())).collect();
    v.extend_from_slice(more);
    v
}

/// GET `path`: the status and the body, de-chunked.
fn download(server: &Server, path: &str) -> (u16, String) {
    let (code, raw) = server.raw("GET", path, None, &[]);
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    if !head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        return (code, body.to_string());
    }
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    (code, out)
}

/// Equal, without printing kilobytes of numbers when not.
fn same(got: &str, want: &str) -> bool {
    if got != want {
        eprintln!(
            "got {} bytes (starts {:?}), want {} bytes",
            got.len(),
            &got[..got.len().min(80)],
            want.len()
        );
    }
    got == want
}

fn numbers(from: u32, to: u32) -> String {
    (from..=to).map(|n| format!("{n}\n")).collect()
}

fn artifact_digest(server: &Server, run: &str, name: &str) -> String {
    let (_, v) = server.json("GET", &format!("/v1/runs/{run}"), None, &[]);
    v["artifacts"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["name"] == name))
        .and_then(|a| a["digest"].as_str())
        .unwrap_or_else(|| panic!("no artifact {name}: {v}"))
        .to_string()
}

fn start_run(server: &Server, worker: &str, body: &str) -> String {
    let (c, v) = server.json(
        "POST",
        &format!("/v1/workers/{worker}/runs"),
        Some(body),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        server.wait_state(&id, &["succeeded", "failed", "blocked"]),
        "succeeded",
        "{}",
        server.json("GET", &format!("/v1/runs/{id}"), None, &[]).1
    );
    id
}

/// A run executed by node A is downloaded byte for byte from node B (whose
/// data directory never held it), and an upload made through B is staged
/// into a run that A executes. Positive control: with no shared store, B
/// answers 404 for A's artifact (the measured problem this fixes).
fn dur_5_two_nodes_share_artifacts_and_uploads_through_s3(who: Who) {
    let Some(db) = PgDb::new() else { return };
    let Some(moto) = Moto::start() else { return };
    let env = Env::new(who);
    env.sh_worker(
        "maker",
        "",
        "seq 1 20000 > /airlock/output/report.txt\necho '{}' > /airlock/output/result.json\n",
    );
    env.sh_worker(
        "reader",
        "[inputs.doc]\ntype = \"file\"\nmax_bytes = 1000\n[outputs.got]\ntype = \"json\"\n",
        "p=$(sed -n 's/.*\"doc\":\"\\([^\"]*\\)\".*/\\1/p' /airlock/input.json)\n\
         { printf '{\"got\": '; cat \"$p\"; printf '}'; } > /airlock/output/result.json\n",
    );
    let url = db.url();
    let s3 = moto.env();
    let a = Server::start(&env, &with(&s3, &[("AIRLOCK_DATABASE_URL", &url)]));
    let run = start_run(&a, "maker", r#"{"input": {}}"#);
    let digest = artifact_digest(&a, &run, "report.txt");

    // Node B: the same database and keys, a data directory of its own.
    let data_b = env.root().join("data-b");
    let keys = env.data.join("keys");
    let node_b = |blob: bool| {
        let mut vars = vec![
            ("AIRLOCK_DATABASE_URL", url.as_str()),
            ("AIRLOCK_DATA_DIR", data_b.to_str().unwrap()),
            ("AIRLOCK_KEY_DIR", keys.to_str().unwrap()),
        ];
        if !blob {
            vars.push(("AIRLOCK_BLOB_STORE", "local"));
            return Server::start(&env, &vars);
        }
        Server::start(&env, &with(&s3, &vars))
    };
    let path = format!("/v1/runs/{run}/artifacts/report.txt");
    {
        let b = node_b(false);
        let (c, _) = b.request("GET", &path, None, &[]);
        assert_eq!(
            c, 404,
            "control: without the bucket node B has no such blob"
        );
    }
    let b = node_b(true);
    let (c, body) = download(&b, &path);
    assert_eq!(c, 200, "{}", &body[..body.len().min(300)]);
    assert!(same(&body, &numbers(1, 20000)), "byte for byte");
    assert!(
        data_b
            .join("artifacts/sha256")
            .join(&digest[..2])
            .join(&digest)
            .is_file(),
        "B fetched it into its own store"
    );

    // An upload through B, used by a run A executes (B is stopped first so
    // that A is the only node that can claim it).
    let (c, v) = b.json(
        "POST",
        "/v1/uploads?name=doc.json",
        Some(r#"{"from": "node b"}"#),
        &[],
    );
    assert_eq!(c, 201, "{v}");
    let upload = v["upload"]["id"].as_str().unwrap().to_string();
    drop(b);
    let run = start_run(
        &a,
        "reader",
        &format!(r#"{{"input": {{"doc": {{"upload": "{upload}"}}}}}}"#),
    );
    let (_, v) = a.json("GET", &format!("/v1/runs/{run}"), None, &[]);
    assert_eq!(
        v["run"]["outputs"]["got"],
        serde_json::json!({"from": "node b"}),
        "{v}"
    );
    // The location is reported at start; credentials never are.
    let log = a.log_text();
    assert!(
        log.contains(&format!(r#""blob_store":"s3://{BUCKET}/airlock""#)),
        "{log}"
    );
    assert!(!log.contains("testing-secret-never-logged"));
}
both_users!(dur_5_two_nodes_share_artifacts_and_uploads_through_s3);

/// A blob overwritten in the bucket is refused on read (the download fails
/// with an error, never the wrong bytes as success) and reported; the
/// intact blob next to it downloads (positive control). `validate --level
/// full` rehashes the bucket's blobs and names the damaged one; gc refuses
/// clearly.
fn dur_5_a_blob_damaged_in_the_bucket_is_never_served(who: Who) {
    let Some(moto) = Moto::start() else { return };
    let env = Env::new(who);
    env.sh_worker(
        "pair",
        "",
        "seq 1 5000 > /airlock/output/good.txt\nseq 5001 10000 > /airlock/output/bad.txt\necho '{}' > /airlock/output/result.json\n",
    );
    let s3 = moto.env();
    let server = Server::start(&env, &with(&s3, &[]));
    let run = start_run(&server, "pair", r#"{"input": {}}"#);
    let good = artifact_digest(&server, &run, "good.txt");
    let bad = artifact_digest(&server, &run, "bad.txt");
    // Same length, one byte different, in the bucket; this node's cached
    // copies are dropped so that the next read comes from the bucket.
    let mut wrong = numbers(5001, 10000).into_bytes();
    wrong[0] = b'9';
    moto.overwrite(&bad, &wrong);
    std::fs::remove_dir_all(env.data.join("artifacts/sha256")).unwrap();
    std::fs::create_dir(env.data.join("artifacts/sha256")).unwrap();
    env.give(&env.data.join("artifacts/sha256"));

    let (c, body) = download(&server, &format!("/v1/runs/{run}/artifacts/good.txt"));
    assert_eq!(c, 200, "control: the intact blob downloads");
    assert!(same(&body, &numbers(1, 5000)));
    let (c, body) = download(&server, &format!("/v1/runs/{run}/artifacts/bad.txt"));
    assert_eq!(c, 500, "{}", &body[..body.len().min(300)]);
    assert!(!body.contains("5002\n5003"), "no bytes of the blob: {body}");
    // The structured log is written by a thread of its own: wait for it.
    let deadline = Instant::now() + Duration::from_secs(30);
    let log = loop {
        let log = server.log_text();
        if (log.contains("is damaged") && log.contains(&bad)) || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        log.contains("is damaged") && log.contains(&bad),
        "the mismatch is reported: {log}"
    );
    assert!(!log.contains("testing-secret-never-logged"));
    let cached = env.data.join("artifacts/sha256").join(&bad[..2]).join(&bad);
    assert!(!cached.exists(), "nothing of the damaged blob is kept");
    let tmp: Vec<_> = std::fs::read_dir(env.data.join("artifacts/tmp"))
        .unwrap()
        .collect();
    assert!(tmp.is_empty(), "no staging leftovers: {tmp:?}");
    drop(server);

    let mut cmd = env.cmd();
    for (k, v) in &s3 {
        cmd.env(k, v);
    }
    let out = cmd
        .args(["validate", "--level", "full", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let damaged: Vec<&str> = v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["kind"] == "digest_mismatch")
        .filter_map(|f| f["object"].as_str())
        .collect();
    assert_eq!(damaged.len(), 1, "{v}");
    assert!(
        damaged[0].contains(&bad) && !damaged[0].contains(&good),
        "{v}"
    );
    assert!(!out.status.success());

    let mut cmd = env.cmd();
    for (k, v) in &s3 {
        cmd.env(k, v);
    }
    let out = cmd.args(["gc"]).output().unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("not supported with an S3 blob store"),
        "{text}"
    );
}
both_users!(dur_5_a_blob_damaged_in_the_bucket_is_never_served);
