//! RFC 8785 canonical JSON: the RFC's own examples, the ECMAScript number vectors, key order
//! by UTF-16 code units, string escapes, and the integer and depth limits.

use airlock_audit::jcs::{JcsError, MAX_DEPTH, canonicalize, format_f64};
use serde_json::{Value, json};

fn canon(text: &str) -> String {
    let v: Value = serde_json::from_str(text).unwrap();
    String::from_utf8(canonicalize(&v).unwrap()).unwrap()
}

fn canon_value(v: &Value) -> Result<String, JcsError> {
    canonicalize(v).map(|b| String::from_utf8(b).unwrap())
}

#[test]
fn rfc8785_3_2_2_sample_is_canonicalised() {
    let input = r#"{
        "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
        "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
        "literals": [null, true, false]
    }"#;
    let want = r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#;
    assert_eq!(canon(input), want);
}

#[test]
fn rfc8785_3_2_3_keys_sort_by_utf16_code_units() {
    let input = r#"{
        "\u20ac": "Euro Sign",
        "\r": "Carriage Return",
        "\ufb33": "Hebrew Letter Dalet With Dagesh",
        "1": "One",
        "\ud83d\ude00": "Emoji: Grinning Face",
        "\u0080": "Control",
        "\u00f6": "Latin Small Letter O With Diaeresis"
    }"#;
    let want = concat!(
        r#"{"\r":"Carriage Return","1":"One","#,
        "\"\u{80}\":\"Control\",",
        "\"\u{f6}\":\"Latin Small Letter O With Diaeresis\",",
        "\"\u{20ac}\":\"Euro Sign\",",
        "\"\u{1f600}\":\"Emoji: Grinning Face\",",
        "\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}",
    );
    assert_eq!(canon(input), want);
    // Byte (and code point) order would put U+FB33 before U+1F600; UTF-16 order does not.
    assert!("\u{fb33}".as_bytes() < "\u{1f600}".as_bytes());
}

/// RFC 8785 Appendix B: IEEE-754 bit patterns and their ECMAScript serialisation.
#[test]
fn rfc8785_appendix_b_number_vectors() {
    let vectors: [(u64, &str); 24] = [
        (0x0000000000000000, "0"),
        (0x8000000000000000, "0"),
        (0x0000000000000001, "5e-324"),
        (0x8000000000000001, "-5e-324"),
        (0x7fefffffffffffff, "1.7976931348623157e+308"),
        (0xffefffffffffffff, "-1.7976931348623157e+308"),
        (0x4340000000000000, "9007199254740992"),
        (0xc340000000000000, "-9007199254740992"),
        (0x4430000000000000, "295147905179352830000"),
        (0x44b52d02c7e14af5, "9.999999999999997e+22"),
        (0x44b52d02c7e14af6, "1e+23"),
        (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
        (0x444b1ae4d6e2ef4e, "999999999999999700000"),
        (0x444b1ae4d6e2ef4f, "999999999999999900000"),
        (0x444b1ae4d6e2ef50, "1e+21"),
        (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
        (0x3eb0c6f7a0b5ed8d, "0.000001"),
        (0x41b3de4355555553, "333333333.3333332"),
        (0x41b3de4355555554, "333333333.33333325"),
        (0x41b3de4355555555, "333333333.3333333"),
        (0x41b3de4355555556, "333333333.3333334"),
        (0x41b3de4355555557, "333333333.33333343"),
        (0xbecbf647612f3696, "-0.0000033333333333333333"),
        (0x43143ff3c1cb0959, "1424953923781206.2"),
    ];
    for (bits, want) in vectors {
        let x = f64::from_bits(bits);
        assert_eq!(format_f64(x).as_deref(), Ok(want), "{bits:016x}");
        assert_eq!(canon_value(&json!(x)).as_deref(), Ok(want), "{bits:016x}");
    }
    for bits in [
        0x7fffffffffffffff_u64,
        0x7ff0000000000000,
        0xfff0000000000000,
    ] {
        assert_eq!(
            format_f64(f64::from_bits(bits)),
            Err(JcsError::NonFinite),
            "{bits:016x}"
        );
    }
}

#[test]
fn es6_number_to_string_layout() {
    let cases: &[(f64, &str)] = &[
        (0.0, "0"),
        (-0.0, "0"),
        (1.0, "1"),
        (-1.0, "-1"),
        (100.0, "100"),
        (4.35, "4.35"),
        (4.5, "4.5"),
        (0.1, "0.1"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1.0 / 3.0, "0.3333333333333333"),
        (123.456, "123.456"),
        (-123.456e-3, "-0.123456"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e21, "1.5e+21"),
        (123456789012345680000.0, "123456789012345680000"),
        (1e-6, "0.000001"),
        (1.5e-6, "0.0000015"),
        (1e-7, "1e-7"),
        (-1e-7, "-1e-7"),
        (1.5e-7, "1.5e-7"),
        (123e-20, "1.23e-18"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (9007199254740992.0, "9007199254740992"),
        (9007199254740993.0, "9007199254740992"),
        (2f64.powi(60), "1152921504606847000"),
        (1e300, "1e+300"),
        (12345.6789e100, "1.23456789e+104"),
    ];
    for &(x, want) in cases {
        assert_eq!(format_f64(x).as_deref(), Ok(want), "{x:e}");
    }
    assert_eq!(format_f64(f64::NAN), Err(JcsError::NonFinite));
    assert_eq!(format_f64(f64::INFINITY), Err(JcsError::NonFinite));
    assert_eq!(format_f64(f64::NEG_INFINITY), Err(JcsError::NonFinite));
}

#[test]
fn json_number_spellings_canonicalise_alike() {
    for (text, want) in [
        ("1E30", "1e+30"),
        ("1e+30", "1e+30"),
        ("4.50", "4.5"),
        ("2e-3", "0.002"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("0e10", "0"),
        ("1.0", "1"),
        ("10", "10"),
        ("1e2", "100"),
        ("100000000000000000000", "100000000000000000000"),
        ("123456789012345678901234567890", "1.2345678901234568e+29"),
        ("0.000000000000000000000000001", "1e-27"),
    ] {
        assert_eq!(canon(text), want, "{text}");
    }
}

#[test]
fn integers_are_accepted_only_when_a_double_holds_them_exactly() {
    let two53 = 1u64 << 53;
    let ok: Vec<(Value, &str)> = vec![
        (json!(0), "0"),
        (json!(-1), "-1"),
        (json!(two53), "9007199254740992"),
        (json!(-(two53 as i64)), "-9007199254740992"),
        (json!(two53 - 1), "9007199254740991"),
        (json!(1_000_000_000_000_000_000_u64), "1000000000000000000"),
        (json!(1_152_921_504_606_847_000_u64), "1152921504606847000"),
    ];
    for (v, want) in ok {
        assert_eq!(canon_value(&v).as_deref(), Ok(want), "{v}");
    }
    let rejected: Vec<(Value, &str)> = vec![
        (json!(two53 + 1), "9007199254740993"),
        (json!(-(two53 as i64) - 1), "-9007199254740993"),
        (json!(1u64 << 60 | 1), "1152921504606846977"),
        (json!(1u64 << 60), "1152921504606846976"),
        (json!(u64::MAX), "18446744073709551615"),
        (json!(i64::MIN), "-9223372036854775808"),
        (json!(i64::MAX), "9223372036854775807"),
        (json!(1u64 << 63), "9223372036854775808"),
    ];
    for (v, n) in rejected {
        assert_eq!(
            canon_value(&v),
            Err(JcsError::InexactInteger(n.to_owned())),
            "{v}"
        );
        // Also when nested deep inside an event's metadata.
        assert_eq!(
            canon_value(&json!({"a": [1, {"b": v}]})),
            Err(JcsError::InexactInteger(n.to_owned()))
        );
    }
}

#[test]
fn strings_escape_only_quote_backslash_and_controls() {
    let mut cases: Vec<(String, String)> = (0u8..0x20)
        .map(|b| {
            let want = match b {
                0x08 => "\\b".to_owned(),
                0x09 => "\\t".to_owned(),
                0x0a => "\\n".to_owned(),
                0x0c => "\\f".to_owned(),
                0x0d => "\\r".to_owned(),
                _ => format!("\\u{b:04x}"),
            };
            (char::from(b).to_string(), want)
        })
        .collect();
    for (raw, want) in [
        ("\"", "\\\""),
        ("\\", "\\\\"),
        ("/", "/"),
        ("\u{7f}", "\u{7f}"),
        ("\u{80}", "\u{80}"),
        ("\u{2028}\u{2029}", "\u{2028}\u{2029}"),
        ("é€😀", "é€😀"),
        ("<script>&'", "<script>&'"),
        ("", ""),
    ] {
        cases.push((raw.to_owned(), want.to_owned()));
    }
    assert_eq!(cases[0x1f].1, "\\u001f");
    assert_eq!(cases[0x0b].1, "\\u000b");
    for (raw, want) in cases {
        assert_eq!(
            canon_value(&json!(raw)).unwrap(),
            format!("\"{want}\""),
            "{raw:?}"
        );
        // Keys are escaped the same way.
        assert_eq!(
            canon_value(&json!({raw.clone(): 0})).unwrap(),
            format!("{{\"{want}\":0}}"),
            "{raw:?}"
        );
    }
}

#[test]
fn nested_values_are_sorted_at_every_level_and_lose_all_whitespace() {
    let input = r#"
    {
        "b" : [ { "z" : 1 , "a" : [ true , { "y" : null , "x" : "s" } ] } , [ ] , { } ],
        "a" : { },
        "aa": { "c": { "b": { "a": [ 3 , 2 , 1 ] } } },
        "A" : "upper sorts before lower"
    }"#;
    assert_eq!(
        canon(input),
        r#"{"A":"upper sorts before lower","a":{},"aa":{"c":{"b":{"a":[3,2,1]}}},"b":[{"a":[true,{"x":"s","y":null}],"z":1},[],{}]}"#
    );
    assert_eq!(canon("[]"), "[]");
    assert_eq!(canon("{}"), "{}");
    assert_eq!(canon("null"), "null");
    assert_eq!(canon(r#""top""#), r#""top""#);
    // A key that is a prefix of another sorts first.
    assert_eq!(canon(r#"{"ab":1,"a":2,"":3}"#), r#"{"":3,"a":2,"ab":1}"#);
}

#[test]
fn nesting_is_limited_to_what_can_be_parsed_back() {
    let nested = |depth: usize| {
        let mut v = json!(1);
        for i in 0..depth {
            v = if i % 2 == 0 {
                json!([v])
            } else {
                json!({ "k": v })
            };
        }
        v
    };
    let deepest = canon_value(&nested(MAX_DEPTH)).unwrap();
    let back: Value = serde_json::from_str(&deepest).unwrap();
    assert_eq!(canon_value(&back).unwrap(), deepest);
    assert_eq!(canon_value(&nested(MAX_DEPTH + 1)), Err(JcsError::TooDeep));
    assert_eq!(canon_value(&nested(1_000)), Err(JcsError::TooDeep));
}
