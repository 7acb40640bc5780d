//! Narrow "always allow similar" rules for agent commands (AGT-5), pure.
//!
//! An argv-prefix rule lets a later `run_command` skip the approval step
//! when its argv starts with the rule's prefix — and nothing more: the
//! command still runs in a fresh sandbox with the worker's limits and
//! egress, so a rule can never widen a sandbox, egress or platform limit.
//!
//! What is refused, as data ([`INTERPRETERS`], [`EXEC_FLAGS`]): a prefix
//! that is empty, whose program is an interpreter or a program that runs
//! another (`sh`, `python3`, `env`, `xargs`, `sudo`, …), or that contains
//! an inline-code flag (`-c`, `-e`, `--eval`, …). A compound shell command
//! (`sh -c 'a && b | c'`) is covered only when it parses into plain words
//! joined by `&&`, `||`, `;`, `|` or newlines and *every* segment is
//! covered; anything the parser does not fully understand — substitution,
//! redirection, globs, variables, subshells, unbalanced quotes — is not
//! covered and needs a person.
//!
//! Must not: do I/O, or ever answer "covered" for something it did not
//! parse completely (the safe answer is always "ask").

/// Programs that run code they are given (or other programs): never the
/// first element of a rule, and never covered in a segment's first word.
pub const INTERPRETERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "fish",
    "csh",
    "tcsh",
    "ash",
    "busybox",
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "node",
    "nodejs",
    "deno",
    "bun",
    "perl",
    "ruby",
    "php",
    "lua",
    "luajit",
    "tclsh",
    "wish",
    "R",
    "Rscript",
    "julia",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "sed",
    "env",
    "xargs",
    "exec",
    "eval",
    "command",
    "builtin",
    "nohup",
    "nice",
    "timeout",
    "time",
    "sudo",
    "su",
    "doas",
    "runuser",
    "setpriv",
    "chroot",
    "unshare",
    "nsenter",
    "strace",
    "ltrace",
    "gdb",
    "watch",
    "script",
    "expect",
    "ssh",
    "find",
    "make",
    "osascript",
];

/// Flags that carry inline code or commands to run: a rule may not
/// contain one, and a covered command may not carry one after the prefix.
pub const EXEC_FLAGS: &[&str] = &[
    "-c",
    "-e",
    "--eval",
    "--exec",
    "-exec",
    "-execdir",
    "--command",
    "--init-file",
    "--rcfile",
];

/// The longest rule and the longest element, as in the protocol.
pub const MAX_PREFIX_ARGS: usize = airlock_protocol::approvals::MAX_PREFIX_ARGS;
pub const MAX_ARG_CHARS: usize = 256;

/// Why a prefix cannot be a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("an argv-prefix rule needs 1 to {MAX_PREFIX_ARGS} elements")]
    Size,
    #[error(
        "a rule element is empty, longer than {MAX_ARG_CHARS} characters or holds a control character"
    )]
    Element,
    #[error("{0:?} runs code it is given; a rule for it would allow anything")]
    Interpreter(String),
    #[error("{0:?} passes inline code or a command; a rule with it would allow anything")]
    ExecFlag(String),
}

/// The program name a path names (`/usr/bin/python3.12` → `python3.12`).
fn program(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Whether `word` (as a program) is an interpreter: its base name, with a
/// version suffix (`python3.12`, `perl5.36`) counted as the same program.
pub fn is_interpreter(word: &str) -> bool {
    let name = program(word);
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS
        .iter()
        .any(|i| *i == name || (!stem.is_empty() && *i == stem))
}

/// Whether `arg` is an inline-code flag, alone or glued (`-c…`, `-ec`,
/// `--eval=…`).
pub fn is_exec_flag(arg: &str) -> bool {
    if EXEC_FLAGS
        .iter()
        .any(|f| arg == *f || (f.starts_with("--") && arg.starts_with(&format!("{f}="))))
    {
        return true;
    }
    // Short options bundled: `-ec`, `-xc`, `-cfoo`.
    if let Some(flags) = arg.strip_prefix('-')
        && !flags.starts_with('-')
        && !flags.is_empty()
    {
        return flags.contains('c') || flags.contains('e');
    }
    false
}

/// Checks a prefix for a rule.
pub fn check_prefix(prefix: &[String]) -> Result<(), RuleError> {
    if prefix.is_empty() || prefix.len() > MAX_PREFIX_ARGS {
        return Err(RuleError::Size);
    }
    for p in prefix {
        if p.is_empty() || p.chars().count() > MAX_ARG_CHARS || p.chars().any(char::is_control) {
            return Err(RuleError::Element);
        }
    }
    if is_interpreter(&prefix[0]) {
        return Err(RuleError::Interpreter(prefix[0].clone()));
    }
    if let Some(f) = prefix.iter().find(|a| is_exec_flag(a)) {
        return Err(RuleError::ExecFlag(f.clone()));
    }
    Ok(())
}

/// Whether one plain command (already split into words) is covered by one
/// of the prefixes: it starts with the prefix, its program is no
/// interpreter and nothing after the prefix is an inline-code flag.
fn simple_covered(words: &[String], prefixes: &[Vec<String>]) -> bool {
    let Some(first) = words.first() else {
        return false;
    };
    if is_interpreter(first) {
        return false;
    }
    prefixes.iter().any(|p| {
        check_prefix(p).is_ok()
            && words.len() >= p.len()
            && words[..p.len()] == p[..]
            && !words[p.len()..].iter().any(|a| is_exec_flag(a))
    })
}

/// Whether an argv is covered by the prefixes. `sh|bash|dash|zsh -c
/// SCRIPT` (also `-lc`, `-ec`) is split into segments, each of which must
/// be covered; any other argv is judged as one command.
pub fn argv_covered(argv: &[String], prefixes: &[Vec<String>]) -> bool {
    if prefixes.is_empty() || argv.is_empty() {
        return false;
    }
    let shell = ["sh", "bash", "dash", "zsh"].contains(&program(&argv[0]));
    if shell {
        let script = match argv {
            [_, flag, script] if matches!(flag.as_str(), "-c" | "-lc" | "-ec" | "-ce") => script,
            _ => return false,
        };
        let Some(segments) = split_script(script) else {
            return false;
        };
        return !segments.is_empty() && segments.iter().all(|s| simple_covered(s, prefixes));
    }
    simple_covered(argv, prefixes)
}

/// Splits a shell script into commands of plain words joined by `&&`,
/// `||`, `;`, `|` or newlines. `None` for anything it does not fully
/// understand (the caller then asks a person).
pub fn split_script(script: &str) -> Option<Vec<Vec<String>>> {
    let mut segments: Vec<Vec<String>> = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    let end_segment = |words: &mut Vec<String>, segments: &mut Vec<Vec<String>>| -> bool {
        if words.is_empty() {
            return false;
        }
        segments.push(std::mem::take(words));
        true
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\n' | ';' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                // Empty lines are fine; an empty `;` command is not.
                if !end_segment(&mut words, &mut segments) && c == ';' {
                    return None;
                }
            }
            '&' | '|' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
                if c == '&' && chars.peek() != Some(&'&') {
                    return None; // background job
                }
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                if !end_segment(&mut words, &mut segments) {
                    return None;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(ch) => word.push(ch),
                        None => return None,
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(ch @ ('"' | '\\')) => word.push(ch),
                            _ => return None,
                        },
                        Some('$' | '`') | None => return None,
                        Some(ch) => word.push(ch),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(ch) if !ch.is_control() => {
                    in_word = true;
                    word.push(ch);
                }
                _ => return None,
            },
            // Expansion, substitution, redirection, grouping, globs,
            // history, comments, home and brace expansion: not plain words.
            '$' | '`' | '<' | '>' | '(' | ')' | '{' | '}' | '*' | '?' | '[' | ']' | '!' | '#'
            | '~' => return None,
            ch if ch.is_control() => return None,
            ch => {
                in_word = true;
                word.push(ch);
            }
        }
        // An assignment before the command (`A=1 cmd`) sets a variable.
        if words.is_empty() && in_word && word.contains('=') {
            return None;
        }
    }
    if in_word {
        words.push(word);
    }
    end_segment(&mut words, &mut segments);
    Some(segments)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn v(words: &[&str]) -> Vec<String> {
        words.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn agt_5_rules_for_interpreters_and_inline_code_are_refused() {
        let refused: &[&[&str]] = &[
            &[],
            &["sh"],
            &["/bin/bash", "deploy.sh"],
            &["python3"],
            &["/usr/bin/python3.12", "tool.py"],
            &["node", "x.js"],
            &["perl"],
            &["ruby"],
            &["env", "ls"],
            &["xargs", "rm"],
            &["sudo", "ls"],
            &["find", "."],
            &["git", "-c", "core.sshCommand=evil"],
            &["npm", "exec", "-c", "x"],
            &["tool", "--eval=1"],
            &["tool", "-ec"],
            &["tool", ""],
            &["tool", "a\u{1b}b"],
        ];
        for p in refused {
            assert!(check_prefix(&v(p)).is_err(), "{p:?} must be refused");
        }
        let long = vec!["a".to_string(); MAX_PREFIX_ARGS + 1];
        assert_eq!(check_prefix(&long), Err(RuleError::Size));
        // Positive controls: narrow rules pass.
        for p in [
            &["git", "status"][..],
            &["ls"],
            &["cargo", "test", "-p"],
            &["/usr/bin/make-report"],
        ] {
            assert_eq!(check_prefix(&v(p)), Ok(()), "{p:?}");
        }
    }

    #[test]
    fn agt_5_a_rule_covers_only_commands_that_start_with_it() {
        let rules = vec![v(&["git", "status"]), v(&["ls"])];
        let covered: &[&[&str]] = &[
            &["git", "status"],
            &["git", "status", "--short"],
            &["ls"],
            &["ls", "-la", "/tmp"],
            &["sh", "-c", "git status && ls -la"],
            &["bash", "-lc", "ls; git status --porcelain\nls | ls"],
            &["sh", "-c", "ls 'a b' \"c d\" e\\ f"],
        ];
        for c in covered {
            assert!(argv_covered(&v(c), &rules), "{c:?} should be covered");
        }
        let not_covered: &[&[&str]] = &[
            &["git", "push"],
            &["git"],
            &["gitx", "status"],
            &["rm", "-rf", "/"],
            &["ls", "-c", "x"],
            &["git", "status", "-c", "x"],
            // Compound commands: every segment must be covered.
            &["sh", "-c", "ls && rm -rf /"],
            &["sh", "-c", "git status; curl evil"],
            &["sh", "-c", "ls | sh"],
            &["sh", "-c", "ls | python3 -c 'x'"],
            // What the splitter does not fully understand.
            &["sh", "-c", "ls $(rm -rf /)"],
            &["sh", "-c", "ls `id`"],
            &["sh", "-c", "ls > /etc/passwd"],
            &["sh", "-c", "ls < x"],
            &["sh", "-c", "ls &"],
            &["sh", "-c", "ls & rm x"],
            &["sh", "-c", "(ls)"],
            &["sh", "-c", "{ ls; }"],
            &["sh", "-c", "ls *"],
            &["sh", "-c", "ls ~"],
            &["sh", "-c", "ls $HOME"],
            &["sh", "-c", "ls \"$HOME\""],
            &["sh", "-c", "PATH=/x ls"],
            &["sh", "-c", "ls 'unterminated"],
            &["sh", "-c", "ls; ;"],
            &["sh", "-c", "ls # comment"],
            &["sh", "-c", ""],
            &["sh", "ls"],
            &["sh", "-c", "ls", "extra"],
            &["bash", "-x", "ls"],
            &["python3", "-c", "ls"],
            &[],
        ];
        for c in not_covered {
            assert!(!argv_covered(&v(c), &rules), "{c:?} must not be covered");
        }
        // No rule covers nothing; an invalid stored rule covers nothing.
        assert!(!argv_covered(&v(&["ls"]), &[]));
        assert!(!argv_covered(&v(&["sh", "-c", "ls"]), &[v(&["sh"])]));
    }

    #[test]
    fn agt_5_scripts_split_into_plain_word_segments() {
        assert_eq!(
            split_script("a b && c 'd e' || f\ng | h"),
            Some(vec![
                v(&["a", "b"]),
                v(&["c", "d e"]),
                v(&["f"]),
                v(&["g"]),
                v(&["h"])
            ])
        );
        assert_eq!(split_script("a=b"), None);
        assert_eq!(split_script("cmd a=b"), Some(vec![v(&["cmd", "a=b"])]));
        assert_eq!(split_script("\n\nls\n"), Some(vec![v(&["ls"])]));
        assert_eq!(split_script("&& ls"), None);
    }
}
