//! Executing one statement on burn: what a run ([`crate::exec`]) and the memory experiment
//! ([`crate::memory`]) share. A leaf is created on its device; an op or cut statement takes its
//! inputs as its region sees them ([`enter`]) and runs under the injected fault, if any
//! ([`crate::fault`]).

use burn::tensor::{Device, FloatDType};

use crate::fault;
use crate::program::{Checkpointing, Cut, DeviceKind, Kind, Region};
use crate::value::DynTensor;

/// The message of a panic payload (`&str` or `String`; anything else is described).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<panic payload is not a string>".to_owned()
    }
}

/// Where the last panic was raised (`file:line:column`), on whichever thread: a panic in a
/// rayon kernel is raised on a pool thread and resumed on the statement's. Set by the panic
/// hook (main.rs), taken by the statement that caught it ([`crate::exec`]).
static LAST_PANIC_AT: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Records where a panic was raised (the panic hook calls it; cheap: no stack is resolved).
pub fn record_panic_location(at: Option<&std::panic::Location<'_>>) {
    let at = at.map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
    *LAST_PANIC_AT.lock().unwrap_or_else(|e| e.into_inner()) = at;
}

/// Where the last panic was raised, if one was recorded since the last call.
pub fn take_panic_location() -> Option<String> {
    LAST_PANIC_AT
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
}

/// The two devices a program uses.
pub struct Devices {
    plain: Device,
    pub autodiff: Device,
    /// The dtype leaves and module parameters are created in (the program's).
    pub dtype: FloatDType,
}

impl Devices {
    pub fn new() -> Self {
        Self::with_checkpointing(Checkpointing::Disabled)
    }

    /// The devices of a program whose autodiff device uses `checkpointing` (a tensor the
    /// program moves onto autodiff with `autodiff()` gets burn's default strategy, as burn
    /// documents).
    pub fn with_checkpointing(checkpointing: Checkpointing) -> Self {
        let plain = crate::backend::current().device();
        let autodiff = if plain.is_autodiff() {
            plain.clone()
        } else {
            plain.clone().autodiff()
        };
        let autodiff = match checkpointing {
            Checkpointing::Disabled => autodiff,
            Checkpointing::Balanced => autodiff.gradient_checkpointing(),
        };
        // Dropout draws its mask from the backend's RNG: a fixed seed per run keeps runs
        // reproducible.
        plain.seed(0);
        Devices {
            plain,
            autodiff,
            dtype: FloatDType::F32,
        }
    }

    /// A leaf statement's tensor: its data on the device it names, asked for its gradient if it
    /// requires grad (which panics on the plain device, as burn does).
    fn leaf(
        &self,
        shape: &[usize],
        data: &[f64],
        device: DeviceKind,
        require_grad: bool,
    ) -> DynTensor {
        let device = match device {
            DeviceKind::Plain => &self.plain,
            DeviceKind::Autodiff => &self.autodiff,
        };
        let t = DynTensor::from_f64(data.to_vec(), shape, device, self.dtype);
        if require_grad { t.require_grad() } else { t }
    }
}

/// An input as a statement in `region` sees it: off autodiff inside `no_grad`/`inference_mode`.
pub fn enter(region: Region, t: DynTensor) -> DynTensor {
    match region {
        Region::Grad => t,
        Region::NoGrad | Region::InferenceMode => t.without_autodiff(),
    }
}

/// The value of a leaf, op or cut statement; `value(i)` is the value of the earlier statement
/// `i` (as later statements see it). `None` for the other kinds (modules, transforms, apply,
/// param, backward), which only a run executes.
pub fn tensor(
    kind: &Kind,
    devices: &Devices,
    value: impl Fn(usize) -> DynTensor,
) -> Option<DynTensor> {
    Some(match kind {
        Kind::Leaf {
            shape,
            data,
            device,
            require_grad,
        } => devices.leaf(shape, data, *device, *require_grad),
        Kind::Op { op, inputs, region } => fault::execute(
            op,
            inputs.iter().map(|&i| enter(*region, value(i))).collect(),
        ),
        Kind::Cut { cut, input, region } => {
            let t = enter(*region, value(*input));
            fault::cut(*cut, &t).unwrap_or_else(|| match cut {
                Cut::Detach => t.detach(),
                Cut::WithoutAutodiff => t.without_autodiff(),
                Cut::Autodiff => t.autodiff(),
            })
        }
        Kind::Backward { .. }
        | Kind::Module { .. }
        | Kind::Transform { .. }
        | Kind::Apply { .. }
        | Kind::Param { .. }
        | Kind::Grad { .. }
        | Kind::ZeroGrad
        | Kind::Optimizer { .. }
        | Kind::Step { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::GradientCheckpointingStrategy;

    #[test]
    fn the_autodiff_device_has_the_programs_strategy() {
        let strategy = |c| {
            Devices::with_checkpointing(c)
                .autodiff
                .gradient_checkpointing_strategy()
        };
        assert_eq!(
            strategy(Checkpointing::Balanced),
            Some(GradientCheckpointingStrategy::Balanced)
        );
        assert_eq!(
            strategy(Checkpointing::Disabled),
            Some(GradientCheckpointingStrategy::Disabled)
        );
        assert_eq!(Devices::new().plain.gradient_checkpointing_strategy(), None);
    }
}
