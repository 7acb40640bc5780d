//! Turning values into text for pages: times, durations, sizes, terminal
//! output with its escapes removed, JSON, and Markdown rendered with every
//! piece of raw HTML escaped. Templates escape what they print; these only
//! decide what the text is (except [`markdown`], whose output is HTML
//! built here from escaped text).

/// A Unix-millisecond time as `2026-12-04 08:30:12 UTC`.
pub fn time(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        Err(_) => ms.to_string(),
    }
}

/// The same time as an RFC 3339 string (for `<time datetime>`).
pub fn iso(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => t.to_string(),
        Err(_) => String::new(),
    }
}

/// An optional time, `—` when absent.
pub fn time_opt(ms: Option<i64>) -> String {
    ms.map(time).unwrap_or_else(|| "—".into())
}

/// A duration in milliseconds as `850 ms`, `12.4 s`, `3 min 20 s`, `2 h 5 min`.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if ms < 3_600_000 {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    } else {
        format!("{} h {} min", ms / 3_600_000, (ms % 3_600_000) / 60_000)
    }
}

/// How long something between two optional times took (or has taken, up
/// to `now`), `—` before it started.
pub fn took(start: Option<i64>, end: Option<i64>, now: i64) -> String {
    match start {
        Some(s) => duration(end.unwrap_or(now) - s),
        None => "—".into(),
    }
}

/// A byte count as `512 B`, `1.5 KiB`, `3.2 MiB`.
pub fn size(bytes: i64) -> String {
    let b = bytes.max(0) as f64;
    if b < 1024.0 {
        format!("{bytes} B")
    } else if b < 1024.0 * 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else if b < 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1} MiB", b / (1024.0 * 1024.0))
    } else {
        format!("{:.1} GiB", b / (1024.0 * 1024.0 * 1024.0))
    }
}

/// Terminal output as plain text: ANSI escape sequences (CSI, OSC, and
/// two-byte escapes) and other control characters except newline and tab
/// are removed, so a workload cannot restyle, retitle or hide text on the
/// page (or in a terminal a person later pastes it into).
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                // CSI: parameters and intermediates up to a final byte.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC, DCS, SOS, PM, APC: up to BEL or ST (ESC \).
                Some(']' | 'P' | 'X' | '^' | '_') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                _ => {}
            },
            // The 8-bit CSI.
            '\u{9b}' => {
                for c in chars.by_ref() {
                    if ('\u{40}'..='\u{7e}').contains(&c) {
                        break;
                    }
                }
            }
            '\n' | '\t' => out.push(c),
            '\r' => {}
            c if c.is_control() => {}
            // Bidirectional overrides could reorder what a person reads.
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {}
            c => out.push(c),
        }
    }
    out
}

/// JSON, indented.
pub fn json(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A scalar JSON value as a person reads it (strings without quotes).
pub fn scalar(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// At most `max` characters of `s`, with `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// Markdown as HTML that is safe to put in a page: raw HTML (blocks and
/// inline) is shown as text, links and images keep only `http`, `https`,
/// `mailto` and same-page targets, and images are shown as their text
/// (the page's policy would refuse other origins anyway).
pub fn markdown(src: &str) -> String {
    use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};
    let safe_url = |u: &CowStr| {
        let l = u.trim().to_ascii_lowercase();
        l.starts_with("http://")
            || l.starts_with("https://")
            || l.starts_with("mailto:")
            || l.starts_with('#')
    };
    let events = Parser::new_ext(src, Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH)
        .filter_map(|e| match e {
            Event::Html(t) | Event::InlineHtml(t) => Some(Event::Text(t)),
            // An image's alt text stays, as text.
            Event::Start(Tag::Image { .. }) | Event::End(TagEnd::Image) => None,
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            }) => {
                let dest_url = if safe_url(&dest_url) {
                    dest_url
                } else {
                    CowStr::Borrowed("#")
                };
                Some(Event::Start(Tag::Link {
                    link_type,
                    dest_url,
                    title,
                    id,
                }))
            }
            e => Some(e),
        })
        .collect::<Vec<_>>();
    let mut out = String::new();
    html::push_html(&mut out, events.into_iter());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_escapes_are_removed_and_text_kept() {
        let s = "\u{1b}[31mred\u{1b}[0m \u{1b}]0;title\u{7}ok\u{1b}]8;;http://x\u{1b}\\link\r\n\u{9b}2Jend\u{202e}x\u{7}";
        assert_eq!(strip_ansi(s), "red oklink\nendx");
    }

    #[test]
    fn markdown_never_lets_html_or_script_urls_through() {
        let html = markdown(
            "# T\n\n<script>alert(1)</script>\n\n[x](javascript:alert(1)) <b onmouseover=x>b</b> ![i](http://e/i.png)\n\n[ok](https://example.com)",
        );
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<b "), "{html}");
        assert!(!html.contains("javascript:"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains(r#"href="https://example.com""#), "{html}");
        assert!(!html.contains("<img"), "{html}");
    }

    #[test]
    fn times_and_sizes_read_well() {
        assert_eq!(time(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(duration(850), "850 ms");
        assert_eq!(duration(12_400), "12.4 s");
        assert_eq!(duration(200_000), "3 min 20 s");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(clip("abcdef", 3), "abc…");
    }
}
