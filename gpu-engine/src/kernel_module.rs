//! The kernel module of one device: compiled and loaded on the first
//! launch, its kernels looked up once each.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Mutex, OnceLock};

use ggraph_core::{Error, Result};

use crate::runtime::{CallError, RawFunction, RawModule, Runtime};

/// The loaded module (or why it could not be built) and the kernels found
/// in it so far.
#[derive(Default)]
pub(crate) struct KernelModule {
    module: OnceLock<std::result::Result<RawModule, String>>,
    functions: Mutex<HashMap<&'static str, RawFunction>>,
}

impl KernelModule {
    /// Kernel `name` of `rt`'s module (device `label` in errors).
    pub fn function(
        &self,
        rt: &dyn Runtime,
        label: &str,
        name: &'static str,
    ) -> Result<RawFunction> {
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = functions.get(name) {
            return Ok(*f);
        }
        let loaded = self.module.get_or_init(|| {
            rt.bind().map_err(|e| e.on(label).to_string())?;
            rt.load_module()
        });
        let module = match loaded {
            Ok(m) => *m,
            Err(e) => return Err(Error::backend(label, e.clone())),
        };
        let cname = CString::new(name).map_err(|_| Error::backend(label, "bad kernel name"))?;
        let f = rt.module_function(module, &cname).map_err(|e| match e {
            CallError::Failed { call, code } => {
                Error::backend(label, format!("{call}({name}) failed: {code}"))
            }
            e => e.on(label),
        })?;
        functions.insert(name, f);
        Ok(f)
    }
}
