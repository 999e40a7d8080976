//! The burn backend programs run on, chosen at run time.
//!
//! burn 0.22 picks the backend from the device (`Device::flex()`, `Device::ndarray()`, …); the
//! tensor types carry no backend parameter, so one binary runs every backend compiled into it.
//! Which ones are compiled in is decided by this crate's cargo features (`ndarray`, `wgpu`,
//! `vulkan`, `tch`; Flex always). The process default is Flex, or `--backend NAME`; a request
//! may name another (its `backend` field), which holds for that request only.

use std::cell::Cell;
use std::sync::OnceLock;

use burn::tensor::Device;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Flex,
    NdArray,
    /// burn's `wgpu` feature: CubeCL kernels emitted as WGSL, translated by naga.
    Wgpu,
    /// burn's `vulkan` feature: CubeCL's own SPIR-V on a Vulkan adapter.
    Vulkan,
    /// LibTorch (burn-tch), CPU.
    Tch,
}

impl Backend {
    pub const ALL: [Backend; 5] = [
        Backend::Flex,
        Backend::NdArray,
        Backend::Wgpu,
        Backend::Vulkan,
        Backend::Tch,
    ];

    /// The name on the command line, in requests and in answers (and the cargo feature).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Flex => "flex",
            Backend::NdArray => "ndarray",
            Backend::Wgpu => "wgpu",
            Backend::Vulkan => "vulkan",
            Backend::Tch => "tch",
        }
    }

    /// Whether this binary was built with the backend.
    pub fn compiled(self) -> bool {
        match self {
            Backend::Flex => true,
            Backend::NdArray => cfg!(feature = "ndarray"),
            Backend::Wgpu => cfg!(feature = "wgpu"),
            Backend::Vulkan => cfg!(feature = "vulkan"),
            Backend::Tch => cfg!(feature = "tch"),
        }
    }

    /// The backends compiled into this binary, Flex first.
    pub fn compiled_in() -> Vec<&'static str> {
        Backend::ALL
            .iter()
            .filter(|b| b.compiled())
            .map(|b| b.name())
            .collect()
    }

    /// A backend by name, compiled in or not (None: no such backend).
    pub fn named(name: &str) -> Option<Backend> {
        Backend::ALL.into_iter().find(|b| b.name() == name)
    }

    /// A backend by name; an unknown name or one not compiled in is an error that says which
    /// backends exist and which this binary has.
    pub fn parse(name: &str) -> Result<Backend, String> {
        let Some(backend) = Backend::named(name) else {
            let known: Vec<_> = Backend::ALL.iter().map(|b| b.name()).collect();
            return Err(format!(
                "unknown backend {name:?} (known: {})",
                known.join(", ")
            ));
        };
        if !backend.compiled() {
            return Err(format!(
                "backend {name:?} is not compiled into this difftest-burn (it has: {}); build it \
                 with `cargo build --release --features {name}` (difftest builds one with \
                 --backend {name})",
                Backend::compiled_in().join(", ")
            ));
        }
        Ok(backend)
    }

    /// The backend's plain (non-autodiff) device.
    pub fn device(self) -> Device {
        match self {
            Backend::Flex => Device::flex(),
            #[cfg(feature = "ndarray")]
            #[allow(deprecated)]
            // burn deprecates NdArray in favour of Flex; it still ships
            Backend::NdArray => Device::ndarray(),
            #[cfg(feature = "wgpu")]
            Backend::Wgpu => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
            #[cfg(feature = "vulkan")]
            Backend::Vulkan => Device::vulkan(burn::tensor::DeviceKind::DefaultDevice),
            #[cfg(feature = "tch")]
            #[allow(deprecated)] // likewise burn-tch
            Backend::Tch => Device::libtorch(),
            #[allow(unreachable_patterns)] // every arm is compiled in with all the features
            other => unreachable!(
                "backend {} is not compiled in (Backend::parse refuses it)",
                other.name()
            ),
        }
    }
}

static DEFAULT: OnceLock<Backend> = OnceLock::new();

thread_local! {
    static CURRENT: Cell<Option<Backend>> = const { Cell::new(None) };
}

/// Sets the process default (once, at start-up: `--backend NAME`).
pub fn set_default(backend: Backend) {
    // A second call keeps the first value; main calls it once.
    let _ = DEFAULT.set(backend);
}

/// The backend this thread runs on now: the request's, else the process default.
pub fn current() -> Backend {
    CURRENT
        .with(Cell::get)
        .unwrap_or_else(|| *DEFAULT.get().unwrap_or(&Backend::Flex))
}

/// Runs `f` with `backend` as the current backend (restored afterwards, also on a panic).
pub fn with<T>(backend: Backend, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Backend>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.replace(Some(backend))));
    f()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_flex_is_always_in() {
        assert_eq!(Backend::parse("flex"), Ok(Backend::Flex));
        assert_eq!(Backend::compiled_in()[0], "flex");
        for b in Backend::ALL {
            match Backend::parse(b.name()) {
                Ok(parsed) => assert!(parsed == b && b.compiled()),
                Err(e) => assert!(!b.compiled() && e.contains("not compiled"), "{e}"),
            }
        }
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let e = Backend::parse("cuda").unwrap_err();
        assert!(
            e.contains("unknown backend \"cuda\"") && e.contains("ndarray"),
            "{e}"
        );
    }

    /// Every backend compiled in runs a forward and a backward on its own device.
    #[test]
    fn each_compiled_backend_runs_autodiff() {
        use burn::tensor::{Tensor, TensorData};
        for b in Backend::ALL.into_iter().filter(|b| b.compiled()) {
            let device = b.device().autodiff();
            let x: Tensor<1> =
                Tensor::from_data(TensorData::new(vec![1.0f32, 2.0], [2]), &device).require_grad();
            let grads = (x.clone() * x.clone()).sum().backward();
            let g = x.grad(&grads).expect("a gradient");
            assert_eq!(
                g.try_to_vec_as::<f32>().unwrap(),
                vec![2.0, 4.0],
                "{}",
                b.name()
            );
        }
    }

    #[test]
    fn with_sets_and_restores_the_current_backend() {
        assert_eq!(current(), Backend::Flex);
        let inner = with(Backend::Flex, current);
        assert_eq!(inner, Backend::Flex);
        let r = std::panic::catch_unwind(|| with(Backend::NdArray, || panic!("boom")));
        assert!(r.is_err());
        assert_eq!(current(), Backend::Flex);
    }
}
