//! Building the kernel source with a run-time compiler (NVRTC, hiprtc):
//! the same sequence of calls for each, written once here. Create a
//! program, compile it, then read its code, or its log when it did not
//! compile; the program is destroyed in every case.

use std::ffi::{CStr, CString, c_char};

/// The entry points of a run-time compiler that building one program
/// takes. The `bool`s say whether a call succeeded.
pub trait ProgramCompiler {
    /// The compiler's program handle.
    type Program: Copy;

    /// A new program of `source`, named `name` (no headers).
    ///
    /// # Safety
    /// The compiler's library is loaded.
    unsafe fn create(&self, source: &CStr, name: &CStr) -> Result<Self::Program, String>;

    /// Compiles with `options`; the error is the compiler's result code in
    /// words (its log is added by [`build_program`]).
    ///
    /// # Safety
    /// `program` came from `create`; the options are NUL-terminated.
    unsafe fn compile(
        &self,
        program: Self::Program,
        options: &[*const c_char],
    ) -> Result<(), String>;

    /// # Safety
    /// `program` came from `create`.
    unsafe fn log_size(&self, program: Self::Program, size: &mut usize) -> bool;

    /// # Safety
    /// `out` holds `log_size` bytes.
    unsafe fn log(&self, program: Self::Program, out: *mut c_char) -> bool;

    /// # Safety
    /// `program` compiled.
    unsafe fn code_size(&self, program: Self::Program, size: &mut usize) -> bool;

    /// # Safety
    /// `out` holds `code_size` bytes.
    unsafe fn code(&self, program: Self::Program, out: *mut c_char) -> bool;

    /// The call that gives the code (`nvrtcGetCUBIN`), for errors.
    fn code_call(&self) -> &'static str;

    /// Whether the code is NUL-terminated text (PTX) rather than a binary.
    fn code_is_text(&self) -> bool {
        false
    }

    /// # Safety
    /// `program` came from `create` and is not used afterwards.
    unsafe fn destroy(&self, program: Self::Program);
}

/// Bytes a compiler hands out as a size query, then a copy into a buffer
/// of that size; `None` when either call fails or the size is 0.
fn read_sized(
    size: impl FnOnce(&mut usize) -> bool,
    fill: impl FnOnce(*mut c_char) -> bool,
) -> Option<Vec<u8>> {
    let mut n = 0usize;
    if !size(&mut n) || n == 0 {
        return None;
    }
    let mut buf = vec![0u8; n];
    fill(buf.as_mut_ptr() as *mut c_char).then_some(buf)
}

/// Compiles `source` (named `ggraph.cu`) with `options`: the code, or an
/// error with the compiler's log.
///
/// # Safety
/// `compiler`'s library is loaded and its entry points are the
/// compiler's.
pub unsafe fn build_program<C: ProgramCompiler>(
    compiler: &C,
    source: &str,
    options: &[String],
) -> Result<Vec<u8>, String> {
    let src = CString::new(source).map_err(|_| "source has a NUL byte")?;
    let name = CString::new("ggraph.cu").expect("no NUL");
    let opts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()).expect("no NUL in options"))
        .collect();
    let ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
    // SAFETY: valid NUL-terminated strings; the program is used only
    // between create and destroy.
    unsafe {
        let program = compiler.create(&src, &name)?;
        let result = match compiler.compile(program, &ptrs) {
            Err(what) => {
                let log = read_sized(
                    |n| compiler.log_size(program, n),
                    |out| compiler.log(program, out),
                )
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .trim_end_matches('\0')
                        .to_string()
                })
                .unwrap_or_default();
                Err(format!("{what}\n{log}"))
            }
            Ok(()) => {
                let mut code = read_sized(
                    |n| compiler.code_size(program, n),
                    |out| compiler.code(program, out),
                )
                .unwrap_or_default();
                if compiler.code_is_text() && code.last() != Some(&0) {
                    code.push(0);
                }
                let empty = code.len() <= usize::from(compiler.code_is_text());
                if empty {
                    Err(format!("{} gave nothing", compiler.code_call()))
                } else {
                    Ok(code)
                }
            }
        };
        compiler.destroy(program);
        result
    }
}
