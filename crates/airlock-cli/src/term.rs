//! Showing a workload's output on the operator's terminal (SBX-7).
//!
//! A sandboxed workload is untrusted, and its stdout and stderr reach the terminal of whoever
//! ran `airlock sandbox exec`. Raw, its bytes could act on that terminal: set the window title,
//! write the clipboard (OSC 52), ask the terminal to answer a query into the operator's input
//! (device status, DECRQSS), redraw lines to hide what ran (`\r`, cursor moves), or reorder text
//! (bidirectional overrides). So when a stream is a terminal, [`for_terminal`] shows every such
//! character as a visible escape instead: text, newlines and tabs pass unchanged, valid UTF-8
//! stays readable. Pipes and files get the bytes as written; `--raw` opts out.
//!
//! Backslashes are not escaped: the output is for reading, not a reversible encoding (`--json`
//! and `--raw` give the exact bytes).

/// `bytes` with every character that could act on a terminal shown as an escape:
/// C0 controls except `\n` and `\t` (and `\r` directly before `\n`), DEL and bytes that are not
/// UTF-8 as `\xNN`; C1 controls and bidirectional formatting characters as `\u{NNNN}`.
pub fn for_terminal(bytes: &[u8]) -> Vec<u8> {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        let mut chars = chunk.valid().chars().peekable();
        while let Some(c) = chars.next() {
            // Writing to a String cannot fail.
            let _ = match c {
                '\n' | '\t' => {
                    out.push(c);
                    Ok(())
                }
                '\r' if chars.peek() == Some(&'\n') => {
                    out.push(c);
                    Ok(())
                }
                c if c.is_ascii_control() => write!(out, "\\x{:02x}", c as u32),
                '\u{80}'..='\u{9f}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}' => write!(out, "\\u{{{:04x}}}", c as u32),
                c => {
                    out.push(c);
                    Ok(())
                }
            };
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out.into_bytes()
}

/// A secret typed by a person: on a terminal, a prompt on stderr and the
/// line read with echo off (restored afterwards, also on error); from a
/// pipe or file, the first line of stdin as is, no prompt (scripts).
pub fn read_secret(prompt: &str) -> Result<String, String> {
    use std::io::{BufRead, IsTerminal, Write};
    use std::os::fd::AsFd;

    use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
    let stdin = std::io::stdin();
    let read = || {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| format!("stdin: {e}"))?;
        Ok::<_, String>(line.trim_end_matches(['\r', '\n']).to_string())
    };
    if !stdin.is_terminal() {
        return read();
    }
    let fd = stdin.as_fd();
    let old = tcgetattr(fd).map_err(|e| format!("terminal: {e}"))?;
    let mut quiet = old.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    // The Enter key still moves to the next line.
    quiet.local_flags.insert(LocalFlags::ECHONL);
    // Echo off before the prompt shows: whatever is typed once the prompt
    // is visible is never echoed.
    tcsetattr(fd, SetArg::TCSAFLUSH, &quiet).map_err(|e| format!("terminal: {e}"))?;
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "{prompt}");
    let _ = err.flush();
    let line = read();
    let restored = tcsetattr(fd, SetArg::TCSAFLUSH, &old);
    let line = line?;
    restored.map_err(|e| format!("terminal: {e}"))?;
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::for_terminal;

    fn shown(bytes: &[u8]) -> String {
        String::from_utf8(for_terminal(bytes)).unwrap_or_default()
    }

    #[test]
    fn sbx_7_terminal_controls_are_shown_as_escapes() {
        let table: &[(&str, &[u8], &str)] = &[
            ("window title", b"\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07"),
            (
                "clipboard write",
                b"\x1b]52;c;ZWNobyBoaQ==\x1b\\",
                "\\x1b]52;c;ZWNobyBoaQ==\\x1b\\",
            ),
            ("device status query", b"\x1b[6n", "\\x1b[6n"),
            (
                "request status string",
                b"\x1bP$q m\x1b\\",
                "\\x1bP$q m\\x1b\\",
            ),
            (
                "cursor up and erase",
                b"ok\x1b[1A\x1b[2K",
                "ok\\x1b[1A\\x1b[2K",
            ),
            ("lone carriage return", b"safe\revil", "safe\\x0devil"),
            (
                "bell, backspace, NUL, DEL",
                b"\x07\x08\x00\x7f",
                "\\x07\\x08\\x00\\x7f",
            ),
            ("C1 CSI as UTF-8", "\u{9b}6n".as_bytes(), "\\u{009b}6n"),
            ("C1 CSI as a lone byte", b"\x9b6n", "\\x9b6n"),
            (
                "bidi override",
                "a\u{202e}b\u{2066}c".as_bytes(),
                "a\\u{202e}b\\u{2066}c",
            ),
            ("cut UTF-8", b"caf\xc3", "caf\\xc3"),
        ];
        for (what, input, want) in table {
            assert_eq!(shown(input), *want, "{what}");
            assert!(
                !for_terminal(input).iter().any(|&b| b == 0x1b || b == 0x9b),
                "{what}"
            );
        }
    }

    #[test]
    fn sbx_7_text_newlines_tabs_and_utf8_pass_unchanged() {
        for text in [
            "plain text\n",
            "col1\tcol2\r\nnext line\n",
            "héllo wörld, 日本語, emoji 🔒, math ∑\n",
            "back\\slash and \"quotes\"",
            "",
        ] {
            assert_eq!(shown(text.as_bytes()), text, "{text:?}");
        }
    }
}
