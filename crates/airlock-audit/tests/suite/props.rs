//! Properties of canonical JSON over generated values.

use airlock_audit::jcs::{canonicalize, format_f64};
use proptest::prelude::*;
use serde_json::{Map, Number, Value};

const TWO_53: i64 = 1 << 53;

pub fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        // Characters where escaping and UTF-16 ordering are interesting.
        proptest::collection::vec(
            prop_oneof![
                (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap_or('?')),
                Just('"'),
                Just('\\'),
                Just('/'),
                Just('\u{7f}'),
                Just('\u{80}'),
                Just('\u{2028}'),
                Just('\u{fb33}'),
                Just('\u{ffff}'),
                Just('\u{1f600}'),
                Just('\u{10ffff}'),
                proptest::char::range('a', 'd'),
            ],
            0..6
        )
        .prop_map(|cs| cs.into_iter().collect()),
    ]
}

fn arb_finite_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<u64>()
            .prop_map(f64::from_bits)
            .prop_filter("finite", |x| x.is_finite()),
        any::<f64>().prop_filter("finite", |x| x.is_finite()),
        (-1_000_000i64..1_000_000, -30i32..30).prop_map(|(m, e)| m as f64 * 10f64.powi(e)),
    ]
}

fn arb_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        arb_finite_f64().prop_map(|x| Number::from_f64(x).map_or(Value::Null, Value::Number)),
        (-TWO_53..=TWO_53).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
    ]
}

pub fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_number(),
        arb_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((arb_string(), inner), 0..6)
                .prop_map(|kvs| Value::Object(kvs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Equal as JSON values with every number compared as a double (JCS's number model).
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_json(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn canonical_form_is_idempotent_and_parses_back_to_an_equal_value(v in arb_json()) {
        if let Ok(first) = canonicalize(&v) {
            let text = std::str::from_utf8(&first).unwrap();
            let parsed: Value = serde_json::from_str(text).unwrap();
            prop_assert!(same_json(&v, &parsed), "{v} -> {text}");
            prop_assert_eq!(canonicalize(&parsed).unwrap(), first);
        }
    }

    #[test]
    fn only_inexact_integers_are_rejected(v in arb_json()) {
        if let Err(e) = canonicalize(&v) {
            prop_assert!(matches!(e, airlock_audit::JcsError::InexactInteger(_)), "{e:?}");
        }
    }

    #[test]
    fn safe_integers_print_as_their_decimal(n in -TWO_53..=TWO_53) {
        prop_assert_eq!(canonicalize(&Value::from(n)).unwrap(), n.to_string().into_bytes());
    }

    #[test]
    fn numbers_round_trip_with_ecmascript_layout(x in arb_finite_f64()) {
        let s = format_f64(x).unwrap();
        let back: f64 = s.parse().unwrap();
        prop_assert!(back == x, "{x:e} -> {s}");
        // Rust's formatting breaks exact ties between two shortest
        // candidates upwards, ECMAScript to the even digit (e.g.
        // -1827341758569585.25 prints as ...585.2 in JS and Python, ...585.3
        // in Rust), so compare layout and length, not the last digit.
        if x != 0.0 && (1e-6..1e21).contains(&x.abs()) {
            // Plain decimal, as short as Rust's own shortest Display.
            let rust = format!("{x}");
            prop_assert!(!s.contains('e'), "{s}");
            prop_assert_eq!(s.len(), rust.len(), "{} vs {}", s, rust);
        } else if x != 0.0 {
            // d[.ddd]e±N with the shortest digits.
            let sci = format!("{:e}", x);
            let (mant, exp) = sci.split_once('e').unwrap();
            let sign = if exp.starts_with('-') { "" } else { "+" };
            let rust = format!("{mant}e{sign}{exp}");
            prop_assert_eq!(s.len(), rust.len(), "{} vs {}", s, rust);
            let (s_exp, r_exp) = (s.split_once('e').map(|p| p.1), rust.split_once('e').map(|p| p.1));
            prop_assert_eq!(s_exp, r_exp);
        } else {
            prop_assert_eq!(s, "0");
        }
    }
}
