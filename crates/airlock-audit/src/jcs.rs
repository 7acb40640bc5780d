//! RFC 8785 JSON Canonicalization Scheme (JCS) over [`serde_json::Value`].
//!
//! The canonical form is what an audit event is hashed over, so it must be byte-for-byte the
//! same in every implementation that verifies the chain (this crate, `verify_export.py`, any
//! script an auditor writes). RFC 8785 is the form such implementations already agree on:
//!
//! - no whitespace;
//! - object members sorted by key, keys compared as sequences of **UTF-16 code units** (not
//!   UTF-8 bytes, not code points: U+1F600 sorts before U+FB33);
//! - strings: only `"`, `\` and the control characters U+0000..U+001F are escaped; `\b \t \n
//!   \f \r` use their short forms, the others `\u00xx` with lowercase hex; everything else,
//!   U+2028, U+2029 and all non-ASCII included, is written as UTF-8 as is;
//! - numbers: the ECMAScript `Number.prototype.toString` form of the IEEE-754 double: the
//!   shortest digits that round-trip, plain decimal for 1e-6 <= |x| < 1e21, otherwise
//!   `d.ddde+N` / `d.ddde-N`; `-0` is written `0`.
//!
//! Two deliberate restrictions, both errors rather than silent changes, because the audit log
//! must round-trip exactly:
//!
//! - **Integers that a double cannot hold.** JCS treats every number as a double. An integer
//!   whose double form does not print back as the same digits (for example 2^53 + 1, or
//!   `u64::MAX`) is rejected with [`JcsError::InexactInteger`] instead of being rounded. Every
//!   integer with |n| <= 2^53 is accepted, as is any larger one that prints back unchanged
//!   (`1e18` written as `1000000000000000000`); that rule keeps canonicalisation idempotent.
//! - **Nesting deeper than [`MAX_DEPTH`]** arrays/objects is rejected ([`JcsError::TooDeep`]),
//!   so hostile metadata cannot exhaust the stack; it is the deepest serde_json parses, so
//!   anything this module writes can be parsed again.
//!
//! NaN and the infinities cannot be represented in JSON and are errors ([`JcsError::NonFinite`];
//! `serde_json::Value` cannot normally hold them, the check is for completeness).
//!
//! Shortest round-trip digits come from Rust's `{:e}` formatting of `f64`, which produces the
//! shortest representation that parses back to the same double, closest to the exact value
//! when several are equally short. ECMAScript asks for the same digits except in one case:
//! when the exact value lies precisely halfway between the two closest shortest candidates,
//! ECMAScript takes the one with the even last digit while Rust rounds up (RFC 8785
//! Appendix B's `1424953923781206.2`, which Rust writes `…206.3`). [`tie_to_even`] detects
//! that case exactly with integer arithmetic and corrects it; the rest of this module only
//! rearranges the digits into the ECMAScript layout. `verify_export.py` gets the same digits
//! from Python's `repr`, an independent implementation, and the tests compare the two.

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Number, Value};

/// The deepest nesting of arrays and objects accepted: the most serde_json parses back.
pub const MAX_DEPTH: usize = 127;

/// Why a value has no canonical form.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JcsError {
    #[error("number is not finite")]
    NonFinite,
    #[error("integer {0} cannot be represented exactly as an IEEE-754 double")]
    InexactInteger(String),
    #[error("json nests deeper than {MAX_DEPTH} arrays or objects")]
    TooDeep,
    #[error("value could not be serialised to json: {0}")]
    Serialize(String),
}

/// The RFC 8785 canonical UTF-8 bytes of `v`.
pub fn canonicalize(v: &Value) -> Result<Vec<u8>, JcsError> {
    let mut out = Vec::new();
    write_value(v, &mut out, 0)?;
    Ok(out)
}

/// The canonical bytes of any serialisable value (serialised with serde_json first).
pub fn canonicalize_serialize<T: serde::Serialize + ?Sized>(v: &T) -> Result<Vec<u8>, JcsError> {
    let value = serde_json::to_value(v).map_err(|e| JcsError::Serialize(e.to_string()))?;
    canonicalize(&value)
}

fn write_value(v: &Value, out: &mut Vec<u8>, depth: usize) -> Result<(), JcsError> {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => out.extend_from_slice(number_to_string(n)?.as_bytes()),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            if depth >= MAX_DEPTH {
                return Err(JcsError::TooDeep);
            }
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(item, out, depth + 1)?;
            }
            out.push(b']');
        }
        Value::Object(members) => {
            if depth >= MAX_DEPTH {
                return Err(JcsError::TooDeep);
            }
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            sorted.sort_by(|a, b| cmp_utf16(a.0, b.0));
            out.push(b'{');
            for (i, (key, value)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(key, out);
                out.push(b':');
                write_value(value, out, depth + 1)?;
            }
            out.push(b'}');
        }
    }
    Ok(())
}

/// Orders strings by their UTF-16 code units, as RFC 8785 section 3.2.3 requires.
pub fn cmp_utf16(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    // Byte-wise is sound: every byte that needs escaping is ASCII, and ASCII bytes never occur
    // inside a multi-byte UTF-8 sequence, so other bytes are copied through unchanged.
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x09 => out.extend_from_slice(b"\\t"),
            0x0a => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            0x0d => out.extend_from_slice(b"\\r"),
            0x00..=0x1f => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0x0f)]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// The canonical text of a JSON number (see the module docs for the integer rule).
pub fn number_to_string(n: &Number) -> Result<String, JcsError> {
    if let Some(u) = n.as_u64() {
        // `as` rounds to the nearest double, ties to even, as a JSON parser would.
        return exact_integer(u as f64, u.to_string());
    }
    if let Some(i) = n.as_i64() {
        return exact_integer(i as f64, i.to_string());
    }
    match n.as_f64() {
        Some(x) => format_f64(x),
        None => Err(JcsError::NonFinite),
    }
}

fn exact_integer(as_double: f64, decimal: String) -> Result<String, JcsError> {
    let canonical = format_f64(as_double)?;
    if canonical == decimal {
        Ok(canonical)
    } else {
        Err(JcsError::InexactInteger(decimal))
    }
}

/// ECMAScript `Number.prototype.toString(x)` (ECMA-262 `Number::toString`, radix 10) for a
/// finite double; non-finite values are an error because JSON cannot hold them.
pub fn format_f64(x: f64) -> Result<String, JcsError> {
    if !x.is_finite() {
        return Err(JcsError::NonFinite);
    }
    if x == 0.0 {
        // Both +0 and -0.
        return Ok("0".to_owned());
    }
    let (digits, n) = shortest_digits(x.abs());
    let (digits, n) = tie_to_even(x.abs(), &digits).unwrap_or((digits, n));
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX);
    let mut out = String::with_capacity(26);
    if x < 0.0 {
        out.push('-');
    }
    // ECMA-262: x = 0.d1d2..dk * 10^n with k as small as possible.
    if k <= n && n <= 21 {
        // Integer: the digits, then n - k zeros.
        out.push_str(&digits);
        out.extend(std::iter::repeat_n(
            '0',
            usize::try_from(n - k).unwrap_or(0),
        ));
    } else if 0 < n && n <= 21 {
        // Decimal point inside the digits.
        // 0 < n < k here, so the split is inside the digits.
        let at = usize::try_from(n).unwrap_or(0);
        let (int, frac) = digits.split_at_checked(at).unwrap_or((&digits, ""));
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        // 0.000ddd
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', usize::try_from(-n).unwrap_or(0)));
        out.push_str(&digits);
    } else {
        // Exponential: d[.ddd]e±(n-1)
        // There is at least one digit: x != 0.
        let (first, rest) = digits.split_at_checked(1).unwrap_or((&digits, ""));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let e = n - 1;
        let _ = write!(
            out,
            "e{}{}",
            if e < 0 { '-' } else { '+' },
            e.unsigned_abs()
        );
    }
    Ok(out)
}

/// The shortest round-trip decimal digits of a finite `x > 0` (no leading or trailing zeros)
/// and the exponent `n` with `x = 0.digits * 10^n`.
fn shortest_digits(x: f64) -> (String, i32) {
    // `{:e}` without a precision gives the shortest round-trip form: "d[.ddd]e[-]N".
    let sci = format!("{x:e}");
    let mut digits = String::with_capacity(17);
    let (mut exp, mut exp_negative, mut in_exp) = (0i32, false, false);
    for c in sci.chars() {
        match c {
            'e' => in_exp = true,
            '-' if in_exp => exp_negative = true,
            '0'..='9' if in_exp => {
                exp = exp
                    .saturating_mul(10)
                    .saturating_add(i32::from(c as u8 - b'0'));
            }
            '0'..='9' => digits.push(c),
            _ => {} // the decimal point
        }
    }
    if exp_negative {
        exp = -exp;
    }
    // d.ddd * 10^exp == 0.dddd * 10^(exp + 1)
    let mut n = exp + 1;
    // std never writes leading or trailing zeros here; stripping keeps this correct regardless.
    let trimmed = digits.trim_start_matches('0');
    n -= i32::try_from(digits.len() - trimmed.len()).unwrap_or(0);
    let digits = trimmed.trim_end_matches('0').to_owned();
    (digits, n)
}

/// ECMAScript's choice when Rust's shortest `digits` for finite `x > 0` came from an exact tie.
///
/// A tie means the exact value of `x` has exactly one more significant digit than `digits`, and
/// that digit is 5. Writing `x = m * 2^e` with `m` odd: if `e >= 0`, `x` is an integer whose odd
/// part is below 2^53, too few digits for a shortest form to be ambiguous; if `e < 0`, the exact
/// decimal significand is `m * 5^-e`, which is computed in `u128` (giving up once it exceeds
/// 19 digits, far more than a tie can have). `None` when there is no tie.
fn tie_to_even(x: f64, digits: &str) -> Option<(String, i32)> {
    let bits = x.to_bits();
    let biased = i32::try_from((bits >> 52) & 0x7ff).ok()?;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mut m, mut e) = if biased == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), biased - 1075)
    };
    while m & 1 == 0 && e < 0 {
        m >>= 1;
        e += 1;
    }
    if e >= 0 || m == 0 {
        return None;
    }
    // x == significand * 10^e exactly.
    let mut significand = u128::from(m);
    for _ in 0..e.unsigned_abs() {
        significand = significand.checked_mul(5)?;
        if significand >= 10u128.pow(19) {
            return None;
        }
    }
    let exact = significand.to_string();
    if exact.len() != digits.len() + 1 || !exact.ends_with('5') {
        return None;
    }
    let below = significand / 10;
    let mut pick = if below % 2 == 0 { below } else { below + 1 };
    // pick * 10^(e + 1); normalise away trailing zeros.
    let mut exp = e + 1;
    while pick % 10 == 0 && pick > 0 {
        pick /= 10;
        exp += 1;
    }
    let pick = pick.to_string();
    // Only a candidate that still reads back as x is acceptable.
    let reads_back: f64 = format!("{pick}e{exp}").parse().ok()?;
    if reads_back != x {
        return None;
    }
    let n = i32::try_from(pick.len()).ok()? + exp;
    Some((pick, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_digits_layout() {
        assert_eq!(shortest_digits(1.0), ("1".to_owned(), 1));
        assert_eq!(shortest_digits(0.002), ("2".to_owned(), -2));
        assert_eq!(shortest_digits(123.456), ("123456".to_owned(), 3));
        assert_eq!(shortest_digits(1e21), ("1".to_owned(), 22));
        assert_eq!(shortest_digits(5e-324), ("5".to_owned(), -323));
    }

    #[test]
    fn exact_ties_take_the_even_digit() {
        let x = f64::from_bits(0x43143ff3c1cb0959); // exactly 1424953923781206.25
        assert_eq!(
            format!("{x:e}"),
            "1.4249539237812063e15",
            "std rounds the tie up"
        );
        assert_eq!(
            tie_to_even(x, "14249539237812063"),
            Some(("14249539237812062".to_owned(), 16))
        );
        assert_eq!(format_f64(x).as_deref(), Ok("1424953923781206.2"));
        // No tie: nothing to correct.
        assert_eq!(tie_to_even(0.1, "1"), None);
        assert_eq!(tie_to_even(1e300, "1"), None);
        assert_eq!(tie_to_even(5e-324, "5"), None);
        assert_eq!(tie_to_even(2.5, "25"), None);
    }
}
