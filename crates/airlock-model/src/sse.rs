//! A server-sent events decoder (the WHATWG event-stream format) fed with
//! arbitrary byte chunks.
//!
//! Why not a crate: what we need beyond parsing is a bound. The pending
//! event and the partial line are limited to `max_event_bytes`, so a peer
//! cannot make this buffer grow past it; the common crates buffer without
//! limit. Bytes are only ever sliced at line ends, so a multi-byte
//! character split across chunks is reassembled before decoding.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field (empty when absent: "message").
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Why a stream cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("an event is larger than {0} bytes")]
    TooLarge(usize),
    #[error("the event stream is not UTF-8")]
    NotUtf8,
}

/// Incremental decoder.
#[derive(Debug)]
pub struct SseDecoder {
    line: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    /// A `\r` ended the last chunk: a `\n` at the start of the next belongs to it.
    after_cr: bool,
    started: bool,
    max: usize,
}

impl SseDecoder {
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            line: Vec::new(),
            event: String::new(),
            data: String::new(),
            has_data: false,
            after_cr: false,
            started: false,
            max: max_event_bytes,
        }
    }

    /// Feeds bytes; answers the events completed by them.
    pub fn push(&mut self, mut bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        if !self.started && !bytes.is_empty() {
            self.started = true;
            // A byte-order mark may start the stream (only there).
            if let Some(rest) = bytes.strip_prefix(&[0xEF, 0xBB, 0xBF]) {
                bytes = rest;
            }
        }
        while !bytes.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if bytes[0] == b'\n' {
                    bytes = &bytes[1..];
                    continue;
                }
            }
            // Copy up to the next line end in one piece.
            let end = bytes.iter().position(|&b| b == b'\n' || b == b'\r');
            let (segment, rest) = match end {
                Some(i) => (&bytes[..i], Some((bytes[i], &bytes[i + 1..]))),
                None => (bytes, None),
            };
            if self.line.len() + segment.len() + self.data.len() > self.max {
                return Err(SseError::TooLarge(self.max));
            }
            self.line.extend_from_slice(segment);
            match rest {
                Some((terminator, rest)) => {
                    self.after_cr = terminator == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(ev) = self.line_done(&line)? {
                        out.push(ev);
                    }
                    bytes = rest;
                }
                None => bytes = &[],
            }
        }
        Ok(out)
    }

    /// The end of the stream: an event whose lines all ended but whose
    /// blank line never came is dispatched; a partial last line is dropped
    /// (it was cut).
    pub fn finish(&mut self) -> Option<SseEvent> {
        self.line.clear();
        self.dispatch()
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<SseEvent>, SseError> {
        if line.is_empty() {
            return Ok(self.dispatch());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::NotUtf8)?;
        let (field, value) = match line.find(':') {
            Some(0) => return Ok(None), // comment
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (line, ""),
        };
        match field {
            "event" => self.event = value.to_string(),
            "data" => {
                if self.data.len() + value.len() + 1 > self.max {
                    return Err(SseError::TooLarge(self.max));
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` steer browser reconnection; a model stream
            // is never resumed, so they are ignored like unknown fields.
            _ => {}
        }
        Ok(None)
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        Some(SseEvent { event, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new(1024);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(d.push(c).expect("decodes"));
        }
        out.extend(d.finish());
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    type Case = (&'static str, &'static [&'static [u8]], Vec<SseEvent>);

    #[test]
    fn agt_2_sse_framing_table() {
        let cases: &[Case] = &[
            ("plain", &[b"data: a\n\n"], vec![ev("", "a")]),
            (
                "named, crlf",
                &[b"event: x\r\ndata: {\"k\":1}\r\n\r\n"],
                vec![ev("x", "{\"k\":1}")],
            ),
            (
                "cr only",
                &[b"data: a\r\rdata: b\r\r"],
                vec![ev("", "a"), ev("", "b")],
            ),
            (
                "crlf split across chunks",
                &[b"data: a\r", b"\n\r", b"\ndata: b\n\n"],
                vec![ev("", "a"), ev("", "b")],
            ),
            (
                "multi-line data",
                &[b"data: a\ndata: b\n\n"],
                vec![ev("", "a\nb")],
            ),
            ("no space after colon", &[b"data:a\n\n"], vec![ev("", "a")]),
            (
                "comment and ping",
                &[b": keepalive\n\ndata: a\n\n"],
                vec![ev("", "a")],
            ),
            ("event without data", &[b"event: ping\n\n"], vec![]),
            (
                "byte by byte",
                &[b"d", b"a", b"t", b"a", b":", b" ", b"z", b"\n", b"\n"],
                vec![ev("", "z")],
            ),
            ("bom", &[b"\xEF\xBB\xBFdata: a\n\n"], vec![ev("", "a")]),
            (
                "utf-8 split inside a character",
                &[b"data: \xC3", b"\xA9\n\n"],
                vec![ev("", "é")],
            ),
            (
                "missing final blank line",
                &[b"data: a\n"],
                vec![ev("", "a")],
            ),
            (
                "cut last line is dropped",
                &[b"data: a\n\ndata: {\"partial"],
                vec![ev("", "a")],
            ),
        ];
        for (name, chunks, want) in cases {
            assert_eq!(&decode_all(chunks), want, "{name}");
        }
    }

    #[test]
    fn agt_2_sse_event_size_is_bounded() {
        let mut d = SseDecoder::new(16);
        assert_eq!(d.push(&[b'x'; 100]), Err(SseError::TooLarge(16)));
        let mut d = SseDecoder::new(16);
        let e = d.push(b"data: 0123456789\ndata: 0123456789\n");
        assert_eq!(e, Err(SseError::TooLarge(16)));
        // Positive control: the same decoder limit passes a small event.
        let mut d = SseDecoder::new(16);
        assert_eq!(d.push(b"data: 0123\n\n"), Ok(vec![ev("", "0123")]));
        let mut d = SseDecoder::new(64);
        assert_eq!(d.push(b"data: \xFF\n\n"), Err(SseError::NotUtf8));
    }

    proptest::proptest! {
        #[test]
        fn agt_2_sse_never_panics_and_chunking_does_not_matter(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400),
            split in 0usize..400,
        ) {
            // A byte-order mark is recognised only whole in the first chunk.
            proptest::prop_assume!(!bytes.starts_with(&[0xEF]));
            let mut whole = SseDecoder::new(128);
            let a = whole.push(&bytes).map(|mut v| { v.extend(whole.finish()); v });
            let cut = split.min(bytes.len());
            let mut parts = SseDecoder::new(128);
            let b = parts.push(&bytes[..cut]).and_then(|mut v| {
                v.extend(parts.push(&bytes[cut..])?);
                v.extend(parts.finish());
                Ok(v)
            });
            if let (Ok(a), Ok(b)) = (&a, &b) {
                proptest::prop_assert_eq!(a, b);
            }
        }
    }
}
