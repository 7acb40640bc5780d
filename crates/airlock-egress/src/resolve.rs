//! Name resolution done by the proxy itself (NET-5): never by the sandbox,
//! never through a search list. The pipeline asks exactly once per request
//! and connects only to the addresses it checked, so DNS rebinding cannot
//! redirect a connection.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

/// Why a lookup failed; each maps to a reason code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    #[error("name does not exist")]
    NxDomain,
    #[error("lookup timed out")]
    Timeout,
    #[error("lookup failed: {0}")]
    Other(String),
}

impl ResolveError {
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NxDomain => "dns_nxdomain",
            Self::Timeout => "dns_timeout",
            Self::Other(_) => "dns_error",
        }
    }
}

/// One scripted answer.
pub type Answer = Result<Vec<IpAddr>, ResolveError>;

pub type LookupFuture<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<IpAddr>, ResolveError>> + Send + 'a>>;

/// A resolver the proxy can ask.
pub trait Resolve: Send + Sync + std::fmt::Debug {
    /// Resolves a validated, absolute name (no search list is applied).
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a>;
}

/// The system's recursive servers (from `/etc/resolv.conf`), queried with
/// the name made absolute, no search domains, no hosts file.
#[derive(Debug)]
pub struct SystemResolver {
    inner: hickory_resolver::TokioResolver,
}

impl SystemResolver {
    pub fn new() -> Result<Self, ResolveError> {
        let mut builder = hickory_resolver::Resolver::builder_tokio()
            .map_err(|e| ResolveError::Other(e.to_string()))?;
        let opts = builder.options_mut();
        opts.ndots = 0;
        opts.timeout = Duration::from_secs(3);
        opts.attempts = 2;
        opts.use_hosts_file = hickory_resolver::config::ResolveHosts::Never;
        let inner = builder
            .build()
            .map_err(|e| ResolveError::Other(e.to_string()))?;
        Ok(Self { inner })
    }
}

impl Resolve for SystemResolver {
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a> {
        Box::pin(async move {
            let absolute = format!("{name}.");
            match self.inner.lookup_ip(absolute.as_str()).await {
                Ok(l) => {
                    let v: Vec<IpAddr> = l.iter().collect();
                    if v.is_empty() {
                        Err(ResolveError::NxDomain)
                    } else {
                        Ok(v)
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    if e.is_nx_domain() || e.is_no_records_found() {
                        Err(ResolveError::NxDomain)
                    } else if text.to_ascii_lowercase().contains("timed out")
                        || text.contains("timeout")
                    {
                        Err(ResolveError::Timeout)
                    } else {
                        Err(ResolveError::Other(text))
                    }
                }
            }
        })
    }
}

/// A resolver with scripted answers, for tests and for `--no-resolve`
/// checks. Each name can have a sequence of answers (to script rebinding:
/// the first call gets the first answer, and so on); every call is recorded.
#[derive(Debug, Default)]
pub struct ScriptedResolver {
    answers: Mutex<HashMap<String, Vec<Answer>>>,
    calls: Mutex<Vec<String>>,
}

impl ScriptedResolver {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scripts the next answer for `name`.
    pub fn answer(self, name: &str, answer: Result<Vec<IpAddr>, ResolveError>) -> Self {
        if let Ok(mut a) = self.answers.lock() {
            a.entry(name.to_string()).or_default().push(answer);
        }
        self
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Resolve for ScriptedResolver {
    fn lookup<'a>(&'a self, name: &'a str) -> LookupFuture<'a> {
        Box::pin(async move {
            if let Ok(mut c) = self.calls.lock() {
                c.push(name.to_string());
            }
            let mut answers = self
                .answers
                .lock()
                .map_err(|_| ResolveError::Other("poisoned".into()))?;
            match answers.get_mut(name) {
                Some(list) if list.len() > 1 => list.remove(0),
                Some(list) => list.first().cloned().unwrap_or(Err(ResolveError::NxDomain)),
                None => Err(ResolveError::NxDomain),
            }
        })
    }
}
