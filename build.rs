//! Compiles every probes/*.bpf.c into a BPF object and generates its libbpf-rs skeleton in OUT_DIR.
//! The skeletons are included by src/probes (the only module that touches libbpf-rs), which loads
//! each object through its skeleton. The test-only objects of probes/test/*.bpf.c get skeletons
//! too, for its unit tests. A skeleton embeds its object with `include_bytes!` (`reference_obj`)
//! rather than as a generated array literal: the same bytes, far less Rust to compile.
//! It also lists every wrappers/*.toml (the built-in scanner profiles) in OUT_DIR/builtin_profiles.rs,
//! each embedded with `include_str!`, so a new scanner is a new TOML file and no Rust.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    builtin_profiles(&out);
    let include = Path::new("probes/include");
    // libbpf-cargo does not track #included headers itself.
    for header in fs::read_dir(include).expect("probes/include exists") {
        let header = header.expect("readable probes/include entry").path();
        println!("cargo:rerun-if-changed={}", header.display());
    }
    // The uprobe programs read argument registers (PT_REGS_PARMn), which need the target arch.
    let arch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("x86_64") => "x86",
        Ok("aarch64") => "arm64",
        Ok("riscv64") => "riscv",
        Ok(other) => panic!("no BPF register layout known for target arch {other}"),
        Err(_) => "x86",
    };
    let arch_define = format!("-D__TARGET_ARCH_{arch}");
    // The directories themselves too: a new probes/*.bpf.c must rerun this script (a file that
    // did not exist at the last run is in no rerun-if-changed line of its own).
    println!("cargo:rerun-if-changed=probes");
    let mut sources: Vec<PathBuf> = fs::read_dir("probes")
        .expect("probes/ exists")
        .map(|entry| entry.expect("readable probes/ entry").path())
        .filter(|path| path.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();
    for source in sources {
        println!("cargo:rerun-if-changed={}", source.display());
        let name = source
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".bpf.c"))
            .expect("probe file named <concern>.bpf.c");
        SkeletonBuilder::new()
            .source(&source)
            .clang_args([
                "-I",
                "probes/include",
                "-Wall",
                "-Wno-unused-function",
                &arch_define,
            ])
            .obj(out.join(format!("{name}.bpf.o")))
            .reference_obj(true)
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", source.display()));
    }
    // Test-only objects (probes/test/*.bpf.c) and their skeletons, for src/probes' unit tests.
    let mut tests: Vec<PathBuf> = fs::read_dir("probes/test")
        .expect("probes/test/ exists")
        .map(|entry| entry.expect("readable probes/test/ entry").path())
        .filter(|path| path.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    tests.sort();
    for source in tests {
        println!("cargo:rerun-if-changed={}", source.display());
        let name = source
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".bpf.c"))
            .expect("test probe file named <name>.bpf.c");
        SkeletonBuilder::new()
            .source(&source)
            .clang_args(["-I", "probes/include", "-Wall", &arch_define])
            .obj(out.join(format!("{name}.bpf.o")))
            .reference_obj(true)
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| panic!("building {}: {e:#}", source.display()));
    }
}

/// Writes OUT_DIR/builtin_profiles.rs: a `&[(file name, text)]` of every wrappers/*.toml, sorted
/// by file name, each text embedded with `include_str!` (which makes cargo rebuild on an edit);
/// watching the directory makes it rebuild when a profile is added or removed.
fn builtin_profiles(out: &Path) {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let dir = manifest.join("wrappers");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("wrappers/ exists")
        .map(|entry| entry.expect("readable wrappers/ entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    let mut list = String::from("&[\n");
    for file in files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .expect("profile file named <scanner>.toml in UTF-8");
        let path = file.to_str().expect("checkout path in UTF-8");
        list.push_str(&format!("    ({name:?}, include_str!({path:?})),\n"));
    }
    list.push_str("]\n");
    fs::write(out.join("builtin_profiles.rs"), list).expect("writable OUT_DIR");
}
