//! Attribute types: how each reads its value from an op statement's JSON `attrs`, and its name
//! in the catalog's terms. Also the shape and data rules that leaves, inline attribute tensors
//! and module weights share.

use serde_json::{Map, Value};

use crate::floats::{kind_of, parse_f64};
use crate::value::MAX_RANK;

/// An attribute type: how to read it from JSON, and its name in the catalog's terms
/// (`ATTR_TYPES` in difftest/ops/spec.py; `tests/differential/test_catalog.py` compares the two catalogs).
pub trait Attr: Sized {
    /// The type's catalog name.
    const TYPE: &'static str;
    /// The catalog name of a list of it (`Vec<Self>`).
    const LIST_TYPE: &'static str = "unsupported list";
    /// The catalog name of an inline tensor of it (`Inline<Self>`).
    const INLINE_TYPE: &'static str = "unsupported inline tensor";

    fn parse(v: &Value) -> Result<Self, String>;

    /// The shape of the attribute when it is an inline tensor (element budget), else `None`.
    fn tensor_shape(&self) -> Option<&[usize]> {
        None
    }
}

impl Attr for f64 {
    const TYPE: &'static str = "float";

    fn parse(v: &Value) -> Result<Self, String> {
        parse_f64(v)
    }
}

impl Attr for i64 {
    const TYPE: &'static str = "int";
    const LIST_TYPE: &'static str = "ints";
    const INLINE_TYPE: &'static str = "int_tensor";

    fn parse(v: &Value) -> Result<Self, String> {
        v.as_i64()
            .ok_or_else(|| format!("expected an integer, got {}", show(v)))
    }
}

/// A dimension index or a count: a non-negative integer.
impl Attr for usize {
    const TYPE: &'static str = "dim";
    const LIST_TYPE: &'static str = "dims";

    fn parse(v: &Value) -> Result<Self, String> {
        v.as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .ok_or_else(|| format!("expected a non-negative integer, got {}", show(v)))
    }
}

impl<T: Attr> Attr for Vec<T> {
    const TYPE: &'static str = T::LIST_TYPE;

    fn parse(v: &Value) -> Result<Self, String> {
        let items = v
            .as_array()
            .ok_or_else(|| format!("expected an array, got {}", kind_of(v)))?;
        items
            .iter()
            .enumerate()
            .map(|(i, x)| T::parse(x).map_err(|e| format!("element {i}: {e}")))
            .collect()
    }
}

impl Attr for bool {
    const TYPE: &'static str = "bool";
    const INLINE_TYPE: &'static str = "bool_tensor";

    fn parse(v: &Value) -> Result<Self, String> {
        v.as_bool()
            .ok_or_else(|| format!("expected a boolean, got {}", show(v)))
    }
}

/// A count that must be at least 1 (`repeat_dim`'s `times`).
#[derive(Clone, Copy, Debug)]
pub struct Positive(pub usize);

impl Attr for Positive {
    const TYPE: &'static str = "int";

    fn parse(v: &Value) -> Result<Self, String> {
        match usize::parse(v)? {
            0 => Err("expected an integer >= 1, got 0".into()),
            n => Ok(Positive(n)),
        }
    }
}

/// A float dtype (`cast`): `float32`, `float64`, `float16` or `bfloat16`.
impl Attr for crate::dtype::ProgramDType {
    const TYPE: &'static str = "dtype";

    fn parse(v: &Value) -> Result<Self, String> {
        serde_json::from_value(v.clone()).map_err(|_| {
            format!(
                "expected a float dtype (float32, float64, float16, bfloat16), got {}",
                show(v)
            )
        })
    }
}

/// A shape: rank 1 to 4, every dim >= 1.
#[derive(Clone, Debug)]
pub struct Dims(pub Vec<usize>);

impl Attr for Dims {
    const TYPE: &'static str = "shape";

    fn parse(v: &Value) -> Result<Self, String> {
        let dims = Vec::<usize>::parse(v)?;
        check_shape(&dims)?;
        Ok(Dims(dims))
    }
}

/// Checks the shape rules shared by leaves and attributes: rank 1..=4, dims >= 1.
pub fn check_shape(dims: &[usize]) -> Result<(), String> {
    if dims.is_empty() || dims.len() > MAX_RANK {
        return Err(format!(
            "shape {dims:?} has rank {}; ranks 1 to {MAX_RANK} are supported",
            dims.len()
        ));
    }
    if dims.contains(&0) {
        return Err(format!("shape {dims:?} has a zero dimension"));
    }
    Ok(())
}

/// Checks tensor data's length against `shape` (leaves, inline attribute tensors, module
/// weights).
pub fn check_data<T>(data: &[T], shape: &[usize]) -> Result<(), String> {
    let n: usize = shape.iter().product();
    if data.len() != n {
        return Err(format!(
            "data has {} elements but shape {shape:?} needs {n}",
            data.len()
        ));
    }
    Ok(())
}

/// A `[start, end)` range with step 1 (`slice`).
#[derive(Clone, Copy, Debug)]
pub struct Range(pub usize, pub usize);

impl Attr for Range {
    const TYPE: &'static str = "range";
    const LIST_TYPE: &'static str = "ranges";

    fn parse(v: &Value) -> Result<Self, String> {
        match Vec::<usize>::parse(v)?.as_slice() {
            [start, end] => Ok(Range(*start, *end)),
            _ => Err(format!("expected [start, end], got {}", show(v))),
        }
    }
}

/// A small tensor given inline as `{"shape": [...], "data": [...]}` (gather indices, masks).
#[derive(Clone, Debug)]
pub struct Inline<T> {
    pub shape: Vec<usize>,
    pub data: Vec<T>,
}

impl<T: Attr> Attr for Inline<T> {
    const TYPE: &'static str = T::INLINE_TYPE;

    fn parse(v: &Value) -> Result<Self, String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("expected {{\"shape\", \"data\"}}, got {}", kind_of(v)))?;
        check_keys(obj, &["shape", "data"])?;
        let shape: Vec<usize> = get(obj, "shape")?;
        check_shape(&shape).map_err(|e| format!("shape: {e}"))?;
        let data: Vec<T> = get(obj, "data")?;
        check_data(&data, &shape)?;
        Ok(Inline { shape, data })
    }

    fn tensor_shape(&self) -> Option<&[usize]> {
        Some(&self.shape)
    }
}

fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 40 {
        format!("{}...", &s[..37])
    } else {
        s
    }
}

/// Rejects keys of `obj` that are not in `allowed`.
pub fn check_keys(obj: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(k) if allowed.is_empty() => Err(format!("unexpected attribute {k:?} (takes none)")),
        Some(k) => Err(format!(
            "unexpected attribute {k:?} (expected {})",
            allowed.join(", ")
        )),
    }
}

/// Reads a required attribute.
pub fn get<T: Attr>(obj: &Map<String, Value>, key: &str) -> Result<T, String> {
    let v = obj
        .get(key)
        .ok_or_else(|| format!("missing attribute {key:?}"))?;
    T::parse(v).map_err(|e| format!("attribute {key:?}: {e}"))
}
