//! What the module kinds share: inline tensors checked and fitted to the program's dtype,
//! the size and epsilon checks of their configurations, burn tensors made from parameter data,
//! and the row-major transpose behind Linear's layout difference.

use burn::tensor::{Device, FloatDType, Tensor, TensorCreationOptions, TensorData};

use crate::document;
use crate::dtype::ProgramDType;
use crate::ops::{check_data, check_shape};

/// Checks an inline float tensor (`what`: its field) of the given rank.
pub fn inline_tensor(
    t: document::Tensor,
    what: &str,
    rank: usize,
) -> Result<(Vec<usize>, Vec<f64>), String> {
    check_shape(&t.shape).map_err(|e| format!("{what}: {e}"))?;
    if t.shape.len() != rank {
        return Err(format!(
            "{what} must have rank {rank}, got shape {:?}",
            t.shape
        ));
    }
    check_data(&t.data.0, &t.shape).map_err(|e| format!("{what}: {e}"))?;
    Ok((t.shape, t.data.0))
}

/// An inline tensor of the given rank ([`inline_tensor`]) whose values are the program's
/// `dtype`'s (an error names the field and the element).
pub fn fitted(
    t: document::Tensor,
    what: &str,
    rank: usize,
    dtype: ProgramDType,
) -> Result<(Vec<usize>, Vec<f64>), String> {
    let (shape, mut data) = inline_tensor(t, what, rank)?;
    dtype
        .fit_all(&mut data)
        .map_err(|e| format!("{what}: {e}"))?;
    Ok((shape, data))
}

/// A rank-1 inline tensor of `n` elements, values of the program's `dtype` (`what` names it in
/// errors).
pub fn vector(
    t: document::Tensor,
    what: &str,
    n: usize,
    dtype: ProgramDType,
) -> Result<Vec<f64>, String> {
    let (shape, data) = fitted(t, what, 1, dtype)?;
    if shape != [n] {
        return Err(format!(
            "{what} has shape {shape:?}, the module needs [{n}]"
        ));
    }
    Ok(data)
}

/// A size of a module's configuration (`name`: its field) must be at least 1.
pub fn positive_size(name: &str, n: usize) -> Result<(), String> {
    if n == 0 {
        return Err(format!("\"{name}\" must be >= 1"));
    }
    Ok(())
}

/// A normalisation's `epsilon` must be finite and positive.
pub fn positive_epsilon(e: f64) -> Result<(), String> {
    if !(e.is_finite() && e > 0.0) {
        return Err(format!("\"epsilon\" must be finite and > 0, got {e}"));
    }
    Ok(())
}

/// How a module's parameters are created: on `device` (the autodiff device), in `dtype`.
pub fn options(device: &Device, dtype: FloatDType) -> TensorCreationOptions {
    TensorCreationOptions::new(device.clone()).with_dtype(dtype.into())
}

/// A rank-1 burn tensor of parameter data.
pub fn tensor1(data: &[f64], options: TensorCreationOptions) -> Tensor<1> {
    Tensor::<1>::from_data(TensorData::new(data.to_vec(), [data.len()]), options)
}

/// Row-major `[rows, cols]` data transposed to `[cols, rows]`.
pub fn transpose_data<T: Copy>(rows: usize, cols: usize, data: &[T]) -> Vec<T> {
    assert_eq!(
        data.len(),
        rows * cols,
        "transpose: data does not match the shape"
    );
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| data[r * cols + c]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes() {
        // [[1, 2, 3], [4, 5, 6]] -> [[1, 4], [2, 5], [3, 6]]
        assert_eq!(
            transpose_data(2, 3, &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
        );
    }
}
