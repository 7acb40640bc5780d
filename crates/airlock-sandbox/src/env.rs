//! The sandbox environment: an allowlist, never an inherited environment (SBX-5).
//!
//! The workload's environment is built from nothing: the fixed variables
//! below, run metadata under `AIRLOCK_*` set by the platform, proxy
//! variables set by the egress layer, plus values the caller declared. A
//! declared name on the denylist is refused even when explicitly asked for:
//! these variables change what a loader, interpreter or shell executes before
//! the workload's own code runs.

use std::collections::BTreeMap;

/// Names the platform sets itself; a declared value may not override them.
pub const PLATFORM_SET: &[&str] = &[
    "HOME",
    "TMPDIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
];

/// Exact names that are never delivered: each one makes a loader,
/// interpreter, shell or resolver run or load something of the caller's
/// choosing before the workload's own code.
pub const DENIED_NAMES: &[&str] = &[
    "GCONV_PATH",
    "GLIBC_TUNABLES",
    "HOSTALIASES",
    "LOCALDOMAIN",
    "RES_OPTIONS",
    "NLSPATH",
    "MALLOC_CHECK_",
    "MALLOC_PERTURB_",
    "BASH_ENV",
    "ENV",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "PROMPT_COMMAND",
    "IFS",
    "CDPATH",
    "NODE_OPTIONS",
    "NODE_PATH",
    "NODE_REPL_EXTERNAL_MODULE",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "PERL5DB",
    "RUBYOPT",
    "RUBYLIB",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "CLASSPATH",
    "OPENSSL_CONF",
    "OPENSSL_ENGINES",
    "SSLKEYLOGFILE",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "MANPAGER",
    "BROWSER",
    "LESSOPEN",
    "LESSCLOSE",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "PHPRC",
    "PHP_INI_SCAN_DIR",
    "RUSTC",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTDOC",
    "CARGO_BUILD_RUSTC_WRAPPER",
];

/// Prefixes that are never delivered (loader, interpreter, debugger and
/// platform namespaces).
pub const DENIED_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "PYTHON",
    "BASH_FUNC_",
    "AIRLOCK_",
    "LUA_",
    "TCL",
    "GIT_",
    "NPM_CONFIG_",
    "YARN_",
];

/// Benign interpreter switches that a denied prefix would otherwise catch.
/// Each only changes buffering, encoding or hashing, never what gets loaded.
pub const ALLOWED_EXCEPTIONS: &[&str] = &[
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONIOENCODING",
    "PYTHONHASHSEED",
    "PYTHONUTF8",
];

/// Variables inherited from the caller when present and well formed.
pub const PASSED_THROUGH: &[&str] = &["LANG", "TZ"];

/// The `PATH` every sandbox starts with. Only the resolver in the trusted
/// process searches the caller's `PATH` (SBX-2); inside, this fixed list.
pub const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// Largest declared value, in bytes.
pub const MAX_VALUE_BYTES: usize = 32 * 1024;
/// Most declared variables.
pub const MAX_DECLARED: usize = 256;

/// Why a declared variable was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    #[error("environment name {0:?} is not a valid name (letters, digits, underscore)")]
    BadName(String),
    #[error(
        "environment variable {0} is on the loader/interpreter denylist and is never delivered"
    )]
    Denied(String),
    #[error("environment variable {0} is set by the platform and cannot be declared")]
    PlatformSet(String),
    #[error("environment value for {0} contains a NUL byte")]
    Nul(String),
    #[error("environment value for {0} is larger than {MAX_VALUE_BYTES} bytes")]
    TooLarge(String),
    #[error("more than {MAX_DECLARED} environment variables declared")]
    TooMany,
    #[error("environment variable {0} declared twice")]
    Duplicate(String),
}

/// Checks one declared name against the syntax rule and both lists.
pub fn check_name(name: &str) -> Result<(), EnvError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || name.len() > 128 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(EnvError::BadName(name.to_string()));
    }
    if is_denied(name) {
        return Err(EnvError::Denied(name.to_string()));
    }
    if PLATFORM_SET.contains(&name) {
        return Err(EnvError::PlatformSet(name.to_string()));
    }
    Ok(())
}

/// True when a name is on the denylist (exact or by prefix; the comparison
/// is case-insensitive because some loaders accept either spelling).
pub fn is_denied(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if ALLOWED_EXCEPTIONS.contains(&name) {
        return false;
    }
    DENIED_NAMES.iter().any(|d| upper == *d) || DENIED_PREFIXES.iter().any(|p| upper.starts_with(p))
}

/// Validates the declared variables and returns them as a map.
pub fn parse_declared(declared: &[(String, String)]) -> Result<BTreeMap<String, String>, EnvError> {
    if declared.len() > MAX_DECLARED {
        return Err(EnvError::TooMany);
    }
    let mut out = BTreeMap::new();
    for (name, value) in declared {
        check_name(name)?;
        if value.contains('\0') {
            return Err(EnvError::Nul(name.clone()));
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(EnvError::TooLarge(name.clone()));
        }
        if out.insert(name.clone(), value.clone()).is_some() {
            return Err(EnvError::Duplicate(name.clone()));
        }
    }
    Ok(out)
}

/// Builds the complete environment of a workload. `platform` holds values
/// the platform itself sets (`AIRLOCK_*` metadata, proxy variables); they
/// bypass the denylist because they never come from the caller.
pub fn build(
    declared: &BTreeMap<String, String>,
    platform: &BTreeMap<String, String>,
    caller: impl Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("PATH".to_string(), SANDBOX_PATH.to_string());
    env.insert("HOME".to_string(), "/tmp".to_string());
    env.insert("TMPDIR".to_string(), "/tmp".to_string());
    env.insert("LANG".to_string(), "C.UTF-8".to_string());
    for name in PASSED_THROUGH {
        if let Some(v) = caller(name) {
            let safe = v.len() <= 64
                && v.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-/+:@".contains(c));
            if safe {
                env.insert((*name).to_string(), v);
            }
        }
    }
    for (k, v) in declared {
        env.insert(k.clone(), v.clone());
    }
    for (k, v) in platform {
        env.insert(k.clone(), v.clone());
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sbx_5_every_denied_name_is_refused_even_when_declared() {
        for name in DENIED_NAMES {
            assert_eq!(
                check_name(name),
                Err(EnvError::Denied((*name).to_string())),
                "{name}"
            );
        }
        for prefix in DENIED_PREFIXES {
            let name = format!("{prefix}X");
            assert!(
                matches!(check_name(&name), Err(EnvError::Denied(_))),
                "{name}"
            );
        }
    }

    #[test]
    fn sbx_5_loader_variables_in_any_case_are_refused() {
        for name in ["ld_preload", "Ld_Audit", "pythonpath", "node_options"] {
            assert!(
                matches!(check_name(name), Err(EnvError::Denied(_))),
                "{name}"
            );
        }
    }

    #[test]
    fn sbx_5_ordinary_names_pass_positive_control() {
        for name in ["FOO", "MY_SETTING", "_x", "LANGUAGE2", "PYTHONUNBUFFERED"] {
            assert_eq!(check_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn sbx_5_bad_names_and_values_are_refused() {
        for name in ["", "1ABC", "A-B", "A B", "A=B", "Ä"] {
            assert!(
                matches!(check_name(name), Err(EnvError::BadName(_))),
                "{name:?}"
            );
        }
        assert_eq!(
            parse_declared(&[("A".into(), "x\0y".into())]),
            Err(EnvError::Nul("A".into()))
        );
        assert_eq!(
            parse_declared(&[("A".into(), "x".repeat(MAX_VALUE_BYTES + 1))]),
            Err(EnvError::TooLarge("A".into()))
        );
        assert_eq!(
            parse_declared(&[("A".into(), "1".into()), ("A".into(), "2".into())]),
            Err(EnvError::Duplicate("A".into()))
        );
        assert_eq!(
            parse_declared(&[("HOME".into(), "/root".into())]),
            Err(EnvError::PlatformSet("HOME".into()))
        );
    }

    #[test]
    fn sbx_5_built_environment_is_the_allowlist_only() {
        let declared = parse_declared(&[("GREETING".into(), "hi".into())]).unwrap_or_default();
        let env = build(&declared, &BTreeMap::new(), |name| match name {
            "TZ" => Some("Europe/Paris".into()),
            "LANG" => Some("$(evil)".into()),
            _ => Some("leak".into()),
        });
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        assert_eq!(keys, ["GREETING", "HOME", "LANG", "PATH", "TMPDIR", "TZ"]);
        assert_eq!(env["LANG"], "C.UTF-8", "unsafe inherited value is dropped");
        assert_eq!(env["TZ"], "Europe/Paris");
    }
}
