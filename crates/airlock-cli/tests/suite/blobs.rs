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

    /// Runs python `code` with `s3` (a boto3 client of this server) and
    /// `B` (the bucket) defined, `argv[1:]` = `args`; answers its stdout.
    fn py(&self, code: &str, args: &[&str]) -> String {
        let script = format!(
            "import sys, json, hashlib, boto3\n\
             s3 = boto3.client('s3', endpoint_url='http://127.0.0.1:{}', region_name='us-east-1', \
             aws_access_key_id='testing', aws_secret_access_key='testing')\n\
             B = '{BUCKET}'\n{code}\n",
            self.port
        );
        let out = Command::new("python3")
            .arg("-c")
            .arg(script)
            .args(args)
            .env("PYTHONPATH", pydeps())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "boto3: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every object of the bucket: key → (size, SHA-256 of its bytes).
    fn objects(&self) -> std::collections::BTreeMap<String, (u64, String)> {
        let out = self.py(
            "out = {}\n\
             for page in s3.get_paginator('list_objects_v2').paginate(Bucket=B):\n    \
                 for o in page.get('Contents', []):\n        \
                     b = s3.get_object(Bucket=B, Key=o['Key'])['Body'].read()\n        \
                     out[o['Key']] = [len(b), hashlib.sha256(b).hexdigest()]\n\
             print(json.dumps(out))",
            &[],
        );
        serde_json::from_str(&out).unwrap()
    }

    /// Writes `bytes` under `key`.
    fn put(&self, key: &str, bytes: &[u8]) {
        let hexed: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        self.py(
            "s3.put_object(Bucket=B, Key=sys.argv[1], Body=bytes.fromhex(sys.argv[2]))",
            &[key, &hexed],
        );
    }

    /// Copies `from` to `to` and deletes `from`.
    fn rename(&self, from: &str, to: &str) {
        self.py(
            "s3.copy_object(Bucket=B, Key=sys.argv[2], CopySource={'Bucket': B, 'Key': sys.argv[1]})\n\
             s3.delete_object(Bucket=B, Key=sys.argv[1])",
            &[from, to],
        );
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
/// full` rehashes the bucket's blobs and names the damaged one; gc (on the
/// bucket) does not take it: a row names it.
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

    // gc works on the bucket and never takes a blob a row names, damaged
    // or not.
    let (code, v, text) = s3cmd(&env, &s3, &["gc", "--grace-secs", "0", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(states(&v).len(), 0, "{v}");
}
both_users!(dur_5_a_blob_damaged_in_the_bucket_is_never_served);

fn sha_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

fn blob_key(d: &str) -> String {
    format!("airlock/sha256/{}/{d}", &d[..2])
}

fn trash_key(id: &str, d: &str) -> String {
    format!("airlock/trash/{id}/sha256/{}/{d}", &d[..2])
}

/// The CLI of `env` with the bucket's environment: exit code, JSON stdout,
/// all output.
fn s3cmd(env: &Env, s3: &[(&'static str, String)], args: &[&str]) -> (i32, Value, String) {
    let mut cmd = env.cmd();
    for (k, v) in s3 {
        cmd.env(k, v);
    }
    let out = cmd.args(args).output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), v, text)
}

fn states(v: &Value) -> Vec<String> {
    v["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| e["state"].as_str().unwrap_or("").to_string())
        .collect()
}

/// DUR-6 on S3: `gc` collects the bucket's blobs that no row names, with
/// the guarantees of local gc. Dry runs change no object of the bucket; a
/// blob written less than the grace ago is left (control: with no grace it
/// is a candidate); `--apply` writes the manifest (naming the bucket, its
/// entries bucket keys), copies each candidate under
/// `<prefix>/trash/<id>/`, deletes it from its place and drops this node's
/// cached copy, referenced blobs untouched and `validate --level full`
/// clean; `gc restore` never overwrites an object under the blob's name
/// (control: once that object is gone, the restore finishes) and gives
/// every object back byte for byte; an interrupted apply resumes — an entry
/// not moved is moved, one moved but not recorded is recognised, one a row
/// names meanwhile is refused and stays; `gc purge` is refused inside the
/// recovery window and then deletes the bucket's trash area; each step is
/// on the audit chain.
#[test]
fn dur_6_gc_on_s3_trashes_restores_resumes_and_purges_in_the_bucket() {
    let Some(moto) = Moto::start() else { return };
    let env = Env::new(Who::Invoker);
    env.sh_worker(
        "mk",
        "",
        "printf one > /airlock/output/a.txt\nprintf 'two two' > /airlock/output/b.txt\necho '{}' > /airlock/output/result.json\n",
    );
    let s3 = moto.env();
    let (code, _, text) = s3cmd(&env, &s3, &["run", "mk", "--json"]);
    assert_eq!(code, 0, "{text}");
    let referenced = moto.objects();
    assert!(referenced.len() >= 2, "{referenced:?}");
    let orphans: [&[u8]; 3] = [b"orphan one", b"orphan two, longer", b"orphan three"];
    let d: Vec<String> = orphans.iter().map(|b| sha_hex(b)).collect();
    for (bytes, digest) in orphans.iter().zip(&d) {
        moto.put(&blob_key(digest), bytes);
    }
    let cached = env
        .data
        .join("artifacts/sha256")
        .join(&d[0][..2])
        .join(&d[0]);
    std::fs::create_dir_all(cached.parent().unwrap()).unwrap();
    std::fs::write(&cached, orphans[0]).unwrap();
    let before = moto.objects();
    assert_eq!(before.len(), referenced.len() + 3);

    // Dry runs: the grace leaves blobs written just now (control: no grace).
    let (code, v, text) = s3cmd(&env, &s3, &["gc", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(states(&v).len(), 0, "{v}");
    assert!(text.contains("3 blob(s)"), "{text}");
    let (code, v, text) = s3cmd(&env, &s3, &["gc", "--grace-secs", "0", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(states(&v), ["planned"; 3], "{v}");
    let mut paths: Vec<String> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    let mut want: Vec<String> = d.iter().map(|x| blob_key(x)).collect();
    want.sort();
    assert_eq!(paths, want);
    assert_eq!(moto.objects(), before, "a dry run changed the bucket");
    assert!(cached.exists());

    // Apply.
    let (code, v, text) = s3cmd(&env, &s3, &["gc", "--apply", "--grace-secs", "0", "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(states(&v), ["moved"; 3], "{v}");
    let manifest = PathBuf::from(v["manifest"].as_str().unwrap());
    let id = manifest
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let m: Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    assert_eq!(m["bucket"], format!("s3://{BUCKET}/airlock"), "{m}");
    let after = moto.objects();
    for (k, x) in &referenced {
        assert_eq!(after.get(k), Some(x), "referenced blob {k} touched");
    }
    for x in &d {
        assert!(!after.contains_key(&blob_key(x)), "{x} still in place");
        assert_eq!(after.get(&trash_key(&id, x)), before.get(&blob_key(x)));
    }
    assert!(!cached.exists(), "this node's cached copy is dropped too");
    let (code, _, text) = s3cmd(&env, &s3, &["validate", "--level", "full", "--json"]);
    assert_eq!(code, 0, "{text}");

    // A restore never overwrites an object under the blob's name.
    moto.put(&blob_key(&d[1]), b"someone else's bytes");
    let mpath = manifest.to_str().unwrap();
    let (code, _, text) = s3cmd(&env, &s3, &["gc", "restore", mpath]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("already exists"), "{text}");
    assert_eq!(
        moto.objects()[&blob_key(&d[1])].1,
        sha_hex(b"someone else's bytes")
    );
    // Control: with that object gone, the restore finishes, byte for byte.
    moto.py(
        "s3.delete_object(Bucket=B, Key=sys.argv[1])",
        &[&blob_key(&d[1])],
    );
    let (code, v, text) = s3cmd(&env, &s3, &["gc", "restore", mpath, "--json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(states(&v), ["restored"; 3], "{v}");
    assert_eq!(moto.objects(), before, "restore is not byte for byte");

    // An interrupted apply: entry 0 not moved yet, entry 1 moved but not
    // recorded, entry 2 not moved and named by an upload row meanwhile.
    let (code, v, text) = s3cmd(&env, &s3, &["gc", "--apply", "--grace-secs", "0", "--json"]);
    assert_eq!(code, 0, "{text}");
    let manifest = PathBuf::from(v["manifest"].as_str().unwrap());
    let id = manifest
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let order: Vec<String> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sha256"].as_str().unwrap().to_string())
        .collect();
    moto.rename(&trash_key(&id, &order[0]), &blob_key(&order[0]));
    moto.rename(&trash_key(&id, &order[2]), &blob_key(&order[2]));
    // (Put back by hand, entry 0 has a new modification time: the manifest
    // is given it, as if it had never moved.)
    let modified: i64 = moto
        .py(
            "print(int(s3.head_object(Bucket=B, Key=sys.argv[1])['LastModified'].timestamp() * 1000))",
            &[&blob_key(&order[0])],
        )
        .trim()
        .parse()
        .unwrap();
    crate::suite::gc::edit_manifest(&manifest, |m| {
        for i in 0..3 {
            m["entries"][i]["state"] = "planned".into();
        }
        m["entries"][0]["modified_ms"] = modified.into();
    });
    crate::suite::gc::sql(
        &env,
        &format!(
            "INSERT INTO uploads (id, workspace_id, user_id, name, digest, size, media_type, created_at) \
             VALUES ('upl_gc1', 'ws_default', 'usr_1', 'o.txt', '{}', 12, 'text/plain', 1);",
            order[2]
        ),
    );
    let mpath = manifest.to_str().unwrap();
    let (code, v, text) = s3cmd(&env, &s3, &["gc", "resume", mpath, "--json"]);
    assert_eq!(code, 1, "{text}");
    assert_eq!(states(&v), ["moved", "moved", "refused"], "{v}");
    assert!(
        v["entries"][2]["detail"]
            .as_str()
            .unwrap_or("")
            .contains("a row names it"),
        "{v}"
    );
    let now = moto.objects();
    assert!(!now.contains_key(&blob_key(&order[0])));
    assert!(now.contains_key(&trash_key(&id, &order[0])));
    assert!(now.contains_key(&trash_key(&id, &order[1])));
    assert!(
        now.contains_key(&blob_key(&order[2])),
        "the named blob stays"
    );

    // Purge: refused inside the recovery window, then the trash area goes.
    let (code, _, text) = s3cmd(&env, &s3, &["gc", "purge", mpath]);
    assert_eq!(code, 125, "{text}");
    assert!(text.contains("recovery window"), "{text}");
    assert!(moto.objects().contains_key(&trash_key(&id, &order[0])));
    crate::suite::gc::edit_manifest(&manifest, |m| {
        let t = m["created_at_ms"].as_i64().unwrap();
        m["created_at_ms"] = (t - 8 * 86_400_000).into();
    });
    let (code, _, text) = s3cmd(&env, &s3, &["gc", "purge", mpath]);
    assert_eq!(code, 0, "{text}");
    let now = moto.objects();
    assert!(
        !now.keys()
            .any(|k| k.starts_with(&format!("airlock/trash/{id}/"))),
        "{now:?}"
    );
    assert!(now.contains_key(&blob_key(&order[2])));
    assert!(!manifest.parent().unwrap().exists());
    let (_, _, export) = s3cmd(&env, &s3, &["audit", "export"]);
    for event in ["\"gc.applied\"", "\"gc.restored\"", "\"gc.purged\""] {
        assert!(export.contains(event), "{event}: {export}");
    }
}

/// The blob files of this node's cache: (digest, size).
fn cache_files(env: &Env) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let root = env.data.join("artifacts/sha256");
    for shard in std::fs::read_dir(&root).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(shard.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let m = std::fs::symlink_metadata(f.path()).unwrap();
            if m.is_file() {
                out.push((f.file_name().to_string_lossy().into_owned(), m.len()));
            }
        }
    }
    out.sort();
    out
}

/// DUR-5: with a bucket, this node's cache (`data/artifacts`) is bounded by
/// `AIRLOCK_BLOB_CACHE_MAX`: a run publishes four artifacts of ~40 KB
/// (more than the 100 KB bound together) and each is downloaded twice;
/// after every download the cache holds at most the bound, and every
/// download is byte for byte (what was evicted is fetched again from the
/// bucket). That the bound was needed: the four blobs together exceed it,
/// and fewer than four stay cached. Then `airlock recover` drops a cached
/// copy whose bytes were changed (`corrupted_cache_copy`, not quarantined:
/// the bucket has the blob) and leaves the intact ones (control); the
/// download after it is byte for byte again.
#[test]
fn dur_5_the_blob_cache_is_bounded_and_a_damaged_cache_copy_is_dropped() {
    let Some(moto) = Moto::start() else { return };
    let env = Env::new(Who::Invoker);
    env.sh_worker(
        "four",
        "",
        "for i in 1 2 3 4; do seq $((i * 100000)) $((i * 100000 + 5500)) > /airlock/output/f$i.txt; done\necho '{}' > /airlock/output/result.json\n",
    );
    let s3 = moto.env();
    const MAX: u64 = 100_000;
    let max = MAX.to_string();
    let server = Server::start(&env, &with(&s3, &[("AIRLOCK_BLOB_CACHE_MAX", &max)]));
    let run = start_run(&server, "four", r#"{"input": {}}"#);
    let want = |i: u32| numbers(i * 100_000, i * 100_000 + 5500);
    assert!(
        4 * want(1).len() as u64 > MAX,
        "the test needs more than the bound"
    );
    let total = |env: &Env| cache_files(env).iter().map(|(_, n)| n).sum::<u64>();
    for round in 0..2 {
        for i in 1..=4 {
            let (c, body) = download(&server, &format!("/v1/runs/{run}/artifacts/f{i}.txt"));
            assert_eq!(
                c,
                200,
                "round {round} f{i}: {}",
                &body[..body.len().min(300)]
            );
            assert!(same(&body, &want(i)), "round {round} f{i}");
            let t = total(&env);
            assert!(t <= MAX, "round {round} f{i}: the cache holds {t} bytes");
        }
    }
    assert!(cache_files(&env).len() < 4, "{:?}", cache_files(&env));
    drop(server);

    // A cached copy with one byte changed: dropped by recover (the intact
    // ones stay), and the next download is right again.
    let files = cache_files(&env);
    assert!(files.len() >= 2, "{files:?}");
    let path = |d: &str| env.data.join("artifacts/sha256").join(&d[..2]).join(d);
    let (bad, _) = &files[0];
    let mut bytes = std::fs::read(path(bad)).unwrap();
    bytes[0] ^= 1;
    std::fs::write(path(bad), &bytes).unwrap();
    let (code, v, text) = s3cmd(&env, &s3, &["recover", "--json"]);
    assert_eq!(code, 0, "{text}");
    let entries = v["files"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{v}");
    assert_eq!(entries[0]["reason"], "corrupted_cache_copy", "{v}");
    assert_eq!(entries[0]["state"], "dropped", "{v}");
    assert!(!path(bad).exists());
    for (d, _) in &files[1..] {
        assert!(path(d).exists(), "control: intact cached blob {d} stays");
    }
    let server = Server::start(&env, &with(&s3, &[("AIRLOCK_BLOB_CACHE_MAX", &max)]));
    for i in 1..=4 {
        let (c, body) = download(&server, &format!("/v1/runs/{run}/artifacts/f{i}.txt"));
        assert_eq!(c, 200);
        assert!(same(&body, &want(i)), "after recover f{i}");
    }
}

/// DUR-5: a bucket that cannot be reached (moto stopped) is a clear,
/// bounded refusal, never a hang, a panic or a raw 500: an upload answers
/// 503 `blob_store_unavailable` naming the blob store (not the endpoint)
/// and records no upload row; a download of a blob this node does not
/// cache answers the same; a run whose artifact cannot be published ends
/// `failed` with no artifact row (it never claims success with a blob
/// missing); `validate` reports `blob_store_unreachable`. Controls: with
/// the bucket up, the same upload is 201 and the same run succeeds.
#[test]
fn dur_5_an_unreachable_bucket_is_a_clear_refusal_and_records_nothing() {
    let Some(moto) = Moto::start() else { return };
    let env = Env::new(Who::Invoker);
    env.sh_worker(
        "mk",
        "",
        "date +%s%N > /airlock/output/stamp.txt\necho '{}' > /airlock/output/result.json\n",
    );
    let s3 = moto.env();
    let server = Server::start(&env, &with(&s3, &[]));
    let upload = |body: &str| server.json("POST", "/v1/uploads?name=doc.json", Some(body), &[]);
    let (c, v) = upload(r#"{"n": 1}"#);
    assert_eq!(c, 201, "control: the bucket is up: {v}");
    let run = start_run(&server, "mk", r#"{"input": {}}"#);
    std::fs::remove_dir_all(env.data.join("artifacts/sha256")).unwrap();
    std::fs::create_dir(env.data.join("artifacts/sha256")).unwrap();
    drop(moto);

    let (c, v) = upload(r#"{"n": 2}"#);
    assert_eq!(c, 503, "{v}");
    assert_eq!(v["error"]["code"], "blob_store_unavailable", "{v}");
    let msg = v["error"]["message"].as_str().unwrap_or("");
    assert!(msg.contains(&format!("s3://{BUCKET}/airlock")), "{v}");
    assert!(!msg.contains("127.0.0.1"), "no client detail: {v}");
    let rows = crate::suite::gc::sql_value(&env, "SELECT count(*) FROM uploads");
    assert_eq!(rows, "1", "only the control's upload is recorded");

    let (c, body) = download(&server, &format!("/v1/runs/{run}/artifacts/stamp.txt"));
    assert_eq!(c, 503, "{body}");
    assert!(body.contains("blob_store_unavailable"), "{body}");

    let (c, v) = server.json("POST", "/v1/workers/mk/runs", Some(r#"{"input": {}}"#), &[]);
    assert_eq!(c, 201, "{v}");
    let id = v["run"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        server.wait_state(&id, &["succeeded", "failed", "blocked"]),
        "failed"
    );
    let (_, v) = server.json("GET", &format!("/v1/runs/{id}"), None, &[]);
    assert!(
        v["run"]["error_message"]
            .as_str()
            .unwrap_or("")
            .contains("could not be stored"),
        "{v}"
    );
    assert_eq!(v["artifacts"].as_array().map_or(0, Vec::len), 0, "{v}");
    drop(server);

    let (code, v, text) = s3cmd(&env, &s3, &["validate", "--json"]);
    assert_eq!(code, 1, "{text}");
    let kinds: Vec<&str> = v["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"blob_store_unreachable"), "{v}");
}
