//! With the `emulator` feature: compiles kernels/ggraph.cu as C++ for the
//! host emulator, with a launch table generated from the kernel names.

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    #[cfg(feature = "emulator")]
    emulator::build();
}

#[cfg(feature = "emulator")]
mod emulator {
    use std::fmt::Write;
    use std::path::PathBuf;

    include!("kernels/kernel_names.rs");

    pub fn build() {
        let source = std::fs::read_to_string("kernels/ggraph.cu").expect("kernels/ggraph.cu");
        let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
        let mut table = String::from(
            "extern \"C\" int ggraph_emu_launch(const char *name, unsigned gx, unsigned gy, unsigned gz,\n\
             unsigned bx, unsigned by, unsigned bz, unsigned shared_bytes, void **args, char *err, size_t errlen) {\n\
             \x20   dim3 g{gx, gy, gz}, b{bx, by, bz};\n",
        );
        for name in parse_kernel_names(&source) {
            writeln!(
                table,
                "    if (strcmp(name, \"{name}\") == 0) return emu::launch({name}, g, b, shared_bytes, args, err, errlen);"
            )
            .unwrap();
        }
        table.push_str(
            "    snprintf(err, errlen, \"no kernel named %s\", name);\n    return -1;\n}\n",
        );
        std::fs::write(out.join("emu_registry.inc"), table).expect("write emu_registry.inc");
        cc::Build::new()
            .cpp(true)
            .file("kernels/emu_main.cpp")
            .include("kernels")
            .include(&out)
            .flag_if_supported("-std=c++17")
            .flag_if_supported("-fno-strict-aliasing")
            .flag_if_supported("-Wno-unused-parameter")
            .flag_if_supported("-Wno-unused-function")
            .opt_level(2)
            .warnings(true)
            .compile("ggraph_gpu_emu");
    }
}
