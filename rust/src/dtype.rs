//! The program's float dtype (docs/format.md#dtypes): every leaf, module parameter and float
//! value is created in it; data must be values of it (float32 data are narrowed, as format
//! versions 1 and 2 always did).

use burn::tensor::{DType, FloatDType, bf16, f16};
use serde::Deserialize;

/// The `dtype` of a program document (default float32).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProgramDType {
    #[default]
    Float32,
    Float64,
    Float16,
    Bfloat16,
}

impl ProgramDType {
    pub fn float(self) -> FloatDType {
        match self {
            ProgramDType::Float32 => FloatDType::F32,
            ProgramDType::Float64 => FloatDType::F64,
            ProgramDType::Float16 => FloatDType::F16,
            ProgramDType::Bfloat16 => FloatDType::BF16,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ProgramDType::Float32 => "float32",
            ProgramDType::Float64 => "float64",
            ProgramDType::Float16 => "float16",
            ProgramDType::Bfloat16 => "bfloat16",
        }
    }

    /// `x` as a value of this dtype: float32 narrows (an error when a finite `x` overflows);
    /// float16 and bfloat16 must hold `x` exactly.
    pub fn fit(self, x: f64) -> Result<f64, String> {
        match self {
            ProgramDType::Float64 => Ok(x),
            ProgramDType::Float32 => {
                let narrowed = x as f32;
                if narrowed.is_infinite() && x.is_finite() {
                    Err(format!("{x} overflows float32"))
                } else {
                    Ok(f64::from(narrowed))
                }
            }
            ProgramDType::Float16 | ProgramDType::Bfloat16 => {
                let back = if self == ProgramDType::Float16 {
                    f16::from_f64(x).to_f64()
                } else {
                    bf16::from_f64(x).to_f64()
                };
                if back == x || x.is_nan() {
                    Ok(x)
                } else {
                    Err(format!(
                        "{x} is not a {} value (the program's dtype)",
                        self.name()
                    ))
                }
            }
        }
    }

    /// Fits every element of `data` ([`Self::fit`]); an error names the element.
    pub fn fit_all(self, data: &mut [f64]) -> Result<(), String> {
        for (i, x) in data.iter_mut().enumerate() {
            *x = self.fit(*x).map_err(|e| format!("data[{i}]: {e}"))?;
        }
        Ok(())
    }
}

/// The name a tensor's dtype is reported by (PyTorch's names for floats).
pub fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::F64 => "float64",
        DType::F32 => "float32",
        DType::F16 => "float16",
        DType::BF16 => "bfloat16",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use crate::exec;
    use crate::program::Program;
    use serde_json::json;

    fn run(dtype: &str, data: serde_json::Value) -> Result<exec::Observation, String> {
        let doc = json!({"format": "difftest-program", "version": 1, "dtype": dtype, "statements": [
            {"id": "x", "kind": "leaf", "shape": [2], "data": data, "device": "autodiff",
             "require_grad": true},
            {"id": "y", "kind": "op", "op": "mul", "inputs": ["x", "x"]},
            {"id": "bw", "kind": "backward", "input": "y"}]});
        Program::from_json(&doc)
            .map(|p| exec::run(&p))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn values_keep_their_dtype_and_precision() {
        let obs = run("float64", json!([0.1, 3.0])).unwrap();
        assert!(obs.error.is_none(), "{:?}", obs.error);
        let y = &obs.values[1];
        assert_eq!(y.dtype, "float64");
        assert_eq!(y.data, vec![0.1 * 0.1, 9.0]); // not squeezed through f32
        let g = obs.backwards[0].grads.0[0].1.as_ref().unwrap();
        assert_eq!((g.dtype, g.data.clone()), ("float64", vec![0.2, 6.0]));
        for (dtype, x) in [("float16", 0.0999755859375), ("bfloat16", 0.10009765625)] {
            let obs = run(dtype, json!([x, 3.0])).unwrap();
            assert!(obs.error.is_none(), "{dtype}: {:?}", obs.error);
            assert_eq!(obs.values[0].dtype, dtype);
            assert_eq!(obs.values[0].data, vec![x, 3.0]);
        }
    }

    #[test]
    fn data_must_be_values_of_the_dtype() {
        for dtype in ["float16", "bfloat16"] {
            let e = run(dtype, json!([0.1, 3.0])).unwrap_err();
            assert!(
                e.contains("data[0]: 0.1 is not a") && e.contains(dtype),
                "{e}"
            );
        }
        let e = run("float16", json!([1e5, 3.0])).unwrap_err();
        assert!(e.contains("data[0]"), "{e}");
        assert!(run("float32", json!([0.1, 3.0])).is_ok()); // narrowed, as before
        assert!(run("float32", json!([1e39, 3.0])).is_err());
        assert!(run("float64", json!([1e39, 3.0])).is_ok());
        assert!(run("float8", json!([1.0, 3.0])).is_err());
    }
}
