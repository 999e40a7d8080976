//! f32 <-> JSON.
//!
//! Finite values are JSON numbers; NaN and the infinities are the strings `"NaN"`,
//! `"Infinity"` and `"-Infinity"`. Writing widens the f32 to f64 and lets serde_json print the
//! shortest decimal of that f64, so a reader that parses to f64 and narrows gets the exact f32
//! back (`-0.0` included). Reading narrows to the nearest f32 (exact for what writers produce).

use serde::ser::{Serialize, SerializeSeq, Serializer};
use serde_json::Value;

/// Parses one float (a number or one of the three special strings) to f64, without narrowing.
pub fn parse_f64(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| format!("number {n} is not representable as a float")),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            other => Err(format!(
                "string {other:?} is not a float (only \"NaN\", \"Infinity\", \"-Infinity\")"
            )),
        },
        other => Err(format!("expected a float, got {}", kind_of(other))),
    }
}

/// Parses one float element of tensor data and narrows it to the nearest f32, like the Python
/// reader (`struct.pack("<f", x)`): a finite number that overflows float32 is an error.
/// Writers only produce exact float32 values, for which the narrowing is lossless.
#[cfg(test)]
pub fn parse_f32(v: &Value) -> Result<f32, String> {
    let x = parse_f64(v)?;
    let narrowed = x as f32;
    if narrowed.is_infinite() && x.is_finite() {
        Err(format!("{x} overflows float32"))
    } else {
        Ok(narrowed)
    }
}

/// One f32 as JSON (tests only; output goes through [`F32Slice`]): a number (the f32 widened to f64) or a special string.
#[cfg(test)]
pub fn f32_to_json(x: f32) -> Value {
    if x.is_nan() {
        Value::String("NaN".into())
    } else if x == f32::INFINITY {
        Value::String("Infinity".into())
    } else if x == f32::NEG_INFINITY {
        Value::String("-Infinity".into())
    } else {
        Value::from(f64::from(x))
    }
}

/// A short name of a JSON value's type, for error messages.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Serializes a slice of f32 with the conventions above, without building a `Value`.
#[cfg(test)]
pub struct F32Slice<'a>(pub &'a [f32]);

#[cfg(test)]
impl Serialize for F32Slice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for &x in self.0 {
            if x.is_nan() {
                seq.serialize_element("NaN")?;
            } else if x == f32::INFINITY {
                seq.serialize_element("Infinity")?;
            } else if x == f32::NEG_INFINITY {
                seq.serialize_element("-Infinity")?;
            } else {
                seq.serialize_element(&f64::from(x))?;
            }
        }
        seq.end()
    }
}

/// Serializes a slice of f64 with the conventions above (observed values of any dtype, read
/// as f64: exact, so float64 values keep their full precision).
pub struct F64Slice<'a>(pub &'a [f64]);

impl Serialize for F64Slice<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for &x in self.0 {
            if x.is_nan() {
                seq.serialize_element("NaN")?;
            } else if x == f64::INFINITY {
                seq.serialize_element("Infinity")?;
            } else if x == f64::NEG_INFINITY {
                seq.serialize_element("-Infinity")?;
            } else {
                seq.serialize_element(&x)?;
            }
        }
        seq.end()
    }
}

/// `serialize_with` helper for `Vec<f64>` fields.
pub fn serialize_f64s<T: AsRef<[f64]>, S: Serializer>(xs: &T, s: S) -> Result<S::Ok, S::Error> {
    F64Slice(xs.as_ref()).serialize(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_exact() {
        let xs = [
            0.1f32,
            -0.0,
            0.0,
            1.0,
            f32::MIN_POSITIVE,
            f32::MAX,
            f32::MIN,
            1.0e-45,
            3.4028235e38,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            16_777_217.0,
        ];
        let text = serde_json::to_string(&F32Slice(&xs)).unwrap();
        let back: Vec<Value> = serde_json::from_str(&text).unwrap();
        for (x, v) in xs.iter().zip(&back) {
            let y = parse_f32(v).unwrap();
            assert_eq!(x.to_bits(), y.to_bits(), "{x} via {v}");
            assert_eq!(f32_to_json(*x), *v);
        }
        assert!(text.contains("-0.0"));
    }

    #[test]
    fn narrows_like_python() {
        assert_eq!(parse_f32(&serde_json::json!(0.1)).unwrap(), 0.1f32);
        assert!(parse_f32(&serde_json::json!(1e39)).is_err());
        assert!(parse_f32(&serde_json::json!(-1e39)).is_err());
        assert_eq!(
            parse_f32(&serde_json::json!(16_777_217)).unwrap(),
            16_777_216.0
        );
        assert!(parse_f32(&serde_json::json!("nan")).is_err());
        assert_eq!(parse_f32(&serde_json::json!(3)).unwrap(), 3.0);
    }
}
